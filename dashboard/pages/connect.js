// Connect: pick an input, Connect Output, choose the webhook configuration, set the connection's
// settings (starting at the API's defaults), Add Connection.

import { api } from '../lib/api.js';
import { closeModal, h, openModal, page } from '../lib/dom.js';
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
      h('div', { class: 'tiles' }, h('span', { class: 'tile', 'aria-pressed': 'true' }, 'webhooks')),
      h('label', { for: 'connect-output' }, 'Configuration'), config,
      h('p', { class: 'row' }, h('button', { id: 'choose-output', onclick: async () => {
        const output = outputs.find((o) => o.id === config.value);
        closeModal();
        // The Data Filter grid lists what the chosen input has sent so far.
        const catalog = await api('GET', `/api/v1/catalog?input_id=${encodeURIComponent(input.value)}`).catch(() => null);
        chosen.replaceChildren(h('p', {}, 'Output: ', h('strong', {}, output.name)),
          settingsForm({ ...settings, catalog }, {}, 'Add Connection', async (values) => {
            const created = await api('POST', '/api/v1/connections', { input_id: input.value, output_id: output.id, settings: values });
            location.hash = '#/connections';
            return created;
          }));
      } }, 'Configure'), h('button', { class: 'secondary', onclick: closeModal }, 'Cancel')));
  };
  page('Connect', h('div', { class: 'card' }, h('label', { for: 'connect-input' }, 'Input'), input,
    h('p', {}, h('button', { id: 'connect-output-button', onclick: pickOutput }, 'Connect Output'))), chosen);
}
