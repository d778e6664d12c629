// Boson's dashboard: a small single-page app over the admin API (no build step, no framework).
// Every read and write goes through /api/v1 with the session cookie and its CSRF header.
'use strict';

const PLATFORMS = { ios: 'iOS', android: 'Android', web: 'Web', custom_feed: 'Custom feed' };
const EVENT_SETTINGS = [
  ['send_custom_events', 'Send Custom Events'],
  ['send_lifecycle_events', 'Send Lifecycle Events'],
  ['send_screen_views', 'Send Screen Views'],
  ['send_commerce_events', 'Send Commerce Events'],
  ['send_crash_events', 'Send Crash Events'],
  ['send_network_performance_events', 'Send Network Performance Events'],
  ['send_push_registrations_and_receipts', 'Send Push Registrations and Receipts'],
  ['send_profile_change_events', 'Send Profile Change Events'],
  ['include_user_identity_change_events', 'Include User Identity Change Events'],
  ['include_user_attribute_change_events', 'Include User Attribute Change Events'],
  ['include_metadata', 'Include Metadata'],
  ['include_location_information', 'Include Location Information'],
  ['include_event_batch_location', 'Include Event Batch Location'],
  ['send_batches_without_events', 'Send Batches without Events'],
];

// mParticle's defaults for these are off; every other event setting defaults on.
const OFF_BY_DEFAULT = ['include_user_identity_change_events', 'include_user_attribute_change_events', 'include_event_batch_location'];

let csrf = null;
let metadataFields = [];
const main = document.getElementById('main');
const modal = document.getElementById('modal');

// ---- helpers ----------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else if (v !== false && v != null) el.setAttribute(k, v);
  }
  for (const child of children.flat()) el.append(child instanceof Node ? child : document.createTextNode(String(child ?? '')));
  return el;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `request failed (${status})`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (csrf && method !== 'GET') headers['x-boson-csrf'] = csrf;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (response.status === 401 && !path.startsWith('/dashboard/login')) { csrf = null; location.hash = '#/signin'; }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function page(title, ...content) {
  main.replaceChildren(h('h1', {}, title), ...content);
  main.focus();
}

function errorLine(message) { return h('p', { class: 'error', role: 'alert' }, message); }

function copyButton(value, label) {
  return h('button', { class: 'secondary', type: 'button', 'aria-label': `Copy ${label}`, onclick: async (e) => {
    await navigator.clipboard?.writeText(value).catch(() => {});
    e.target.textContent = 'Copied';
    setTimeout(() => { e.target.textContent = 'Copy'; }, 1200);
  } }, 'Copy');
}

function openModal(...content) {
  modal.replaceChildren(h('div', { class: 'card' }, ...content));
  modal.hidden = false;
  modal.querySelector('button, select, input')?.focus();
}
function closeModal() { modal.hidden = true; modal.replaceChildren(); }
modal.addEventListener('keydown', (e) => { if (e.key === 'Escape') closeModal(); });

// ---- sign in ----------------------------------------------------------------------------------

function signIn() {
  stopLive();
  document.getElementById('nav').hidden = true;
  const token = h('input', { type: 'password', id: 'token', autocomplete: 'current-password', required: true });
  const error = h('div');
  const form = h('form', { class: 'card', onsubmit: async (e) => {
    e.preventDefault();
    try {
      csrf = (await api('POST', '/dashboard/login', { token: token.value })).csrf;
      location.hash = '#/connections';
    } catch (err) { error.replaceChildren(errorLine(err.message)); token.focus(); }
  } },
  h('label', { for: 'token' }, 'Admin token'),
  h('p', { class: 'muted' }, 'Printed by Boson on its first start, or the value of BOSON_ADMIN_TOKEN.'),
  token, error, h('p', {}, h('button', { type: 'submit' }, 'Sign in')));
  page('Sign in', form);
}

// ---- inputs -----------------------------------------------------------------------------------

