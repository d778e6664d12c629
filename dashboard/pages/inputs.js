// Inputs: grouped by platform, each with its API key and secret to copy and secret rotation, and
// the form that creates one.

import { api } from '../lib/api.js';
import { copyButton, errorLine, h, page } from '../lib/dom.js';
import { PLATFORMS } from '../lib/platforms.js';
import { route } from '../lib/router.js';

export async function inputsPage() {
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
