// Connections: the diagram of inputs joined to outputs (one line per connection, coloured by its
// state) and the table of connections with their forwarded counts.

import { api } from '../lib/api.js';
import { h, page } from '../lib/dom.js';
import { PLATFORMS } from '../lib/platforms.js';
import { connectionSettings, stateOf } from '../lib/settings.js';

export async function connectionsPage() {
  const [inputs, outputs, connections, stats, { descriptors }] = await Promise.all([
    api('GET', '/api/v1/inputs'), api('GET', '/api/v1/outputs'), api('GET', '/api/v1/connections'), api('GET', '/api/v1/connection-stats'),
    connectionSettings()]);
  const byConnection = Object.fromEntries(stats.items.map((s) => [s.connection_id, s]));
  const connect = h('a', { class: 'button', href: '#/connect', id: 'connect' }, 'Connect');
  if (!connections.length) {
    const hint = !inputs.length ? 'Create an input first.' : !outputs.length ? 'Create a webhook output next.' : 'Connect an input to an output to start forwarding.';
    return page('Connections', h('div', { class: 'row spread' }, h('span', { class: 'muted' }, hint), connect),
      h('div', { class: 'card empty' }, 'No connections yet.'));
  }
  const state = (c) => stateOf(c, byConnection[c.id], descriptors);
  const table = h('table', {}, h('tr', {}, h('th', {}, 'Input'), h('th', {}, 'Output'), h('th', {}, 'State'), h('th', {}, 'Events forwarded'), h('th', {}, '')),
    ...connections.map((c) => h('tr', { 'data-connection': c.id },
      h('td', {}, inputs.find((i) => i.id === c.input_id)?.name), h('td', {}, outputs.find((o) => o.id === c.output_id)?.name),
      h('td', {}, h('span', { class: `badge ${state(c)}` }, state(c))), h('td', {}, byConnection[c.id]?.events_forwarded ?? 0),
      h('td', {}, h('a', { href: `#/connections/${c.id}` }, 'Details')))));
  page('Connections', h('div', { class: 'row spread' }, h('span', { class: 'muted' }, 'Inputs on the left, outputs on the right.'), connect),
    diagram(inputs, outputs, connections, byConnection, state), h('div', { class: 'card' }, table));
}

// Inputs in a column on the left, outputs on the right, one line per connection.
function diagram(inputs, outputs, connections, stats, stateOfConnection) {
  const NS = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs, text) => { const el = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v); if (text != null) el.textContent = text; return el; };
  const rowH = 64, width = 900, boxW = 220;
  const height = Math.max(inputs.length, outputs.length, 1) * rowH + 24;
  const svg = s('svg', { class: 'diagram', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'Connections diagram', id: 'diagram' });
  const y = (i) => 20 + i * rowH + 20;
  const node = (x, i, label, id) => { const g = s('g', { class: 'node', 'data-node': id }); g.append(s('rect', { x, y: y(i) - 20, width: boxW, height: 40, rx: 8 }), s('text', { x: x + 12, y: y(i) + 5 }, label)); return g; };
  connections.forEach((c) => {
    const i = inputs.findIndex((x) => x.id === c.input_id), o = outputs.findIndex((x) => x.id === c.output_id);
    if (i < 0 || o < 0) return;
    const state = stateOfConnection(c);
    const x1 = 20 + boxW, x2 = width - 20 - boxW, mid = (x1 + x2) / 2;
    svg.append(s('path', { class: `edge ${state}`, 'data-edge': c.id, d: `M${x1},${y(i)} C${mid},${y(i)} ${mid},${y(o)} ${x2},${y(o)}` }));
    svg.append(s('text', { class: 'edge-label', x: mid - 40, y: (y(i) + y(o)) / 2 - 6 }, `${state} · ${stats[c.id]?.events_forwarded ?? 0} events`));
  });
  inputs.forEach((input, i) => svg.append(node(20, i, `${input.name} (${PLATFORMS[input.platform]})`, input.id)));
  outputs.forEach((output, o) => svg.append(node(width - 20 - boxW, o, `${output.name} (webhook)`, output.id)));
  return svg;
}