async function inputsPage() {
  const inputs = await api('GET', '/api/v1/inputs');
  const create = inputForm();
  if (!inputs.length) return page('Inputs', h('div', { class: 'card empty' }, 'No inputs yet. Pick a platform below to get an API key and secret.'), create);
  const groups = Object.entries(PLATFORMS).map(([platform, label]) => {
    const mine = inputs.filter((i) => i.platform === platform);
    if (!mine.length) return null;
    return h('div', { class: 'card' }, h('h2', {}, label), ...mine.map(inputRow));
  }).filter(Boolean);
  page('Inputs', ...groups, create);
}

function inputRow(input) {
  const error = h('div');
  return h('div', { class: 'row spread', 'data-input': input.id },
    h('div', {},
      h('strong', {}, input.name),
      h('div', { class: 'row' }, h('span', { class: 'muted' }, 'Key'), h('code', { class: 'api-key' }, input.api_key), copyButton(input.api_key, 'API key')),
      h('div', { class: 'row' }, h('span', { class: 'muted' }, 'Secret'), h('code', { class: 'api-secret' }, input.api_secret), copyButton(input.api_secret, 'API secret')),
      error),
    h('button', { class: 'secondary', onclick: async () => {
      if (!confirm('Rotate the secret? The current one stops working at once.')) return;
      try { await api('POST', `/api/v1/inputs/${input.id}/rotate-secret`); route(); } catch (err) { error.replaceChildren(errorLine(err.message)); }
    } }, 'Rotate secret'));
}

function inputForm() {
  let platform = null;
  const name = h('input', { type: 'text', id: 'input-name', placeholder: 'e.g. Web shop' });
  const error = h('div');
  const tiles = h('div', { class: 'tiles', role: 'group', 'aria-label': 'Platform' }, ...Object.entries(PLATFORMS).map(([value, label]) =>
    h('button', { type: 'button', class: 'tile', 'aria-pressed': 'false', 'data-platform': value, onclick: (e) => {
      platform = value;
      tiles.querySelectorAll('.tile').forEach((t) => t.setAttribute('aria-pressed', String(t === e.currentTarget)));
    } }, label)));
  return h('form', { class: 'card', onsubmit: async (e) => {
    e.preventDefault();
    if (!platform) return error.replaceChildren(errorLine('Pick a platform.'));
    try { await api('POST', '/api/v1/inputs', { name: name.value, platform }); route(); }
    catch (err) { error.replaceChildren(errorLine(err.message)); }
  } }, h('h2', {}, 'New input'), tiles, h('label', { for: 'input-name' }, 'Name'), name, error,
  h('p', {}, h('button', { type: 'submit' }, 'Create input')));
}

// ---- outputs ----------------------------------------------------------------------------------

async function outputsPage() {
  const outputs = await api('GET', '/api/v1/outputs');
  const list = outputs.length
    ? h('div', { class: 'card' }, h('h2', {}, 'Webhook configurations'), h('table', {},
        h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'POST URL'), h('th', {}, '')),
        ...outputs.map((o) => outputRow(o))))
    : h('div', { class: 'card empty' }, 'No outputs yet. Choose "webhooks" to add a configuration.');
  const directory = h('div', { class: 'card' }, h('h2', {}, 'Directory'),
    h('div', { class: 'tiles' }, h('button', { class: 'tile', id: 'webhooks-tile', onclick: () => openModal(outputForm()) }, 'webhooks')));
  page('Outputs', directory, list);
}

function outputRow(output) {
  const error = h('td');
  return h('tr', { 'data-output': output.id },
    h('td', {}, output.name), h('td', {}, h('code', {}, output.settings.url)),
    h('td', {}, h('div', { class: 'row' },
      h('button', { class: 'secondary', onclick: () => openModal(outputForm(output)) }, 'Edit'),
      h('button', { class: 'danger', onclick: async () => {
        if (!confirm(`Delete ${output.name}?`)) return;
        try { await api('DELETE', `/api/v1/outputs/${output.id}`); route(); } catch (err) { error.replaceChildren(errorLine(err.message)); }
      } }, 'Delete')), error));
}

