// Hash routing and the nav bar: #/section or #/section/id picks a page from the table app.js
// hands over. Pages import route() to re-render after a change; the router imports no page, so
// the module graph has no cycles.

import { api, setCsrf, signedIn } from './api.js';
import { errorLine, h, page } from './dom.js';

let pages = {};
let signInPage = () => {};
let cleanup = null;

/** Registers what to undo (e.g. close a live stream) when the current page is left. */
export function onLeave(undo) { cleanup = undo; }

/** Runs the current page's cleanup, if any, once. */
export function leavePage() {
  const undo = cleanup;
  cleanup = null;
  undo?.();
}

/**
 * Starts routing. `table` maps a section to its page function; `section/:id` entries take the id.
 * Unknown sections show the first entry (the Connections page).
 */
export function start(table, signIn) {
  pages = table;
  signInPage = signIn;
  window.addEventListener('hashchange', route);
  route();
}

export async function route() {
  const hash = location.hash || '#/connections';
  if (!signedIn()) {
    const session = await api('GET', '/dashboard/session');
    if (session.signed_in) setCsrf(session.csrf);
  }
  leavePage();
  const nav = document.getElementById('nav');
  nav.hidden = !signedIn();
  const [, section, id] = hash.split('/');
  markTab(signedIn() ? section : null);
  if (!signedIn()) return signInPage();
  const show = (id && pages[`${section}/:id`]) || pages[section] || Object.values(pages)[0];
  try { await show(id); } catch (err) {
    page('This page could not be loaded', errorLine(err.message), h('p', { class: 'row' },
      h('button', { type: 'button', onclick: route }, 'Try again'), h('a', { class: 'button secondary', href: '#/connections' }, 'Connections')));
  }
}

/** Underlines the tab of `section` (a connection's page and Connect belong to Connections), only it. */
function markTab(section) {
  const tab = section === 'connect' ? 'connections' : section;
  document.querySelectorAll('nav a').forEach((a) => {
    const active = a.dataset.page === tab;
    a.classList.toggle('active', active);
    if (active) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    // At phone width the tabs scroll sideways: keep the current one in view.
    if (active) a.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  });
}
