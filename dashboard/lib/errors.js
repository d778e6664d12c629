// Delivery errors in words a reader can act on. Boson records errors as the HTTP client or the
// endpoint gave them ("client error (Connect): tcp connect error: Connection refused (os error
// 111)"); the dashboard says what that means and keeps the raw text one click away.

import { h } from './dom.js';

const STATUS = [
  [/^5\d\d$/, (s) => `The endpoint answered HTTP ${s}, a server error on its side; Boson retries such answers.`],
  [/^429$/, () => 'The endpoint answered HTTP 429: it asks Boson to slow down. Boson waits and retries.'],
  [/^40[13]$/, (s) => `The endpoint refused the request (HTTP ${s}): check the output's Authorization Header.`],
  [/^4\d\d$/, (s) => `The endpoint refused the request (HTTP ${s}): check the output's POST URL and what the endpoint expects.`],
];

const CAUSES = [
  [/connection refused/i, 'Nothing accepted the connection at the output\'s URL: is the endpoint running, and are its host and port right?'],
  [/dns error|failed to lookup|name or service not known|no such host/i, 'The output\'s host name could not be found: check the POST URL.'],
  [/timed out|timeout|deadline/i, 'The endpoint did not answer in time.'],
  [/certificate|tls|ssl/i, 'The secure (TLS) connection to the endpoint failed: check its certificate.'],
  [/connection reset|broken pipe|closed/i, 'The endpoint closed the connection before answering.'],
  [/refused by the resolver|private|not allowed/i, 'Boson does not send to this address (a private or local address is not allowed).'],
];

/** One sentence for an error text, or null when Boson has nothing better to say than the text. */
export function plainError(text) {
  const gaveUp = /retry window exhausted/i.test(text);
  const status = text.match(/answered (\d{3})/)?.[1];
  let why = null;
  if (status) why = STATUS.find(([re]) => re.test(status))?.[1](status) ?? `The endpoint answered HTTP ${status}.`;
  else why = CAUSES.find(([re]) => re.test(text))?.[1] ?? null;
  if (gaveUp) return `Boson stopped retrying and moved the batch to the dead letters. ${why ?? ''}`.trim();
  return why;
}

/** The plain sentence with the raw text in a disclosure, or the raw text alone. */
export function explainError(text) {
  const plain = plainError(text ?? '');
  if (!plain) return h('span', { class: 'error-text' }, text ?? '');
  return h('span', { class: 'error-text' }, plain, ' ',
    h('details', { class: 'raw-error' }, h('summary', {}, 'Details'), h('code', {}, text)));
}
