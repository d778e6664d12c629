// DOM helpers shared by every page: element building, the page frame, errors and confirmations,
// copy buttons, tables that stack at phone width, and the modal dialog (focus kept inside, Esc
// closes, focus back where it was). Text always goes in as text nodes, never as HTML, so names
// cannot inject markup.

const main = document.getElementById('main');
const modal = document.getElementById('modal');

/** An element with attributes (on* keys become listeners; true/false toggle boolean attributes). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else if (v !== false && v != null) el.setAttribute(k, v);
  }
  for (const child of children.flat()) el.append(child instanceof Node ? child : document.createTextNode(String(child ?? '')));
  return el;
}

/** A confirmation waiting for the next page drawn (e.g. "Connection added" after Connect). */
let pendingNotice = null;

/** Shows `message` as a success line under the title of the next page drawn. */
export function noticeNextPage(message) { pendingNotice = message; }

/**
 * Replaces the main area with a titled page and moves focus there for screen readers. `title`
 * is a string, or `{ title, back: [href, label] }` for a page under another (a back link above).
 */
export function page(title, ...content) {
  const { title: text, back } = typeof title === 'string' ? { title } : title;
  const notice = pendingNotice ? successLine(pendingNotice, 'notice') : '';
  pendingNotice = null;
  main.replaceChildren(back ? h('a', { class: 'back', href: back[0] }, `← ${back[1]}`) : '', h('h1', {}, text), notice, ...content);
  main.focus();
}

export function errorLine(message) { return h('p', { class: 'error', role: 'alert' }, message); }

/** A confirmation that something worked, said to screen readers too. */
export function successLine(message, id) { return h('p', { class: 'success', role: 'status', id }, message); }

/** `n thing` or `n things`. */
export const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * A table whose rows become labelled cards at phone width: each cell carries its column's name.
 * `rows` are arrays of cells (text or nodes), or `{ attrs, cells }` for a row with attributes.
 */
export function stackTable(headers, rows, attrs = {}) {
  return h('table', { ...attrs, class: `stack ${attrs.class ?? ''}`.trim() },
    h('thead', {}, h('tr', {}, ...headers.map((name) => h('th', {}, name)))),
    h('tbody', {}, ...rows.map((row) => {
      const { attrs: rowAttrs = {}, cells } = Array.isArray(row) ? { cells: row } : row;
      return h('tr', rowAttrs, ...cells.map((cell, i) => h('td', { 'data-label': headers[i] || null }, cell)));
    })));
}

let opener = null;

export function openModal(...content) {
  opener ??= document.activeElement;
  modal.setAttribute('role', 'dialog');
  modal.replaceChildren(h('div', { class: 'card' }, ...content));
  modal.hidden = false;
  modal.querySelector('button, select, input')?.focus();
}

/** Closes the dialog and gives the focus back to what opened it. */
export function closeModal() {
  modal.hidden = true;
  modal.replaceChildren();
  const back = opener;
  opener = null;
  if (back?.isConnected) back.focus();
}

/**
 * Asks in the page (no native confirm()): resolves true when `action` is chosen, false on
 * Cancel or Esc. The question names what it concerns; the action button says what happens.
 */
export function confirmAction(question, action, detail = '') {
  return new Promise((resolve) => {
    const answer = (yes) => () => { resolveOpen = null; closeModal(); resolve(yes); };
    resolveOpen = () => resolve(false);
    openModal(h('h2', { id: 'confirm-title' }, question), detail ? h('p', { class: 'muted' }, detail) : '',
      h('div', { class: 'row' }, h('button', { type: 'button', class: 'secondary', onclick: answer(false) }, 'Cancel'),
        h('button', { type: 'button', class: 'danger', onclick: answer(true) }, action)));
    modal.setAttribute('role', 'alertdialog');
    modal.setAttribute('aria-labelledby', 'confirm-title');
  });
}

/** The pending question's "no", given when Esc closes it. */
let resolveOpen = null;

modal.addEventListener('keydown', (e) => {
  if (e.key === 'Escape') {
    const no = resolveOpen;
    resolveOpen = null;
    closeModal();
    no?.();
  } else if (e.key === 'Tab') keepFocusInside(e);
});

/** Tab and Shift+Tab cycle through the dialog's controls instead of leaving it. */
function keepFocusInside(e) {
  const controls = [...modal.querySelectorAll('button, select, input, textarea, a[href]')].filter((el) => !el.disabled);
  if (!controls.length) return;
  const [first, last] = [controls[0], controls.at(-1)];
  if (e.shiftKey && document.activeElement === first) { last.focus(); e.preventDefault(); }
  else if (!e.shiftKey && document.activeElement === last) { first.focus(); e.preventDefault(); }
}
