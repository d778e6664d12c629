// One input on the Inputs page: its name (renamed in place), its key and masked secret with
// Reveal and Copy, secret rotation, delete, the setup snippets and, for Web inputs, the Web
// settings. The card keeps the input as the API last answered it and redraws its parts from that.

import { api } from './api.js';
import { copyButtonOf } from './copy.js';
import { confirmAction, errorLine, h } from './dom.js';
import { webSettingsForm } from './input-web-settings.js';
import { PLATFORMS } from './platforms.js';
import { snippetsFor } from './snippets.js';

const MASK = '•'.repeat(24);

/** The card of `input`; `onDeleted(name)` runs once the API has deleted it. */
export function inputCard(input, { onDeleted, setupOpen = false }) {
  const card = h('article', { class: 'card input-card', 'data-input': input.id });
  const state = { input, revealed: false };
  const head = h('div', { class: 'input-head' });
  const notice = h('div', { class: 'input-notice', role: 'status' });
  const error = h('div', { class: 'input-error' });
  const credentials = h('div', { class: 'input-credentials' });
  const setup = h('details', { class: 'input-setup', open: setupOpen });
  // `focus`: a selector in the credentials to focus again once redrawn (the old button is gone).
  const redraw = (focus) => {
    credentials.replaceChildren(...credentialRows(state, redraw));
    setup.replaceChildren(...setupBlock(state));
    if (focus) credentials.querySelector(focus)?.focus();
  };
  const actions = {
    rename: () => renameField(state, head, drawHead),
    rotate: () => rotate(state, notice, error, redraw),
    remove: () => remove(state, error, onDeleted),
  };
  function drawHead() { head.replaceChildren(...headParts(state.input, actions)); }
  drawHead();
  redraw();
  card.append(head, notice, error, credentials, setup);
  if (input.platform === 'web') card.append(webSettingsForm(state));
  return card;
}

function headParts(input, actions) {
  return [
    h('h3', { class: 'input-name' }, input.name),
    h('span', { class: 'badge platform' }, PLATFORMS[input.platform] ?? input.platform),
    h('div', { class: 'input-actions' },
      h('button', { type: 'button', class: 'secondary', onclick: actions.rename }, 'Rename'),
      h('button', { type: 'button', class: 'secondary', onclick: actions.rotate }, 'Rotate secret'),
      h('button', { type: 'button', class: 'danger', onclick: actions.remove }, 'Delete')),
  ];
}

/** The name becomes a field: Enter saves, Esc (or Cancel) puts the name back. */
function renameField(state, head, drawHead) {
  const id = `rename-${state.input.id}`;
  const field = h('input', { type: 'text', id, value: state.input.name, maxlength: 200 });
  const error = h('div');
  const done = () => { drawHead(); head.querySelector('button')?.focus(); };
  const save = async () => {
    try {
      state.input = await api('PATCH', `/api/v1/inputs/${state.input.id}`, { name: field.value });
      done();
    } catch (err) { error.replaceChildren(errorLine(err.message)); field.focus(); }
  };
  field.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); save(); }
    if (e.key === 'Escape') { e.preventDefault(); done(); }
  });
  head.replaceChildren(h('div', { class: 'input-rename' },
    h('label', { for: id }, 'Input name'),
    h('div', { class: 'row' }, field,
      h('button', { type: 'button', onclick: save }, 'Save name'),
      h('button', { type: 'button', class: 'secondary', onclick: done }, 'Cancel')),
    h('small', { class: 'help' }, 'Enter saves, Esc cancels. The key and secret stay the same.'),
    error));
  field.focus();
  field.select();
}

function credentialRows(state, redraw) {
  const { input } = state;
  const reveal = h('button', { type: 'button', class: 'secondary toggle', 'aria-pressed': String(state.revealed),
    onclick: () => { state.revealed = !state.revealed; redraw('button.toggle'); } },
  'Reveal', h('span', { class: 'sr-only' }, ' API secret'));
  return [
    h('div', { class: 'cred' },
      h('span', { class: 'cred-label' }, 'API key'),
      h('code', { class: 'api-key' }, input.api_key),
      h('div', { class: 'cred-buttons' }, copyButtonOf(() => state.input.api_key, 'API key')),
      h('small', { class: 'help' }, 'Names this input in every request. Public: it ships inside web pages and apps.')),
    h('div', { class: 'cred' },
      h('span', { class: 'cred-label' }, 'API secret'),
      h('code', { class: 'api-secret' }, state.revealed ? input.api_secret : MASK),
      h('div', { class: 'cred-buttons' }, reveal, copyButtonOf(() => state.input.api_secret, 'API secret')),
      h('small', { class: 'help' }, 'Proves a request is yours: the Events API takes it as the Basic auth password and the iOS and Android SDKs sign uploads with it. Keep it on servers and in apps, never in a web page.')),
  ];
}

function setupBlock(state) {
  const shown = snippetsFor(state.input, location.origin, state.revealed ? state.input.api_secret : MASK);
  const real = snippetsFor(state.input, location.origin, state.input.api_secret);
  return [
    h('summary', {}, `Send data: ${shown.map((s) => s.title).join(', ')}`),
    ...shown.map((snippet, i) => h('section', { class: 'snippet', 'data-snippet': snippet.id },
      h('div', { class: 'row spread' }, h('h4', {}, snippet.title), copyButtonOf(() => real[i].text, `${snippet.title} snippet`)),
      h('small', { class: 'help' }, snippet.help),
      h('pre', { class: 'snippet-text', tabindex: '0' }, h('code', {}, snippet.text)))),
  ];
}

async function rotate(state, notice, error, redraw) {
  if (!await confirmAction(`Rotate the secret of "${state.input.name}"?`, 'Rotate secret',
    'The current secret stops working at once: servers and apps using it need the new one.')) return;
  try {
    state.input = await api('POST', `/api/v1/inputs/${state.input.id}/rotate-secret`);
    state.revealed = true;
    error.replaceChildren();
    notice.replaceChildren(h('p', { class: 'ok' }, 'This is the new secret; the old one no longer works. Give it to the servers and apps that send to this input.'));
    redraw();
  } catch (err) { error.replaceChildren(errorLine(err.message)); }
}

async function remove(state, error, onDeleted) {
  const { name, id } = state.input;
  // Count the input's connections so the confirm can say what the API will answer.
  const used = await api('GET', '/api/v1/connections').then((all) => all.filter((c) => c.input_id === id).length, () => null);
  const warning = used ? `It still has ${used} connection${used === 1 ? '' : 's'}: Boson refuses to delete it until ${used === 1 ? 'that connection is' : 'they are'} deleted on the Connections page.`
    : 'Its key and secret stop working at once. (An input with connections cannot be deleted: delete its connections first.)';
  if (!await confirmAction(`Delete the input "${name}"?`, 'Delete input', warning)) return;
  try {
    await api('DELETE', `/api/v1/inputs/${id}`);
    onDeleted(name);
  } catch (err) { error.replaceChildren(errorLine(err.message)); }
}
