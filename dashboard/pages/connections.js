// Connections: the diagram of inputs joined to outputs (one line per connection, coloured by its
// state; at phone width a list of input → output cards instead, as the drawing would be too small
// to read) and the table of connections with their forwarded counts.

import { api } from '../lib/api.js';
import { h, page, plural, stackTable } from '../lib/dom.js';
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
  const nameOf = (list, id) => list.find((x) => x.id === id)?.name ?? id;
  const table = stackTable(['Input', 'Output', 'State', 'Events forwarded', ''], connections.map((c) => ({
    attrs: { 'data-connection': c.id },
    cells: [nameOf(inputs, c.input_id), nameOf(outputs, c.output_id), h('span', { class: `badge ${state(c)}` }, state(c)),
      String(byConnection[c.id]?.events_forwarded ?? 0),
      h('a', { class: 'button secondary small', href: `#/connections/${c.id}`, 'aria-label': `Open ${nameOf(inputs, c.input_id)} → ${nameOf(outputs, c.output_id)}` }, 'Open')],
  })), { id: 'connections-table' });
  const flows = h('ul', { class: 'flow-list', 'aria-label': 'Connections' }, ...connections.map((c) => h('li', {},
    h('a', { class: `flow ${state(c)}`, href: `#/connections/${c.id}` },
      h('span', { class: 'flow-node' }, nameOf(inputs, c.input_id)), h('span', { class: 'flow-edge', 'aria-hidden': 'true' }, '→'),
      h('span', { class: 'flow-node' }, nameOf(outputs, c.output_id)),
      h('span', { class: 'flow-meta' }, h('span', { class: `badge ${state(c)}` }, state(c)), ` ${plural(byConnection[c.id]?.events_forwarded ?? 0, 'event')} forwarded`)))));
  // At phone width the cards say what the table would: it is left out there.
  page('Connections', h('div', { class: 'row spread' }, h('span', { class: 'muted' }, 'Each line joins an input to an output; open one for its settings.'), connect),
    diagram(inputs, outputs, connections, byConnection, state), flows, h('div', { class: 'card wide-only' }, table));
}

// Inputs in a column on the left, outputs on the right, one line per connection.
function diagram(inputs, outputs, connections, stats, stateOfConnection) {
  const NS = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs, text) => { const el = document.createElementNS(NS, tag); for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v); if (text != null) el.textContent = text; return el; };
  const rowH = 64, width = 900, boxW = 220;
  const height = Math.max(inputs.length, outputs.length, 1) * rowH + 24;
  const svg = s('svg', { class: 'diagram', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'Connections diagram', id: 'diagram' });
  const y = (i) => 20 + i * rowH + 20;
  // A name longer than its box is cut with an ellipsis; the full name shows on hover (title).
  const fit = (label) => (label.length > 27 ? `${label.slice(0, 26)}…` : label);
  const node = (x, i, label, id) => {
    const g = s('g', { class: 'node', 'data-node': id });
    g.append(s('title', {}, label), s('rect', { x, y: y(i) - 20, width: boxW, height: 40, rx: 8 }), s('text', { x: x + 12, y: y(i) + 5 }, fit(label)));
    return g;
  };
  connections.forEach((c) => {
    const i = inputs.findIndex((x) => x.id === c.input_id), o = outputs.findIndex((x) => x.id === c.output_id);
    if (i < 0 || o < 0) return;
    const state = stateOfConnection(c);
    const x1 = 20 + boxW, x2 = width - 20 - boxW, mid = (x1 + x2) / 2;
    svg.append(s('path', { class: `edge ${state}`, 'data-edge': c.id, d: `M${x1},${y(i)} C${mid},${y(i)} ${mid},${y(o)} ${x2},${y(o)}` }));
    svg.append(s('text', { class: 'edge-label', x: mid - 40, y: (y(i) + y(o)) / 2 - 6 }, `${state} · ${plural(stats[c.id]?.events_forwarded ?? 0, 'event')}`));
  });
  inputs.forEach((input, i) => svg.append(node(20, i, `${input.name} (${PLATFORMS[input.platform]})`, input.id)));
  outputs.forEach((output, o) => svg.append(node(width - 20 - boxW, o, `${output.name} (webhook)`, output.id)));
  return svg;
}