function outputForm(existing) {
  const s = existing?.settings || {};
  const name = h('input', { type: 'text', id: 'output-name', value: existing?.name || '' });
  const url = h('input', { type: 'url', id: 'output-url', value: s.url || '', placeholder: 'https://example.com/hook' });
  const auth = h('input', { type: 'text', id: 'output-auth', value: s.authorization_header || '', placeholder: 'Bearer …' });
  const deviceId = h('input', { type: 'checkbox', id: 'output-deviceid', checked: Boolean(s.include_mp_deviceid) });
  const errors = { name: h('div'), url: h('div'), form: h('div') };
  return h('form', { onsubmit: async (e) => {
    e.preventDefault();
    Object.values(errors).forEach((el) => el.replaceChildren());
    const settings = { url: url.value, include_mp_deviceid: deviceId.checked };
    if (auth.value) settings.authorization_header = auth.value;
    try {
      if (existing) await api('PATCH', `/api/v1/outputs/${existing.id}`, { name: name.value, settings });
      else await api('POST', '/api/v1/outputs', { name: name.value, kind: 'webhook', settings });
      closeModal(); route();
    } catch (err) {
      const target = err.code === 'invalid_name' ? errors.name : err.code === 'invalid_url' ? errors.url : errors.form;
      target.replaceChildren(errorLine(err.message));
    }
  } }, h('h2', {}, existing ? 'Edit webhook configuration' : 'New webhook configuration'),
  h('label', { for: 'output-name' }, 'Configuration name'), name, errors.name,
  h('label', { for: 'output-url' }, 'POST URL'), url, errors.url,
  h('label', { for: 'output-auth' }, 'Authorization Header'), auth,
  h('label', { class: 'check' }, deviceId, 'Include MP DeviceId'), errors.form,
  h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save'), h('button', { type: 'button', class: 'secondary', onclick: closeModal }, 'Cancel')));
}

// ---- connection settings form -------------------------------------------------------------------

function settingsForm(settings, submitLabel, onSubmit) {
  const status = h('input', { type: 'checkbox', id: 'setting-status', checked: settings.status !== 'inactive' });
  const asBatch = h('input', { type: 'checkbox', id: 'setting-send_as_batch', checked: Boolean(settings.send_as_batch) });
  const uniqueId = h('input', { type: 'text', id: 'setting-unique_id', value: settings.unique_id || '' });
  const rows = h('div', { id: 'exclusions' });
  const addRow = (value = '') => {
    const select = h('select', { 'aria-label': 'Metadata field' }, h('option', { value: '' }, 'Unselected'),
      ...metadataFields.map((f) => h('option', { value: f.path, selected: f.path === value }, `${f.label} (${f.path})`)));
    const row = h('div', { class: 'row' }, select, h('button', { type: 'button', class: 'link', 'aria-label': 'Remove field', onclick: () => row.remove() }, '✕'));
    rows.append(row);
  };
  (settings.metadata_field_exclusions || []).forEach(addRow);
  const boxes = EVENT_SETTINGS.map(([key]) => [key, h('input', { type: 'checkbox', id: `setting-${key}`, checked: key in settings ? settings[key] : !OFF_BY_DEFAULT.includes(key) })]);
  const error = h('div');
  return h('form', { class: 'card', onsubmit: async (e) => {
    e.preventDefault();
    const out = { status: status.checked ? 'active' : 'inactive', send_as_batch: asBatch.checked, unique_id: uniqueId.value || null,
      metadata_field_exclusions: [...rows.querySelectorAll('select')].map((s) => s.value).filter(Boolean) };
    for (const [key, box] of boxes) out[key] = box.checked;
    try { await onSubmit(out); } catch (err) { error.replaceChildren(errorLine(err.message)); }
  } },
  h('h2', {}, 'Connection settings'),
  h('label', { class: 'check' }, status, 'Connection Status: Active'),
  h('label', { for: 'setting-unique_id' }, 'Unique ID'), uniqueId,
  h('label', {}, 'Metadata Field Exclusion'), rows,
  h('button', { type: 'button', class: 'secondary', id: 'add-exclusion', onclick: () => addRow() }, '+ Add'),
  h('label', { class: 'check' }, asBatch, 'Send as Batch'),
  h('div', { class: 'grid2' }, ...boxes.map(([key, box]) => h('label', { class: 'check' }, box, EVENT_SETTINGS.find(([k]) => k === key)[1]))),
  error, h('p', {}, h('button', { type: 'submit', id: 'submit-settings' }, submitLabel)));
}

// ---- connections ------------------------------------------------------------------------------

function stateOf(connection, stats) {
  if (connection.settings.status === 'inactive') return 'inactive';
  return ['retry', 'dead_letter'].includes(stats?.last_outcome) ? 'failing' : 'active';
}

async function connectionsPage() {
  const [inputs, outputs, connections, stats] = await Promise.all([
    api('GET', '/api/v1/inputs'), api('GET', '/api/v1/outputs'), api('GET', '/api/v1/connections'), api('GET', '/api/v1/connection-stats')]);
  const byConnection = Object.fromEntries(stats.items.map((s) => [s.connection_id, s]));
  const connect = h('a', { class: 'button', href: '#/connect', id: 'connect' }, 'Connect');
  if (!connections.length) {
    const hint = !inputs.length ? 'Create an input first.' : !outputs.length ? 'Create a webhook output next.' : 'Connect an input to an output to start forwarding.';
    return page('Connections', h('div', { class: 'row spread' }, h('span', { class: 'muted' }, hint), connect),
      h('div', { class: 'card empty' }, 'No connections yet.'));
  }
  const table = h('table', {}, h('tr', {}, h('th', {}, 'Input'), h('th', {}, 'Output'), h('th', {}, 'State'), h('th', {}, 'Events forwarded'), h('th', {}, '')),
    ...connections.map((c) => {
      const state = stateOf(c, byConnection[c.id]);
      return h('tr', { 'data-connection': c.id },
        h('td', {}, inputs.find((i) => i.id === c.input_id)?.name), h('td', {}, outputs.find((o) => o.id === c.output_id)?.name),
        h('td', {}, h('span', { class: `badge ${state}` }, state)), h('td', {}, byConnection[c.id]?.events_forwarded ?? 0),
        h('td', {}, h('a', { href: `#/connections/${c.id}` }, 'Details')));
    }));
  page('Connections', h('div', { class: 'row spread' }, h('span', { class: 'muted' }, 'Inputs on the left, outputs on the right.'), connect),
    diagram(inputs, outputs, connections, byConnection), h('div', { class: 'card' }, table));
}

// Inputs in a column on the left, outputs on the right, one line per connection.
function diagram(inputs, outputs, connections, stats) {
  const NS = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs, text) => { const el = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v); if (text != null) el.textContent = text; return el; };
  const rowH = 64, width = 900, boxW = 220;
  const height = Math.max(inputs.length, outputs.length, 1) * rowH + 24;
  const svg = s('svg', { class: 'diagram', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'Connections diagram', id: 'diagram' });
  const y = (i) => 20 + i * rowH + 20;
  const node = (x, i, label, id) => { const g = s('g', { class: 'node', 'data-node': id }); g.append(s('rect', { x, y: y(i) - 20, width: boxW, height: 40, rx: 8 }), s('text', { x: x + 12, y: y(i) + 5 }, label)); return g; };
  connections.forEach((c) => {
    const i = inputs.findIndex((x) => x.id === c.input_id), o = outputs.findIndex((x) => x.id === c.output_id);
    if (i < 0 || o < 0) return;
    const state = stateOf(c, stats[c.id]);
    const x1 = 20 + boxW, x2 = width - 20 - boxW, mid = (x1 + x2) / 2;
    svg.append(s('path', { class: `edge ${state}`, 'data-edge': c.id, d: `M${x1},${y(i)} C${mid},${y(i)} ${mid},${y(o)} ${x2},${y(o)}` }));
    svg.append(s('text', { class: 'edge-label', x: mid - 40, y: (y(i) + y(o)) / 2 - 6 }, `${state} · ${stats[c.id]?.events_forwarded ?? 0} events`));
  });
  inputs.forEach((input, i) => svg.append(node(20, i, `${input.name} (${PLATFORMS[input.platform]})`, input.id)));
  outputs.forEach((output, o) => svg.append(node(width - 20 - boxW, o, `${output.name} (webhook)`, output.id)));
  return svg;
}

