// One connection: its state and last error (and, while deliveries fail, when the next attempt
// goes and when the oldest is given up), its settings form with the Data Filter grid built from
// the input's catalog and the forwarding rules, a preview of what a change would have done to
// the input's last 100 events, replay by time range, recent delivery attempts, dead letters with
// Replay, and deletion.

import { api } from '../lib/api.js';
import { connectionCharts } from '../lib/connection-charts.js';
import { confirmAction, errorLine, h, page, plural, stackTable } from '../lib/dom.js';
import { explainError } from '../lib/errors.js';
import { previewCard } from '../lib/preview.js';
import { replayCard } from '../lib/replay-form.js';
import { route } from '../lib/router.js';
import { settingsForm } from '../lib/settings-form.js';
import { connectionSettings, stateOf } from '../lib/settings.js';

/** The dry run of the last save, per connection, shown once after the page re-renders. */
const lastSave = new Map();

const when = (ms) => new Date(ms).toLocaleString();

export async function connectionPage(id) {
  const [connection, stats, attempts, letters, settings, connections, inputs, outputs] = await Promise.all([
    api('GET', `/api/v1/connections/${id}`), api('GET', '/api/v1/connection-stats'),
    api('GET', `/api/v1/connections/${id}/attempts?limit=20`), api('GET', `/api/v1/connections/${id}/dead-letters?limit=20`),
    connectionSettings(), api('GET', '/api/v1/connections'), api('GET', '/api/v1/inputs'), api('GET', '/api/v1/outputs')]);
  const catalog = await api('GET', `/api/v1/catalog?input_id=${encodeURIComponent(connection.input_id)}`).catch(() => null);
  const nameOf = (list, key) => list.find((x) => x.id === key)?.name ?? key;
  const others = connections.filter((c) => c.id !== id)
    .map((c) => ({ label: `${nameOf(inputs, c.input_id)} → ${nameOf(outputs, c.output_id)}`, settings: c.settings }));
  const mine = stats.items.find((s) => s.connection_id === id);
  const state = stateOf(connection, mine, settings.descriptors);
  const title = `${nameOf(inputs, connection.input_id)} → ${nameOf(outputs, connection.output_id)}`;
  const summary = h('div', { class: 'card' }, h('div', { class: 'row' }, h('span', { class: `badge ${state}`, id: 'connection-state' }, state),
    h('span', {}, `${plural(mine?.events_forwarded ?? 0, 'event')} forwarded`),
    h('a', { href: `#/catalog/${connection.input_id}`, id: 'catalog-link' }, 'Data catalog of the input')),
  mine?.last_error ? lastError(mine.last_error) : h('p', { class: 'muted' }, 'No errors.'),
  retrying(connection.retrying));
  const attemptRows = attempts.items.length
    ? stackTable(['When', 'Outcome', 'Status', 'Requests', 'Error'], attempts.items.map((a) => [when(a.attempted_at),
        h('span', { class: `outcome-${a.outcome}` }, a.outcome), String(a.status ?? '–'), String(a.requests), a.error ? explainError(a.error) : '']))
    : h('p', { class: 'empty' }, 'No delivery attempts yet. Send an event to the input.');
  const letterRows = letters.items.length
    ? stackTable(['Batch', 'Status', 'Error', ''], letters.items.map((d) => {
      const error = h('div');
      return [h('code', {}, d.batch_id), String(d.status ?? '–'), h('div', {}, explainError(d.error), error),
        h('button', { class: 'secondary', onclick: async () => {
          try { await api('POST', `/api/v1/connections/${id}/dead-letters/${d.id}/replay`); route(); } catch (err) { error.replaceChildren(errorLine(err.message)); }
        } }, 'Replay')];
    }))
    : h('p', { class: 'empty' }, 'No dead letters.');
  const removeError = h('div');
  const remove = h('button', { class: 'danger', onclick: async () => {
    if (!await confirmAction(`Delete ${title}?`, 'Delete connection', 'Its pending deliveries are dropped; the input and the output stay.')) return;
    try { await api('DELETE', `/api/v1/connections/${id}`); location.hash = '#/connections'; } catch (err) { removeError.replaceChildren(errorLine(err.message)); }
  } }, 'Delete connection');
  const preview = h('div');
  const dryRun = (values) => api('POST', `/api/v1/connections/${id}/dry-run`, { settings: values });
  // Saving first runs the change over the last events, so the page can say what it does.
  const save = async (values) => {
    const result = await dryRun(values);
    await api('PATCH', `/api/v1/connections/${id}`, { settings: values });
    lastSave.set(id, result);
    route();
  };
  const previewButton = (read, error) => h('button', { type: 'button', class: 'secondary', id: 'preview-settings', onclick: async () => {
    error.replaceChildren();
    try {
      preview.replaceChildren(previewCard(await dryRun(read()), 'Preview: not saved yet'));
      preview.scrollIntoView({ block: 'nearest' });
    } catch (err) { error.replaceChildren(errorLine(err.message)); }
  } }, 'Preview changes');
  const saved = lastSave.get(id);
  lastSave.delete(id);
  page({ title, back: ['#/connections', 'Connections'] }, summary, connectionCharts(id),
    saved ? previewCard(saved, 'Saved') : '',
    settingsForm({ ...settings, catalog, others, saved: saved ? `Saved at ${new Date().toLocaleTimeString()}.` : null },
      connection.settings, 'Save', save, (read, error) => [previewButton(read, error)]),
    preview,
    replayCard(id),
    h('div', { class: 'card' }, h('h2', {}, 'Recent delivery attempts'), h('div', { class: 'table-scroll' }, attemptRows)),
    h('div', { class: 'card' }, h('h2', {}, 'Dead letters'), h('div', { class: 'table-scroll' }, letterRows)),
    h('div', { class: 'card danger-zone' }, h('h2', {}, 'Delete'), h('p', { class: 'muted' }, 'Stops forwarding from the input to the output.'), remove, removeError));
}

/** The last error in words a reader can act on, the raw text kept beside it. */
function lastError(text) {
  return h('div', { class: 'error-box', role: 'alert' }, h('strong', {}, 'Last error: '), explainError(text));
}

/** While deliveries fail: how many, when the next attempt goes, when the oldest is given up. */
function retrying(info) {
  if (!info) return '';
  return h('p', { class: 'retrying', id: 'retrying' },
    `${info.failing_jobs} ${info.failing_jobs === 1 ? 'delivery is' : 'deliveries are'} failing. `,
    `Next attempt: ${when(info.next_attempt_at)}. `,
    `If it still fails, the oldest goes to the dead letters at ${when(info.gives_up_at)}.`);
}
