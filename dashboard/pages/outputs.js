// Outputs: the "webhooks" directory tile, the webhook configurations, and their create/edit form
// (with custom headers), and each output's Standard Webhooks signing secret: generate or rotate it,
// shown once to copy, or disable signing.

import { api } from '../lib/api.js';
import { closeModal, copyButton, errorLine, h, openModal, page } from '../lib/dom.js';
import { route } from '../lib/router.js';

export async function outputsPage() {
  const outputs = await api('GET', '/api/v1/outputs');
  const list = outputs.length
    ? h('div', { class: 'card' }, h('h2', {}, 'Webhook configurations'), h('table', {},
        h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'POST URL'), h('th', {}, 'Signing'), h('th', {}, '')),
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
    h('td', {}, output.signing?.enabled ? h('span', { class: 'badge active' }, 'signed') : h('span', { class: 'badge inactive' }, 'unsigned')),
    h('td', {}, h('div', { class: 'row' },
      h('button', { class: 'secondary', onclick: () => openModal(signingDialog(output)) }, 'Signing secret'),
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
  const headers = headerRows(s.custom_headers ?? {});
  const errors = { name: h('div'), url: h('div'), form: h('div') };
  return h('form', { onsubmit: async (e) => {
    e.preventDefault();
    Object.values(errors).forEach((el) => el.replaceChildren());
    const settings = { url: url.value, include_mp_deviceid: deviceId.checked, custom_headers: headers.read() };
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
  h('label', { class: 'check' }, deviceId, 'Include MP DeviceId'),
  headers.block, errors.form,
  h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save'), h('button', { type: 'button', class: 'secondary', onclick: closeModal }, 'Cancel')));
}

/** Custom headers: name/value rows, sent with every request to the output. */
function headerRows(current) {
  const rows = h('div', { id: 'output-headers' });
  const add = (name = '', value = '') => {
    const row = h('div', { class: 'row header-row' },
      h('input', { type: 'text', 'aria-label': 'Header name', value: name, placeholder: 'X-Team' }),
      h('input', { type: 'text', 'aria-label': 'Header value', value, placeholder: 'growth' }),
      h('button', { type: 'button', class: 'link', 'aria-label': 'Remove header', onclick: () => row.remove() }, '✕'));
    rows.append(row);
  };
  Object.entries(current).forEach(([name, value]) => add(name, value));
  return {
    block: h('div', { class: 'setting' }, h('span', { class: 'field-label' }, 'Custom headers'),
      h('small', { class: 'help' }, 'Sent with every request to this output, e.g. a key your endpoint expects. Content-Type, Host, Content-Length and webhook-* are set by Boson and cannot be chosen.'),
      rows, h('button', { type: 'button', class: 'secondary', id: 'add-header', onclick: () => add() }, '+ Add header')),
    read: () => Object.fromEntries([...rows.querySelectorAll('.header-row')]
      .map((row) => [...row.querySelectorAll('input')].map((i) => i.value.trim()))
      .filter(([name]) => name)),
  };
}

/** The output's signing secret: its state, and generate/rotate, the new secret shown once. */
function signingDialog(output) {
  const signing = output.signing ?? {};
  const shown = h('div', { id: 'signing-result' });
  const state = signing.enabled
    ? [h('p', {}, `Requests are signed (Standard Webhooks). Current secret issued ${new Date(signing.rotated_at).toLocaleString()}.`),
      signing.previous_secret_until && signing.previous_secret_until > Date.now()
        ? h('p', { class: 'muted' }, `The previous secret also signs until ${new Date(signing.previous_secret_until).toLocaleString()}.`) : '']
    : [h('p', {}, 'Requests are not signed yet. Generate a secret and give it to your endpoint: every request then carries webhook-id, webhook-timestamp and webhook-signature headers it can verify.')];
  const issue = h('button', { type: 'button', id: 'issue-secret', onclick: async () => {
    if (signing.enabled && !confirm('Rotate the signing secret? The current one keeps signing during the rotation overlap only.')) return;
    try {
      const { secret } = await api('POST', `/api/v1/outputs/${output.id}/signing-secret`);
      issue.remove();
      shown.replaceChildren(h('p', { class: 'warning' }, 'Copy it now: this secret is shown only once and cannot be read again.'),
        h('div', { class: 'row' }, h('code', { id: 'signing-secret' }, secret), copyButton(secret, 'signing secret')));
    } catch (err) { shown.replaceChildren(errorLine(err.message)); }
  } }, signing.enabled ? 'Rotate secret' : 'Generate secret');
  // Deletes both secrets at once: no overlap, the next request goes unsigned.
  const disable = signing.enabled ? h('button', { type: 'button', class: 'danger', id: 'disable-signing', onclick: async () => {
    if (!confirm('Disable signing? Both secrets are deleted and requests go unsigned from now on; your endpoint must stop requiring signatures first.')) return;
    try {
      await api('DELETE', `/api/v1/outputs/${output.id}/signing-secret`);
      closeModal(); route();
    } catch (err) { shown.replaceChildren(errorLine(err.message)); }
  } }, 'Disable signing') : '';
  return [h('h2', {}, `Signing secret · ${output.name}`), ...state,
    h('small', { class: 'help' }, `While rotating, requests carry both signatures for ${Math.round((output.settings.signing_rotation_overlap_secs ?? 86400) / 3600)} h (the output's rotation overlap), so the endpoint can switch secrets without losing requests.`),
    shown, h('div', { class: 'row' }, issue, disable, h('button', { type: 'button', class: 'secondary', onclick: () => { closeModal(); route(); } }, 'Close'))];
}