async function connectPage() {
  const [inputs, outputs] = await Promise.all([api('GET', '/api/v1/inputs'), api('GET', '/api/v1/outputs')]);
  if (!inputs.length || !outputs.length) {
    return page('Connect', h('div', { class: 'card empty' }, !inputs.length ? 'Create an input first (Inputs).' : 'Create a webhook output first (Outputs).'));
  }
  const input = h('select', { id: 'connect-input' }, ...inputs.map((i) => h('option', { value: i.id }, `${i.name} (${PLATFORMS[i.platform]})`)));
  const chosen = h('div');
  const pickOutput = () => {
    const config = h('select', { id: 'connect-output' }, ...outputs.map((o) => h('option', { value: o.id }, o.name)));
    openModal(h('h2', {}, 'Connect Output'),
      h('div', { class: 'tiles' }, h('span', { class: 'tile', 'aria-pressed': 'true' }, 'webhooks')),
      h('label', { for: 'connect-output' }, 'Configuration'), config,
      h('p', { class: 'row' }, h('button', { id: 'choose-output', onclick: () => {
        const output = outputs.find((o) => o.id === config.value);
        closeModal();
        chosen.replaceChildren(h('p', {}, 'Output: ', h('strong', {}, output.name)),
          settingsForm({}, 'Add Connection', async (settings) => {
            const created = await api('POST', '/api/v1/connections', { input_id: input.value, output_id: output.id, settings });
            location.hash = '#/connections';
            return created;
          }));
      } }, 'Configure'), h('button', { class: 'secondary', onclick: closeModal }, 'Cancel')));
  };
  page('Connect', h('div', { class: 'card' }, h('label', { for: 'connect-input' }, 'Input'), input,
    h('p', {}, h('button', { id: 'connect-output-button', onclick: pickOutput }, 'Connect Output'))), chosen);
}

