// DOM helpers shared by every page: element building, the page frame, errors, copy buttons and
// the modal dialog. Text always goes in as text nodes, never as HTML, so names cannot inject markup.

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

/** Replaces the main area with a titled page and moves focus there for screen readers. */
export function page(title, ...content) {
  main.replaceChildren(h('h1', {}, title), ...content);
  main.focus();
}

export function errorLine(message) { return h('p', { class: 'error', role: 'alert' }, message); }

export function copyButton(value, label) {
  return h('button', { class: 'secondary', type: 'button', 'aria-label': `Copy ${label}`, onclick: async (e) => {
    await navigator.clipboard?.writeText(value).catch(() => {});
    e.target.textContent = 'Copied';
    setTimeout(() => { e.target.textContent = 'Copy'; }, 1200);
  } }, 'Copy');
}

export function openModal(...content) {
  modal.replaceChildren(h('div', { class: 'card' }, ...content));
  modal.hidden = false;
  modal.querySelector('button, select, input')?.focus();
}

export function closeModal() { modal.hidden = true; modal.replaceChildren(); }

modal.addEventListener('keydown', (e) => { if (e.key === 'Escape') closeModal(); });
