// Outputs: the "webhooks" directory tile, the webhook configurations, and their create/edit form.

import { api } from '../lib/api.js';
import { closeModal, errorLine, h, openModal, page } from '../lib/dom.js';
import { route } from '../lib/router.js';

export async function outputsPage() {
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
