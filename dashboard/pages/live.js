// The Live Stream: inbound events and what each connection did with them, as server-sent events,
// filterable by input, connection, direction, event type and MPID. A new page starts with the
// node's recent history; the list and the detail pane sit side by side, and the keyboard moves
// through the list (↑ ↓, Enter opens).

import { api } from '../lib/api.js';
import { h, page } from '../lib/dom.js';
import { onLeave } from '../lib/router.js';
import { eventDetail, eventKey, itemRow } from './live-rows.js';

let source = null;
function stop() { source?.close(); source = null; }

export async function livePage() {
  const [inputs, connections, outputs] = await Promise.all([api('GET', '/api/v1/inputs'), api('GET', '/api/v1/connections'), api('GET', '/api/v1/outputs')]);
  const outputName = (c) => outputs.find((o) => o.id === c.output_id)?.name ?? c.id;
  const connectionName = Object.fromEntries(connections.map((c) => [c.id, outputName(c)]));
  const select = (id, label, options) => [h('label', { for: id }, label), h('select', { id }, h('option', { value: '' }, 'All'), ...options)];
  const [inputLabel, input] = select('live-input', 'Input', inputs.map((i) => h('option', { value: i.id }, i.name)));
  const [connLabel, connection] = select('live-connection', 'Connection', connections.map((c) => h('option', { value: c.id }, outputName(c))));
  const direction = h('select', { id: 'live-direction' }, h('option', { value: 'both' }, 'Both In and Out'), h('option', { value: 'inbound' }, 'Inbound'), h('option', { value: 'outbound' }, 'Outbound'));
  const eventType = h('input', { type: 'text', id: 'live-event-type', placeholder: 'e.g. custom_event' });
  const mpid = h('input', { type: 'text', id: 'live-mpid', placeholder: 'MPID' });
  const status = h('span', { class: 'muted', id: 'live-status', role: 'status' }, 'Connecting…');
  const rows = h('tbody');
  const detail = h('aside', { id: 'live-detail', class: 'card live-detail', 'aria-live': 'polite' });
  const names = {
    input: (id) => inputs.find((i) => i.id === id)?.name ?? id,
    connection: (id) => connectionName[id] ?? id ?? '',
  };
  const inbound = new Map();
  const reports = new Map();
  let selected = null;
  let paused = false;
  const pause = h('button', { class: 'secondary', type: 'button', onclick: () => { paused = !paused; pause.textContent = paused ? 'Resume' : 'Pause'; } }, 'Pause');
  const clear = h('button', { class: 'secondary', type: 'button', onclick: () => { reset(); waiting(); } }, 'Clear Entries');
  const hint = () => h('p', { class: 'muted' }, 'Select an event (click, or ↑ ↓ and Enter) to see its JSON and what each connection did with it.');

  const reset = () => { rows.replaceChildren(); inbound.clear(); reports.clear(); selected = null; detail.replaceChildren(hint()); };
  // The waiting state: said in the list itself, with how to make something appear.
  const waiting = () => {
    if (rows.querySelector('tr.live-row')) return;
    rows.replaceChildren(h('tr', { class: 'live-waiting' }, h('td', { colspan: '6' },
      h('strong', {}, 'Waiting for events…'),
      h('span', { class: 'muted' }, ' Nothing matching the filters arrived recently. Send an event to an input (an SDK or the Events API) and it appears here within a second.'))));
  };

  const showDetail = (item, row) => {
    rows.querySelectorAll('tr.selected, tr.linked').forEach((r) => r.classList.remove('selected', 'linked'));
    row?.classList.add('selected');
    selected = item;
    const key = eventKey(item);
    const event = inbound.get(key)?.item ?? item;
    // An outbound row is linked to its inbound event: both are marked, the pane shows the event.
    if (item.direction === 'outbound') inbound.get(key)?.row.classList.add('linked');
    detail.replaceChildren(...eventDetail(event, reports.get(key) || [], names, item));
  };

  const add = (item) => {
    const key = eventKey(item);
    if (item.direction === 'outbound') reports.set(key, [...(reports.get(key) || []), item]);
    if (paused) return;
    rows.querySelector('tr.live-waiting')?.remove();
    const row = itemRow(item, names);
    row.addEventListener('click', () => showDetail(item, row));
    if (item.direction === 'inbound') inbound.set(key, { item, row });
    rows.prepend(row);
    while (rows.children.length > 500) rows.lastChild.remove();
    // The pane follows news about the event it shows (a report arriving after the event).
    if (selected && eventKey(selected) === key && item.direction === 'outbound') showDetail(selected, rows.querySelector('tr.selected'));
  };

  // Keyboard: ↓ from the list enters it, ↑ ↓ move between rows, Enter or Space opens the focused one.
  const list = h('div', { class: 'card stream live-list', tabindex: '0', 'aria-label': 'Live Stream events; arrow keys move, Enter opens' });
  list.addEventListener('keydown', (e) => {
    const current = document.activeElement?.closest?.('tr.live-row');
    let next = null;
    if (e.key === 'ArrowDown') next = current ? current.nextElementSibling : rows.querySelector('tr.live-row');
    else if (e.key === 'ArrowUp') next = current?.previousElementSibling;
    else if ((e.key === 'Enter' || e.key === ' ') && current) { current.click(); e.preventDefault(); return; }
    else return;
    e.preventDefault();
    next?.focus();
  });

  const connect = () => {
    stop();
    reset();
    const query = new URLSearchParams();
    if (input.value) query.set('input_id', input.value);
    if (connection.value) query.set('connection_id', connection.value);
    query.set('direction', direction.value);
    if (eventType.value) query.set('event_type', eventType.value);
    if (mpid.value) query.set('mpid', mpid.value);
    source = new EventSource(`/api/v1/live-stream?${query}`);
    // Every (re)connection starts with the node's recent history: the list starts again with it.
    source.onopen = () => { reset(); status.textContent = 'Live: events appear as they arrive.'; };
    source.onerror = () => { status.textContent = 'Disconnected; retrying…'; };
    source.addEventListener('item', (e) => add(JSON.parse(e.data)));
    source.addEventListener('caught_up', waiting);
    source.addEventListener('sampled', (e) => { status.textContent = `Busy: showing a sample (${JSON.parse(e.data).skipped} events skipped in the last second).`; });
  };
  for (const el of [input, connection, direction]) el.addEventListener('change', connect);
  for (const el of [eventType, mpid]) el.addEventListener('change', connect);

  list.append(h('table', { id: 'live-table' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Time'), h('th', {}, 'Direction'), h('th', {}, 'Event'), h('th', {}, 'Input / connection'), h('th', {}, 'Outcome'), h('th', {}, 'MPID'))), rows));
  page('Live Stream',
    h('div', { class: 'card filters' },
      h('div', {}, inputLabel, input), h('div', {}, connLabel, connection),
      h('div', {}, h('label', { for: 'live-direction' }, 'Message Direction'), direction),
      h('div', {}, h('label', { for: 'live-event-type' }, 'Event type'), eventType),
      h('div', {}, h('label', { for: 'live-mpid' }, 'MPID'), mpid)),
    h('div', { class: 'row spread' }, status, h('div', { class: 'row' }, pause, clear)),
    h('div', { class: 'live-split' }, list, detail));
  connect();
  // Leaving the page closes the stream, so no hidden page keeps a connection to Boson open.
  onLeave(stop);
}
