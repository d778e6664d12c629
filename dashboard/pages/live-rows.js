// The Live Stream's rows and detail pane: how one item reads in the list (name first, then type,
// where it went, what happened and why) and what the pane beside the list shows for an event.

import { h } from '../lib/dom.js';

const time = (ms) => new Date(ms).toLocaleTimeString();

/** The key an inbound event and every outbound report on it share. */
export const eventKey = (item) => `${item.batch_id}:${item.index}`;

/** What happened, in a few words: `forwarded (200)`, `retrying (503) · next 12:00:05`. */
export function outcomeText(item) {
  if (!item.outcome) return '';
  const why = item.setting ? ` (${item.reason ?? item.setting})` : item.status ? ` (${item.status})` : '';
  const next = item.outcome === 'retrying' && item.next_attempt_at ? ` · next ${time(item.next_attempt_at)}` : '';
  return `${item.outcome}${why}${next}${item.note ? ` · ${item.note}` : ''}`;
}

/**
 * The Outcome cell. A delivery that failed says why and, while retrying, when it goes next, in
 * the row itself: a reader scanning the list should not have to open each failure.
 */
function outcomeCell(item) {
  const failing = ['retrying', 'failed', 'dead_letter'].includes(item.outcome);
  if (!failing || !(item.error || item.next_attempt_at)) return h('td', { class: item.outcome ? `outcome-${item.outcome}` : '' }, outcomeText(item));
  return h('td', { class: 'live-outcome' },
    h('span', { class: `outcome-${item.outcome}` }, `${item.outcome}${item.status ? ` · HTTP ${item.status}` : ''}`),
    item.error ? h('small', { class: 'live-why' }, item.error) : '',
    item.outcome === 'retrying' && item.next_attempt_at ? h('small', { class: 'live-why' }, `next attempt ${time(item.next_attempt_at)}`) : '');
}

/** The full reason of an outbound report, for the detail pane. */
function outcomeDetail(item) {
  if (item.setting) return `by ${item.reason ?? item.setting}`;
  return [
    item.status ? `HTTP ${item.status}` : null,
    item.latency_ms != null ? `in ${item.latency_ms} ms` : null,
    item.error,
    item.outcome === 'retrying' && item.next_attempt_at ? `next attempt at ${time(item.next_attempt_at)}` : null,
    item.note,
  ].filter(Boolean).join(' · ');
}

/** One row of the list. `names` turns ids into input and connection names. */
export function itemRow(item, names) {
  const where = item.direction === 'inbound' ? names.input(item.input_id) : names.connection(item.connection_id);
  const label = item.name
    ? [h('span', { class: 'live-name' }, item.name), ' ', h('span', { class: 'live-type' }, item.event_type)]
    : [h('span', { class: 'live-name' }, item.event_type)];
  const outcome = outcomeCell(item);
  return h('tr', { class: `live-row ${item.direction}`, tabindex: '-1', 'data-key': eventKey(item), title: item.error ?? '' },
    h('td', { class: 'live-time' }, time(item.at)),
    h('td', { class: 'live-dir', 'aria-label': item.direction }, item.direction === 'inbound' ? '→ in' : 'out →'),
    h('td', { class: 'live-event' }, ...label),
    h('td', {}, where),
    outcome,
    h('td', { class: 'live-mpid' }, item.mpid ?? ''));
}

/** The detail pane for an event: its JSON and what each connection did with it. */
export function eventDetail(event, reports, names, selected) {
  const title = event.name ? `${event.name} · ${event.event_type}` : event.event_type;
  const results = reports.length
    ? h('table', { id: 'live-outcomes' }, ...reports.map((r) => h('tr', { class: r === selected ? 'selected' : '' },
      h('td', {}, names.connection(r.connection_id)),
      h('td', { class: `outcome-${r.outcome}` }, r.outcome),
      h('td', {}, outcomeDetail(r)))))
    : h('p', { class: 'muted' }, 'No connection has reported on this event yet.');
  return [
    h('h2', {}, title),
    h('p', { class: 'muted' }, `${time(event.at)} · ${names.input(event.input_id)} · batch ${event.batch_id}${event.mpid ? ` · MPID ${event.mpid}` : ''}`),
    h('h3', {}, 'Connections'),
    results,
    event.event ? [h('h3', {}, 'Event'), h('pre', { class: 'json' }, JSON.stringify(event.event, null, 2))]
      : h('p', { class: 'muted' }, 'The inbound event is no longer in the list.'),
  ].flat();
}
