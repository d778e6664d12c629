// Overview: what arrived and what left, per minute over the last hour (or per 5 minutes over the
// last day): events received per input, forwarded per connection, delivery latency p50/p99,
// failures and dead letters, and the backlog, from GET /api/v1/metrics. Refreshes every 15 s.

import { api } from '../lib/api.js';
import { chart, formatValue, rangeSwitch } from '../lib/chart.js';
import { h, page } from '../lib/dom.js';
import { onLeave } from '../lib/router.js';

const REFRESH_MS = 15000;
let range = 'hour';

export async function overviewPage() {
  const m = await api('GET', `/api/v1/metrics?range=${range}`);
  draw(m);
  const timer = setInterval(async () => {
    // Not redrawn while the reader holds a tooltip: the chart would move under the pointer.
    if (document.querySelector('.chart-tip:not([hidden])')) return;
    try { draw(await api('GET', `/api/v1/metrics?range=${range}`)); } catch { /* kept as it was */ }
  }, REFRESH_MS);
  onLeave(() => clearInterval(timer));
}

const total = (values) => values.reduce((a, v) => a + (v ?? 0), 0);
const last = (values) => [...values].reverse().find((v) => v != null);

function draw(m) {
  const t = m.totals;
  const span = range === 'hour' ? 'last hour' : 'last 24 hours';
  const stat = (label, value, id) => h('div', { class: 'stat', id }, h('span', { class: 'stat-value' }, value), h('span', { class: 'muted' }, label));
  const stats = h('div', { class: 'stats' },
    stat(`events received, ${span}`, formatValue(total(t.received)), 'stat-received'),
    stat(`events forwarded, ${span}`, formatValue(total(t.forwarded)), 'stat-forwarded'),
    stat(`failed requests, ${span}`, formatValue(total(t.failures)), 'stat-failures'),
    stat(`dead letters, ${span}`, formatValue(total(t.dead_letters)), 'stat-dead-letters'),
    stat('latest p99 latency', formatValue(last(t.latency_p99_ms), 'ms'), 'stat-p99'));
  const hint = m.inputs.length ? null : h('p', { class: 'muted' }, 'No inputs yet: create one, connect it, and send events to see them here.');
  const switcher = rangeSwitch(range, (next) => { range = next; overviewPage(); });
  const perStep = m.step_secs === 60 ? 'per minute' : 'per 5 minutes';
  page('Overview', h('div', { class: 'row spread' }, h('span', { class: 'muted' }, `Events ${perStep}, ${span}. Updated every 15 s.`), switcher),
    hint ?? '', stats, h('div', { class: 'charts' },
      chart({ title: 'Events received per input', id: 'chart-received', times: m.times, series: m.inputs.map((i) => ({ name: i.name, values: i.received })) }),
      chart({ title: 'Events forwarded per connection', id: 'chart-forwarded', times: m.times, series: m.connections.map((c) => ({ name: c.name, values: c.forwarded })) }),
      chart({ title: 'Delivery latency, accepted → delivered', id: 'chart-latency', unit: 'ms', times: m.times,
        series: [{ name: 'p50', values: t.latency_p50_ms }, { name: 'p99', values: t.latency_p99_ms }] }),
      chart({ title: 'Failures and dead letters', id: 'chart-failures', kind: 'bar', times: m.times,
        series: [{ name: 'failed requests', values: t.failures }, { name: 'dead letters', values: t.dead_letters }] }),
      chart({ title: 'Backlog per connection (jobs waiting)', id: 'chart-backlog', times: m.times, series: m.connections.map((c) => ({ name: c.name, values: c.backlog })) })));
}
