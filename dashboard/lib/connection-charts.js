// The chart block of a connection's page: events forwarded, failures and dead letters, latency
// p50/p99 and backlog over the last hour or day, from GET /api/v1/metrics?connection_id=.

import { api } from './api.js';
import { chart, rangeSwitch } from './chart.js';
import { errorLine, h } from './dom.js';

/** A card that loads and draws the connection's charts (returned at once, filled when loaded). */
export function connectionCharts(id, range = 'hour') {
  const card = h('div', { class: 'card charts-block', id: 'connection-charts' }, h('p', { class: 'muted' }, 'Loading charts…'));
  load(card, id, range);
  return card;
}

async function load(card, id, range) {
  try {
    const m = await api('GET', `/api/v1/metrics?range=${range}&connection_id=${encodeURIComponent(id)}`);
    const c = m.connections[0];
    const switcher = rangeSwitch(range, (next) => card.replaceWith(connectionCharts(id, next)));
    card.replaceChildren(h('div', { class: 'row spread' }, h('h2', {}, 'Traffic'), switcher), h('div', { class: 'charts' },
      chart({ title: 'Events forwarded', id: 'chart-connection-forwarded', times: m.times, series: [{ name: 'forwarded', values: c.forwarded }] }),
      chart({ title: 'Failures and dead letters', id: 'chart-connection-failures', kind: 'bar', times: m.times,
        series: [{ name: 'failed requests', values: c.failures }, { name: 'dead letters', values: c.dead_letters }] }),
      chart({ title: 'Delivery latency (accepted → delivered)', id: 'chart-connection-latency', unit: 'ms', times: m.times,
        series: [{ name: 'p50', values: c.latency_p50_ms }, { name: 'p99', values: c.latency_p99_ms }] }),
      chart({ title: 'Backlog (jobs waiting)', id: 'chart-connection-backlog', times: m.times, series: [{ name: 'backlog', values: c.backlog }] })));
  } catch (err) {
    card.replaceChildren(errorLine(`Charts unavailable: ${err.message}`));
  }
}
