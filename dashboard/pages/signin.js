// Sign-in: the admin token is exchanged for a session cookie and a CSRF token.

import { api, setCsrf } from '../lib/api.js';
import { errorLine, h, page } from '../lib/dom.js';

export function signInPage() {
  const token = h('input', { type: 'password', id: 'token', autocomplete: 'current-password', required: true });
  const error = h('div');
  const form = h('form', { class: 'card signin', onsubmit: async (e) => {
    e.preventDefault();
    try {
      setCsrf((await api('POST', '/dashboard/login', { token: token.value })).csrf);
      location.hash = '#/connections';
    } catch (err) { error.replaceChildren(errorLine(err.message)); token.focus(); }
  } },
  h('label', { for: 'token' }, 'Admin token'),
  h('p', { class: 'muted' }, 'Printed by Boson on its first start, or the value of BOSON_ADMIN_TOKEN.'),
  token, error, h('p', {}, h('button', { type: 'submit' }, 'Sign in')));
  page('Sign in', form);
}
