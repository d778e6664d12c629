// Outputs: the "webhooks" directory tile, the webhook configurations, and their create/edit form
// (with custom headers), and each output's Standard Webhooks signing secret: generate or rotate it,
// shown once to copy, or disable signing.

import { api } from '../lib/api.js';
import { copyButtonOf } from '../lib/copy.js';
import { closeModal, confirmAction, errorLine, h, noticeNextPage, openModal, page, stackTable } from '../lib/dom.js';
import { route } from '../lib/router.js';

export async function outputsPage() {
  const outputs = await api('GET', '/api/v1/outputs');
  const list = outputs.length
    ? h('div', { class: 'card' }, h('h2', {}, 'Webhook configurations'),
        stackTable(['Name', 'POST URL', 'Signing', ''], outputs.map((o) => outputRow(o)), { id: 'outputs-table' }))
    : h('div', { class: 'card empty' }, 'No outputs yet. Choose "webhooks" to add a configuration.');
  const directory = h('div', { class: 'card' }, h('h2', {}, 'Directory'),
    h('p', { class: 'muted' }, 'Where Boson sends events. A webhook receives each batch as JSON in a POST request.'),
    h('div', { class: 'tiles' }, h('button', { class: 'tile', id: 'webhooks-tile', onclick: () => openModal(outputForm()) }, 'webhooks')));
  page('Outputs', directory, list);
}

/** One output's row: its cells (the last holds the actions and any error they meet). */
function outputRow(output) {
  const error = h('div');
  return { attrs: { 'data-output': output.id }, cells: [
    output.name, h('code', {}, output.settings.url),
    output.signing?.enabled ? h('span', { class: 'badge active' }, 'signed') : h('span', { class: 'badge inactive' }, 'unsigned'),
    h('div', {}, h('div', { class: 'row' },
      h('button', { class: 'secondary', onclick: () => openModal(signingDialog(output)) }, 'Signing secret'),
      h('button', { class: 'secondary', onclick: () => openModal(outputForm(output)) }, 'Edit'),
      h('button', { class: 'danger', onclick: async () => {
        if (!await confirmAction(`Delete ${output.name}?`, 'Delete output', 'Its connections must be deleted first.')) return;
        try { await api('DELETE', `/api/v1/outputs/${output.id}`); noticeNextPage(`${output.name} deleted.`); route(); } catch (err) { error.replaceChildren(errorLine(err.message)); }
      } }, 'Delete')), error)] };
}

function outputForm(existing) {
  const s = existing?.settings || {};
  const name = h('input', { type: 'text', id: 'output-name', value: existing?.name || '' });
  const url = h('input', { type: 'url', id: 'output-url', value: s.url || '', placeholder: 'https://example.com/hook', 'aria-describedby': 'output-url-help' });
  const auth = h('input', { type: 'text', id: 'output-auth', value: s.authorization_header || '', placeholder: 'Bearer …', 'aria-describedby': 'output-auth-help' });
  const deviceId = h('input', { type: 'checkbox', id: 'output-deviceid', checked: Boolean(s.include_mp_deviceid), 'aria-describedby': 'output-deviceid-help' });
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
      noticeNextPage(existing ? `${name.value} saved.` : `${name.value} added. Connect it to an input on the Connections page.`);
      closeModal(); route();
    } catch (err) {
      const target = err.code === 'invalid_name' ? errors.name : err.code === 'invalid_url' ? errors.url : errors.form;
      target.replaceChildren(errorLine(err.message));
    }
  } }, h('h2', {}, existing ? 'Edit webhook configuration' : 'New webhook configuration'),
  h('label', { for: 'output-name' }, 'Configuration name'), name, errors.name,
  h('label', { for: 'output-url' }, 'POST URL'), url, h('small', { class: 'help', id: 'output-url-help' }, 'Where Boson POSTs each batch as JSON (http or https).'), errors.url,
  h('label', { for: 'output-auth' }, 'Authorization Header'), auth,
  h('small', { class: 'help', id: 'output-auth-help' }, 'Sent as the Authorization header of every request, e.g. Bearer and a token your endpoint checks. Optional.'),
  h('label', { class: 'check' }, deviceId, 'Include MP DeviceId'),
  h('small', { class: 'help', id: 'output-deviceid-help' }, 'Keep the batch\'s mp_deviceid (the device id the SDK sent); off removes it from every request.'),
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

/** Asks before rotating, then brings the signing dialog back (the question used the modal) and rotates on yes. */
async function confirmRotate(output) {
  const yes = await confirmAction(`Rotate the signing secret of ${output.name}?`, 'Rotate secret', 'The current secret keeps signing during the rotation overlap only.');
  openModal(signingDialog(output, yes));
  if (yes) document.getElementById('issue-secret')?.click();
}

/** The output's signing secret: its state, and generate/rotate (`confirmed`: asked already), the new secret shown once. */
function signingDialog(output, confirmed = false) {
  const signing = output.signing ?? {};
  const shown = h('div', { id: 'signing-result' });
  const state = signing.enabled
    ? [h('p', {}, `Requests are signed (Standard Webhooks). Current secret issued ${new Date(signing.rotated_at).toLocaleString()}.`),
      signing.previous_secret_until && signing.previous_secret_until > Date.now()
        ? h('p', { class: 'muted' }, `The previous secret also signs until ${new Date(signing.previous_secret_until).toLocaleString()}.`) : '']
    : [h('p', {}, 'Requests are not signed yet. Generate a secret and give it to your endpoint: every request then carries webhook-id, webhook-timestamp and webhook-signature headers it can verify.')];
  const issue = h('button', { type: 'button', id: 'issue-secret', onclick: async () => {
    if (signing.enabled && !confirmed) { await confirmRotate(output); return; }
    try {
      const { secret } = await api('POST', `/api/v1/outputs/${output.id}/signing-secret`);
      issue.remove();
      shown.replaceChildren(h('p', { class: 'warning' }, 'Copy it now: this secret is shown only once and cannot be read again.'),
        h('div', { class: 'row' }, h('code', { id: 'signing-secret' }, secret), copyButtonOf(() => secret, 'signing secret')));
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
