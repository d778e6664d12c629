// The Live Stream: inbound events and what each connection did with them, as server-sent events,
// filterable by input, connection, direction, event type and MPID.

import { api } from '../lib/api.js';
import { h, page } from '../lib/dom.js';
import { onLeave } from '../lib/router.js';

let source = null;
function stop() { source?.close(); source = null; }

export async function livePage() {
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
        h('td', { class: `outcome-${r.outcome}` }, r.outcome), h('td', {}, r.setting ? `by ${r.reason ?? r.setting}` : [r.status ? `HTTP ${r.status} in ${r.latency_ms} ms` : (r.error ?? ''), r.note].filter(Boolean).join(' · ')))))
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
      h('td', { class: item.outcome ? `outcome-${item.outcome}` : '' }, item.outcome ? `${item.outcome}${item.setting ? ` (${item.reason ?? item.setting})` : item.status ? ` (${item.status})` : ''}${item.note ? ` · ${item.note}` : ''}` : ''),
      h('td', {}, item.mpid ?? ''));
    if (item.direction === 'inbound') row.addEventListener('click', () => showDetail(item, row));
    rows.prepend(row);
    while (rows.children.length > 500) rows.lastChild.remove();
  };

  const connect = () => {
    stop();
    const query = new URLSearchParams();
    if (input.value) query.set('input_id', input.value);
    if (connection.value) query.set('connection_id', connection.value);
    query.set('direction', direction.value);
    if (eventType.value) query.set('event_type', eventType.value);
    if (mpid.value) query.set('mpid', mpid.value);
    source = new EventSource(`/api/v1/live-stream?${query}`);
    source.onopen = () => { status.textContent = 'Live: events appear as they arrive.'; };
    source.onerror = () => { status.textContent = 'Disconnected; retrying…'; };
    source.addEventListener('item', (e) => add(JSON.parse(e.data)));
    source.addEventListener('sampled', (e) => { status.textContent = `Busy: showing a sample (${JSON.parse(e.data).skipped} events skipped in the last second).`; });
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
  // Leaving the page closes the stream, so no hidden page keeps a connection to Boson open.
  onLeave(stop);
}
