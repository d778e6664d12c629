// One connection: its state and last error, its settings form, recent delivery attempts, dead
// letters with Replay, and deletion.

import { api } from '../lib/api.js';
import { connectionCharts } from '../lib/connection-charts.js';
import { errorLine, h, page } from '../lib/dom.js';
import { route } from '../lib/router.js';
import { settingsForm } from '../lib/settings-form.js';
import { connectionSettings, stateOf } from '../lib/settings.js';

export async function connectionPage(id) {
  const [connection, stats, attempts, letters, settings] = await Promise.all([
    api('GET', `/api/v1/connections/${id}`), api('GET', '/api/v1/connection-stats'),
    api('GET', `/api/v1/connections/${id}/attempts?limit=20`), api('GET', `/api/v1/connections/${id}/dead-letters?limit=20`),
    connectionSettings()]);
  const mine = stats.items.find((s) => s.connection_id === id);
  const state = stateOf(connection, mine, settings.descriptors);
  const summary = h('div', { class: 'card' }, h('div', { class: 'row' }, h('span', { class: `badge ${state}`, id: 'connection-state' }, state),
    h('span', {}, `${mine?.events_forwarded ?? 0} events forwarded`)),
    mine?.last_error ? h('p', { class: 'error' }, `Last error: ${mine.last_error}`) : h('p', { class: 'muted' }, 'No errors.'));
  const attemptRows = attempts.items.length
    ? h('table', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Outcome'), h('th', {}, 'Status'), h('th', {}, 'Requests'), h('th', {}, 'Error')),
        ...attempts.items.map((a) => h('tr', {}, h('td', {}, new Date(a.attempted_at).toLocaleString()), h('td', {}, a.outcome), h('td', {}, a.status ?? '–'), h('td', {}, a.requests), h('td', {}, a.error ?? ''))))
    : h('p', { class: 'empty' }, 'No delivery attempts yet. Send an event to the input.');
  const letterRows = letters.items.length
    ? h('table', {}, h('tr', {}, h('th', {}, 'Batch'), h('th', {}, 'Status'), h('th', {}, 'Error'), h('th', {}, '')),
        ...letters.items.map((d) => { const error = h('div'); return h('tr', {}, h('td', {}, d.batch_id), h('td', {}, d.status ?? '–'), h('td', {}, d.error, error),
          h('td', {}, h('button', { class: 'secondary', onclick: async () => {
            try { await api('POST', `/api/v1/connections/${id}/dead-letters/${d.id}/replay`); route(); } catch (err) { error.replaceChildren(errorLine(err.message)); }
          } }, 'Replay'))); }))
    : h('p', { class: 'empty' }, 'No dead letters.');
  const remove = h('button', { class: 'danger', onclick: async () => {
    if (!confirm('Delete this connection? Pending deliveries are dropped.')) return;
    await api('DELETE', `/api/v1/connections/${id}`); location.hash = '#/connections';
  } }, 'Delete connection');
  page('Connection', summary, connectionCharts(id),
    settingsForm(settings, connection.settings, 'Save', async (values) => { await api('PATCH', `/api/v1/connections/${id}`, { settings: values }); route(); }),
    h('div', { class: 'card' }, h('h2', {}, 'Recent delivery attempts'), attemptRows),
    h('div', { class: 'card' }, h('h2', {}, 'Dead letters'), letterRows), remove);
}
