// The forwarding-rules form of a connection: the attribute-value rule, login identity, the two
// consent rules and user sampling, each with a line of help. Reads and writes the
// `forwarding_rules` setting; the server checks it (a 400 names the field at fault).

import { h } from './dom.js';

// Each control names its help line (aria-describedby), so it is read out with the control.
const help = (id, text) => h('small', { class: 'help', id: `help-${id}` }, text);
const about = (id) => ({ 'aria-describedby': `help-${id}` });

export function forwardingRulesControl(d, value) {
  const v = value ?? {};
  const a = v.attribute ?? {};
  const scope = h('select', { id: 'fr-scope', ...about('fr-attribute') }, h('option', { value: '' }, 'No attribute rule'),
    h('option', { value: 'event', selected: a.scope === 'event' }, 'Event attribute'),
    h('option', { value: 'user', selected: a.scope === 'user' }, 'User attribute'));
  const mode = h('select', { id: 'fr-mode', ...about('fr-attribute') }, h('option', { value: 'only_forward', selected: a.mode !== 'dont_forward' }, 'Only forward'),
    h('option', { value: 'dont_forward', selected: a.mode === 'dont_forward' }, "Don't forward"));
  const name = h('input', { type: 'text', id: 'fr-name', ...about('fr-attribute'), value: a.name ?? '', placeholder: 'e.g. plan' });
  const match = h('input', { type: 'text', id: 'fr-value', ...about('fr-attribute'), value: a.value ?? '', placeholder: 'e.g. pro' });
  const login = h('input', { type: 'checkbox', id: 'fr-login', ...about('fr-login'), checked: Boolean(v.require_login_identity) });
  const gdpr = h('input', { type: 'text', id: 'fr-gdpr', ...about('fr-gdpr'), value: (v.gdpr_purposes ?? []).join(', '), placeholder: 'e.g. marketing, analytics' });
  const ccpa = h('input', { type: 'checkbox', id: 'fr-ccpa', ...about('fr-ccpa'), checked: Boolean(v.ccpa_respect_data_sale_opt_out) });
  const sample = h('input', { type: 'number', id: 'fr-sample', ...about('fr-sample'), min: '1', max: '100', step: '1', value: v.user_sample_percent ?? 100 });
  const attributeFields = h('div', { class: 'fr-attribute' },
    h('div', {}, h('label', { for: 'fr-mode' }, 'When it matches'), mode),
    h('div', {}, h('label', { for: 'fr-name' }, 'Attribute name'), name),
    h('div', {}, h('label', { for: 'fr-value' }, 'Value'), match));
  const showAttribute = () => { attributeFields.hidden = scope.value === ''; };
  scope.addEventListener('change', showAttribute);
  showAttribute();
  const block = h('div', { class: 'setting fr', 'data-setting': d.name, id: `setting-${d.name}` },
    h('span', { class: 'field-label' }, d.label), h('small', { class: 'help', id: `help-${d.name}` }, d.help),
    h('label', { for: 'fr-scope' }, 'Attribute rule'), scope,
    help('fr-attribute', 'Forward by one attribute\'s value, compared exactly (case matters). An event attribute decides event by event; a user attribute decides for all of the batch. Data without the attribute counts as not matching.'),
    attributeFields,
    h('label', { class: 'check' }, login, 'Only users with a login identity'),
    help('fr-login', 'Forward only batches that carry a user identity such as a customer id or an email; anonymous devices stay back.'),
    h('label', { for: 'fr-gdpr' }, 'GDPR: required consent purposes'), gdpr,
    help('fr-gdpr', 'Comma-separated, lower-case purposes. A user\'s data goes only if their latest consent state grants every one of them.'),
    h('label', { class: 'check' }, ccpa, 'CCPA: respect data sale opt-out'),
    help('fr-ccpa', 'Forward nothing of users whose latest CCPA state opts them out of data sale.'),
    h('label', { for: 'fr-sample' }, 'User sample (%)'), sample,
    help('fr-sample', 'The share of users forwarded, 1–100. Picked by MPID, the same users on every node and after restarts, all of a user\'s data or none.'));
  return {
    block,
    read: () => ({
      attribute: scope.value ? { scope: scope.value, name: name.value, value: match.value, mode: mode.value } : null,
      require_login_identity: login.checked,
      gdpr_purposes: gdpr.value.split(',').map((p) => p.trim()).filter(Boolean),
      ccpa_respect_data_sale_opt_out: ccpa.checked,
      user_sample_percent: sample.value === '' ? 100 : Number(sample.value),
    }),
  };
}
