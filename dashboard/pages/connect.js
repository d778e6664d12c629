// Connect: pick an input, Connect Output, choose the webhook configuration, set the connection's
// settings (starting at the API's defaults), Add Connection.

import { api } from '../lib/api.js';
import { closeModal, h, noticeNextPage, openModal, page } from '../lib/dom.js';
import { PLATFORMS } from '../lib/platforms.js';
import { settingsForm } from '../lib/settings-form.js';
import { connectionSettings } from '../lib/settings.js';

export async function connectPage() {
  const [inputs, outputs, settings] = await Promise.all([api('GET', '/api/v1/inputs'), api('GET', '/api/v1/outputs'), connectionSettings()]);
  if (!inputs.length || !outputs.length) {
    return page('Connect', h('div', { class: 'card empty' }, !inputs.length ? 'Create an input first (Inputs).' : 'Create a webhook output first (Outputs).'));
  }
  const input = h('select', { id: 'connect-input' }, ...inputs.map((i) => h('option', { value: i.id }, `${i.name} (${PLATFORMS[i.platform]})`)));
  const chosen = h('div');
  const pickOutput = () => {
    const config = h('select', { id: 'connect-output' }, ...outputs.map((o) => h('option', { value: o.id }, o.name)));
    openModal(h('h2', {}, 'Connect Output'),
      // The one kind of output Boson has: a pressed tile, so the dialog reads like the directory.
      h('div', { class: 'tiles', role: 'group', 'aria-label': 'Output kind' }, h('button', { type: 'button', class: 'tile', 'aria-pressed': 'true' }, 'webhooks')),
      h('label', { for: 'connect-output' }, 'Configuration'), config,
      h('p', { class: 'row' }, h('button', { id: 'choose-output', onclick: async () => {
        const output = outputs.find((o) => o.id === config.value);
        closeModal();
        // The Data Filter grid lists what the chosen input has sent so far.
        const catalog = await api('GET', `/api/v1/catalog?input_id=${encodeURIComponent(input.value)}`).catch(() => null);
        const inputName = inputs.find((i) => i.id === input.value)?.name;
        chosen.replaceChildren(h('p', { class: 'muted' }, 'Connecting ', h('strong', {}, inputName), ' → ', h('strong', {}, output.name),
          '. The settings start at their defaults; each says what it does.'),
          settingsForm({ ...settings, catalog }, {}, 'Add Connection', async (values) => {
            const created = await api('POST', '/api/v1/connections', { input_id: input.value, output_id: output.id, settings: values });
            noticeNextPage(`Connection added: ${inputName} → ${output.name}. Events sent to ${inputName} from now on go to ${output.name}.`);
            location.hash = '#/connections';
            return created;
          }));
      } }, 'Configure'), h('button', { class: 'secondary', onclick: closeModal }, 'Cancel')));
  };
  page({ title: 'Connect', back: ['#/connections', 'Connections'] },
    h('p', { class: 'muted' }, 'Pick the input whose events should go out, then the output they go to, then how (the connection\'s settings).'),
    h('div', { class: 'card' }, h('label', { for: 'connect-input' }, 'Input'), input,
    h('p', {}, h('button', { id: 'connect-output-button', onclick: pickOutput }, 'Connect Output'))), chosen);
}
