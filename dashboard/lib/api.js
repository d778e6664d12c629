// The admin API client. Every read and write goes through /api/v1 with the session cookie; every
// change also carries the session's CSRF token in x-boson-csrf, which other sites cannot set.

let csrf = null;

/** Whether this page holds a signed-in session's CSRF token. */
export function signedIn() { return csrf !== null; }

/** Keeps the CSRF token of a new session, or forgets it (null) on sign-out. */
export function setCsrf(token) { csrf = token; }

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `request failed (${status})`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

export async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (csrf && method !== 'GET') headers['x-boson-csrf'] = csrf;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  // The session ended (expired, or Boson restarted): back to sign-in rather than a broken page.
  if (response.status === 401 && !path.startsWith('/dashboard/login')) { csrf = null; location.hash = '#/signin'; }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}