async function connectionPage(id) {
  const [connection, stats, attempts, letters] = await Promise.all([
    api('GET', `/api/v1/connections/${id}`), api('GET', '/api/v1/connection-stats'),
    api('GET', `/api/v1/connections/${id}/attempts?limit=20`), api('GET', `/api/v1/connections/${id}/dead-letters?limit=20`)]);
  const mine = stats.items.find((s) => s.connection_id === id);
  const state = stateOf(connection, mine);
  const summary = h('div', { class: 'card' }, h('div', { class: 'row' }, h('span', { class: `badge ${state}`, id: 'connection-state' }, state),
    h('span', {}, `${mine?.events_forwarded ?? 0} events forwarded`)),
    mine?.last_error ? h('p', { class: 'error' }, `Last error: ${mine.last_error}`) : h('p', { class: 'muted' }, 'No errors.'));
  const attemptRows = attempts.items.length
    ? h('table', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Outcome'), h('th', {}, 'Status'), h('th', {}, 'Requests'), h('th', {}, 'Error')),
        ...attempts.items.map((a) => h('tr', {}, h('td', {}, new Date(a.attempted_at).toLocaleString()), h('td', {}, a.outcome), h('td', {}, a.status ?? '–'), h('td', {}, a.requests), h('td', {}, a.error ?? ''))))
    : h('p', { class: 'empty' }, 'No delivery attempts yet. Send an event to the input.');
  const letterRows = letters.items.length
    ? h('table', {}, h('tr', {}, h('th', {}, 'Batch'), h('th', {}, 'Status'), h('th', {}, 'Error'), h('th', {}, '')),
        ...letters.items.map((d) => { const error = h('div'); return h('tr', {}, h('td', {}, d.batch_id), h('td', {}, d.status ?? '–'), h('td', {}, d.error, error),
          h('td', {}, h('button', { class: 'secondary', onclick: async () => {
            try { await api('POST', `/api/v1/connections/${id}/dead-letters/${d.id}/replay`); route(); } catch (err) { error.replaceChildren(errorLine(err.message)); }
          } }, 'Replay'))); }))
    : h('p', { class: 'empty' }, 'No dead letters.');
  const remove = h('button', { class: 'danger', onclick: async () => {
    if (!confirm('Delete this connection? Pending deliveries are dropped.')) return;
    await api('DELETE', `/api/v1/connections/${id}`); location.hash = '#/connections';
  } }, 'Delete connection');
  page('Connection', summary,
    settingsForm(connection.settings, 'Save', async (settings) => { await api('PATCH', `/api/v1/connections/${id}`, { settings }); route(); }),
    h('div', { class: 'card' }, h('h2', {}, 'Recent delivery attempts'), attemptRows),
    h('div', { class: 'card' }, h('h2', {}, 'Dead letters'), letterRows), remove);
}

