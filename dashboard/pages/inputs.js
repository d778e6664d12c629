// Inputs: grouped by platform, one card each (lib/input-card.js: key and masked secret, rename,
// rotation, delete, setup snippets, Web settings), and the form that creates one.

import { api } from '../lib/api.js';
import { errorLine, h, page } from '../lib/dom.js';
import { inputCard } from '../lib/input-card.js';
import { PLATFORMS } from '../lib/platforms.js';
import { route } from '../lib/router.js';

// What the last change on this page did, shown once on the next render (the page redraws whole).
let flash = null;
// The input just created: its setup snippets open, since they are what its creator needs next.
let created = null;

export async function inputsPage() {
  const inputs = await api('GET', '/api/v1/inputs');
  const notice = flash ? h('p', { class: 'card notice', role: 'status' }, flash) : null;
  const justCreated = created;
  flash = null;
  created = null;
  const intro = h('p', { class: 'muted intro' },
    'An input is where data comes in: an app, a site or a server feed. Each has an API key that names it and an API secret that proves a sender is yours. Open "Send data" on an input for code to paste.');
  const create = inputForm();
  const top = notice ? [intro, notice] : [intro];
  if (!inputs.length) return page('Inputs', ...top, h('div', { class: 'card empty' }, 'No inputs yet. Pick a platform below to get an API key and secret.'), create);
  const onDeleted = (name) => { flash = `Deleted the input "${name}".`; route(); };
  const groups = Object.entries(PLATFORMS).map(([platform, label]) => {
    const mine = inputs.filter((i) => i.platform === platform);
    if (!mine.length) return null;
    return h('section', { class: 'input-group' }, h('h2', {}, label),
      ...mine.map((input) => inputCard(input, { onDeleted, setupOpen: input.id === justCreated })));
  }).filter(Boolean);
  page('Inputs', ...top, ...groups, create);
}

const PLATFORM_HELP = {
  web: 'A website with the mParticle Web SDK.',
  ios: 'An iPhone or iPad app with the mParticle iOS SDK.',
  android: 'An Android app with the mParticle Android SDK.',
  custom_feed: "Your servers, sending batches to the Events API.",
};

function inputForm() {
  let platform = null;
  const name = h('input', { type: 'text', id: 'input-name', placeholder: 'e.g. Web shop' });
  const error = h('div');
  const tiles = h('div', { class: 'tiles input-platforms', role: 'group', 'aria-label': 'Platform' }, ...Object.entries(PLATFORMS).map(([value, label]) =>
    h('button', { type: 'button', class: 'tile', 'aria-pressed': 'false', 'data-platform': value, onclick: (e) => {
      platform = value;
      tiles.querySelectorAll('.tile').forEach((t) => t.setAttribute('aria-pressed', String(t === e.currentTarget)));
    } }, h('strong', {}, label), h('small', { class: 'tile-help' }, PLATFORM_HELP[value]))));
  return h('form', { class: 'card input-create', onsubmit: async (e) => {
    e.preventDefault();
    if (!platform) return error.replaceChildren(errorLine('Pick a platform.'));
    try {
      const input = await api('POST', '/api/v1/inputs', { name: name.value, platform });
      flash = `Created the input "${input.name}". Its key, secret and setup code are below.`;
      created = input.id;
      route();
    } catch (err) { error.replaceChildren(errorLine(err.message)); }
  } }, h('h2', {}, 'New input'), tiles, h('label', { for: 'input-name' }, 'Name'), name, error,
  h('p', {}, h('button', { type: 'submit' }, 'Create input')));
}
