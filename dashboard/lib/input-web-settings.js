// A Web input's settings: the origins browsers may send its data from, and what Boson's config
// answer tells deployed Web SDKs (host overrides and feature flags). Saved together with one
// PATCH (the API replaces the settings whole); the API's errors show next to the field they name.

import { api } from './api.js';
import { errorLine, h } from './dom.js';

/** The Web SDK host options a config answer may carry (WEB_HOST_KEYS in src/model/settings.rs). */
const HOST_KEYS = ['v1SecureServiceUrl', 'v2SecureServiceUrl', 'v3SecureServiceUrl', 'configUrl', 'identityUrl', 'aliasUrl', 'userAudienceUrl'];

/** The form for `state.input` (updated in place with the API's answer once saved). */
export function webSettingsForm(state) {
  const settings = state.input.settings ?? {};
  const id = state.input.id;
  const origins = h('textarea', { id: `origins-${id}`, rows: 3, spellcheck: 'false', placeholder: 'https://shop.example' });
  origins.value = (settings.allowed_origins ?? []).join('\n');
  const hosts = Object.fromEntries(HOST_KEYS.map((key) => [key, h('input', { type: 'text', id: `${key}-${id}`, value: settings.web_hosts?.[key] ?? '', spellcheck: 'false' })]));
  const flags = h('div', { class: 'flag-rows' }, ...Object.entries(settings.web_flags ?? {}).map(([k, v]) => flagRow(k, v)));
  const config = h('details', { class: 'web-config' },
    h('summary', {}, 'Config answer: SDK hosts and flags'),
    h('small', { class: 'help' }, "Sent to Web SDKs that request their config (requestConfig, the default over https), so deployed sites can be steered without changing them. Hosts are host[:port]/path/ with no scheme and a trailing slash; empty keeps the SDK's own setting."),
    h('div', { class: 'grid2' }, ...HOST_KEYS.map((key) => field(`web_hosts.${key}`, h('label', { for: hosts[key].id }, key), hosts[key]))),
    field('web_flags', h('span', { class: 'field-label' }, 'Feature flags'),
      h('small', { class: 'help' }, 'Web SDK flags by name, e.g. eventsV3 = 100 moves SDKs up to 2.21 onto batched uploads, eventBatchingIntervalMillis = 5000 batches events for 5 s.'),
      flags, h('button', { type: 'button', class: 'secondary', onclick: () => flags.append(flagRow('', '')) }, '+ Add flag')));
  const status = h('div', { role: 'status' });
  const form = h('form', { class: 'web-settings', onsubmit: async (e) => {
    e.preventDefault();
    clearErrors(form, status);
    const body = { settings: {
      allowed_origins: origins.value.split('\n').map((o) => o.trim()).filter(Boolean),
      web_hosts: Object.fromEntries(HOST_KEYS.map((k) => [k, hosts[k].value.trim()]).filter(([, v]) => v)),
      web_flags: Object.fromEntries([...flags.querySelectorAll('.flag-row')].map(flagEntry).filter(([k]) => k)),
    } };
    try {
      state.input = await api('PATCH', `/api/v1/inputs/${id}`, body);
      status.replaceChildren(h('p', { class: 'saved' }, 'Saved. Browsers and SDKs see the change at once.'));
    } catch (err) { showError(form, status, config, err.message); }
  } },
  h('h4', {}, 'Web settings'),
  field('allowed_origins', h('label', { for: origins.id }, 'Allowed origins'),
    h('small', { class: 'help' }, "One per line, as browsers send them: scheme://host[:port], e.g. https://shop.example. Browsers may send this input's data only from these origins; requests from elsewhere are refused. Empty: any origin. Servers and mobile apps send no origin and are not affected."),
    origins),
  config,
  h('p', { class: 'row' }, h('button', { type: 'submit' }, 'Save web settings')), status);
  return form;
}

/** A labelled block with room for its error; `name` is how the API's messages name it. */
function field(name, ...content) {
  return h('div', { class: 'setting', 'data-field': name }, ...content, h('div', { class: 'field-error' }));
}

function flagRow(name, value) {
  const row = h('div', { class: 'row flag-row' },
    h('input', { type: 'text', class: 'flag-name', 'aria-label': 'Flag name', placeholder: 'eventsV3', value: name }),
    h('input', { type: 'text', class: 'flag-value', 'aria-label': 'Flag value', placeholder: '100', value: typeof value === 'string' ? value : JSON.stringify(value) }),
    h('button', { type: 'button', class: 'link', onclick: () => row.remove() }, 'Remove'));
  if (typeof value !== 'string') row.dataset.json = JSON.stringify(value);
  return row;
}

/** A flag as typed: a string, unless it still shows a non-string value it was loaded with. */
function flagEntry(row) {
  const value = row.querySelector('.flag-value').value;
  const loaded = row.dataset.json;
  return [row.querySelector('.flag-name').value.trim(), loaded && value === loaded ? JSON.parse(loaded) : value];
}

function clearErrors(form, status) {
  form.querySelectorAll('.field-error').forEach((slot) => slot.replaceChildren());
  status.replaceChildren();
}

/** Puts the API's message next to the field it names (`allowed_origins: …`, `web_hosts.v3SecureServiceUrl: …`). */
function showError(form, status, config, message) {
  const named = /(allowed_origins|web_hosts\.\w+|web_flags)/.exec(message)?.[1];
  const slot = named && form.querySelector(`[data-field="${named}"] .field-error`);
  if (!slot) return status.replaceChildren(errorLine(message));
  if (config.contains(slot)) config.open = true;
  slot.replaceChildren(errorLine(message));
  slot.closest('.setting').querySelector('input, textarea')?.focus();
}