// ---- live stream ------------------------------------------------------------------------------

let liveSource = null;
function stopLive() { liveSource?.close(); liveSource = null; }

async function livePage() {
  const [inputs, connections, outputs] = await Promise.all([api('GET', '/api/v1/inputs'), api('GET', '/api/v1/connections'), api('GET', '/api/v1/outputs')]);
  const outputName = (c) => outputs.find((o) => o.id === c.output_id)?.name ?? c.id;
  const connectionName = Object.fromEntries(connections.map((c) => [c.id, outputName(c)]));
  const select = (id, label, options) => [h('label', { for: id }, label), h('select', { id }, h('option', { value: '' }, 'All'), ...options)];
  const [inputLabel, input] = select('live-input', 'Input', inputs.map((i) => h('option', { value: i.id }, i.name)));
  const [connLabel, connection] = select('live-connection', 'Connection', connections.map((c) => h('option', { value: c.id }, outputName(c))));
  const direction = h('select', { id: 'live-direction' }, h('option', { value: 'both' }, 'Both In and Out'), h('option', { value: 'inbound' }, 'Inbound'), h('option', { value: 'outbound' }, 'Outbound'));
  const eventType = h('input', { type: 'text', id: 'live-event-type', placeholder: 'e.g. custom_event' });
  const mpid = h('input', { type: 'text', id: 'live-mpid', placeholder: 'MPID' });
  const status = h('span', { class: 'muted', id: 'live-status' }, 'Connecting…');
  const rows = h('tbody');
  const detail = h('div', { id: 'live-detail', class: 'card' }, h('p', { class: 'muted' }, 'Click an inbound event to see its JSON and what each connection did with it.'));
  const outcomes = new Map();
  let paused = false;
  const pause = h('button', { class: 'secondary', type: 'button', onclick: () => { paused = !paused; pause.textContent = paused ? 'Resume' : 'Pause'; } }, 'Pause');
  const clear = h('button', { class: 'secondary', type: 'button', onclick: () => { rows.replaceChildren(); outcomes.clear(); } }, 'Clear Entries');

  const showDetail = (item, row) => {
    rows.querySelectorAll('tr.selected').forEach((r) => r.classList.remove('selected'));
    row.classList.add('selected');
    const results = outcomes.get(`${item.batch_id}:${item.index}`) || [];
    detail.replaceChildren(h('h2', {}, `${item.event_type} · batch ${item.batch_id}`),
      h('pre', { class: 'json' }, JSON.stringify(item.event, null, 2)),
      h('h2', {}, 'Connections'),
      results.length ? h('table', { id: 'live-outcomes' }, ...results.map((r) => h('tr', {}, h('td', {}, connectionName[r.connection_id] ?? r.connection_id),
        h('td', { class: `outcome-${r.outcome}` }, r.outcome), h('td', {}, r.setting ? `by ${r.setting}` : r.status ? `HTTP ${r.status} in ${r.latency_ms} ms` : (r.error ?? '')))))
        : h('p', { class: 'muted' }, 'No connection has reported on this event yet.'));
  };

  const add = (item) => {
    if (item.direction === 'outbound') {
      const key = `${item.batch_id}:${item.index}`;
      outcomes.set(key, [...(outcomes.get(key) || []), item]);
    }
    if (paused) return;
    const row = h('tr', { class: item.direction },
      h('td', {}, new Date(item.at).toLocaleTimeString()),
      h('td', {}, item.direction === 'inbound' ? '→ in' : 'out →'),
      h('td', {}, item.event_type),
      h('td', {}, item.direction === 'inbound' ? (inputs.find((i) => i.id === item.input_id)?.name ?? '') : (connectionName[item.connection_id] ?? '')),
      h('td', { class: item.outcome ? `outcome-${item.outcome}` : '' }, item.outcome ? `${item.outcome}${item.setting ? ` (${item.setting})` : item.status ? ` (${item.status})` : ''}` : ''),
      h('td', {}, item.mpid ?? ''));
    if (item.direction === 'inbound') row.addEventListener('click', () => showDetail(item, row));
    rows.prepend(row);
    while (rows.children.length > 500) rows.lastChild.remove();
  };

  const connect = () => {
    stopLive();
    const query = new URLSearchParams();
    if (input.value) query.set('input_id', input.value);
    if (connection.value) query.set('connection_id', connection.value);
    query.set('direction', direction.value);
    if (eventType.value) query.set('event_type', eventType.value);
    if (mpid.value) query.set('mpid', mpid.value);
    liveSource = new EventSource(`/api/v1/live-stream?${query}`);
    liveSource.onopen = () => { status.textContent = 'Live: events appear as they arrive.'; };
    liveSource.onerror = () => { status.textContent = 'Disconnected; retrying…'; };
    liveSource.addEventListener('item', (e) => add(JSON.parse(e.data)));
    liveSource.addEventListener('sampled', (e) => { status.textContent = `Busy: showing a sample (${JSON.parse(e.data).skipped} events skipped in the last second).`; });
  };
  for (const el of [input, connection, direction]) el.addEventListener('change', connect);
  for (const el of [eventType, mpid]) el.addEventListener('change', connect);

  page('Live Stream',
    h('div', { class: 'card filters' },
      h('div', {}, inputLabel, input), h('div', {}, connLabel, connection),
      h('div', {}, h('label', { for: 'live-direction' }, 'Message Direction'), direction),
      h('div', {}, h('label', { for: 'live-event-type' }, 'Event type'), eventType),
      h('div', {}, h('label', { for: 'live-mpid' }, 'MPID'), mpid)),
    h('div', { class: 'row spread' }, status, h('div', { class: 'row' }, pause, clear)),
    h('div', { class: 'card stream' }, h('table', { id: 'live-table' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Time'), h('th', {}, 'Direction'), h('th', {}, 'Event'), h('th', {}, 'Input / connection'), h('th', {}, 'Outcome'), h('th', {}, 'MPID'))), rows)),
    detail);
  connect();
}

// ---- routing ----------------------------------------------------------------------------------

async function route() {
  const hash = location.hash || '#/connections';
  if (!csrf) {
    const session = await api('GET', '/dashboard/session');
    if (session.signed_in) csrf = session.csrf;
  }
  if (!csrf) return signIn();
  document.getElementById('nav').hidden = false;
  if (!metadataFields.length) metadataFields = (await api('GET', '/api/v1/metadata-fields')).items;
  const [, section, id] = hash.split('/');
  if (section !== 'live') stopLive();
  document.querySelectorAll('nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === section));
  try {
    if (section === 'inputs') await inputsPage();
    else if (section === 'outputs') await outputsPage();
    else if (section === 'connect') await connectPage();
    else if (section === 'live') await livePage();
    else if (section === 'connections' && id) await connectionPage(id);
    else await connectionsPage();
  } catch (err) { page('Something went wrong', errorLine(err.message)); }
}

document.getElementById('signout').addEventListener('click', async () => {
  stopLive();
  await api('POST', '/dashboard/logout').catch(() => {});
  csrf = null; location.hash = '#/signin';
});
window.addEventListener('hashchange', route);
route();
