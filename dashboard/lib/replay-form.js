// A connection's replay by time range: preview it (a dry run: how many batches, events and
// requests, and the first bodies as the current settings would send them), start it, follow its
// progress and cancel it (POST /api/v1/connections/{id}/replay, GET /api/v1/replays/{id}).

import { api } from './api.js';
import { errorLine, h } from './dom.js';

const EVENT_TYPES = ['custom_event', 'screen_view', 'commerce_event', 'session_start', 'session_end', 'application_state_transition',
  'first_run', 'uninstall', 'opt_out', 'profile', 'user_attribute_change', 'user_identity_change', 'crash_report', 'breadcrumb',
  'network_performance', 'push_registration', 'push_message', 'push_reaction', 'pre_attribution'];

/** A `datetime-local` value for a time in ms, in the browser's zone. */
const local = (ms) => { const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000); return d.toISOString().slice(0, 16); };

export function replayCard(connectionId) {
  const now = Date.now();
  const from = h('input', { type: 'datetime-local', id: 'replay-from', value: local(now - 3600_000) });
  const to = h('input', { type: 'datetime-local', id: 'replay-to', value: local(now + 60_000) });
  const source = h('select', { id: 'replay-source' }, h('option', { value: 'batches' }, 'Accepted batches (filtered again with today\'s settings)'),
    h('option', { value: 'dead_letters' }, 'Dead letters (sent as they were)'));
  const types = h('select', { id: 'replay-types', multiple: true, size: '4', 'aria-describedby': 'replay-types-help' },
    ...EVENT_TYPES.map((t) => h('option', { value: t }, t)));
  const rate = h('input', { type: 'number', id: 'replay-rate', min: '1', max: '10000', step: '1', placeholder: 'the connection\'s limit, else 100' });
  const result = h('div', { id: 'replay-result' });
  const request = (dryRun) => {
    const body = { from_ms: new Date(from.value).getTime(), to_ms: new Date(to.value).getTime(), source: source.value, dry_run: dryRun };
    const chosen = [...types.selectedOptions].map((o) => o.value);
    if (chosen.length) body.event_types = chosen;
    if (rate.value) body.rate_per_second = Number(rate.value);
    return api('POST', `/api/v1/connections/${connectionId}/replay`, body);
  };
  const run = (dryRun) => async () => {
    try {
      const answer = await request(dryRun);
      if (dryRun) showPreview(result, answer, source.value);
      else follow(result, answer.replay_id);
    } catch (err) { result.replaceChildren(errorLine(err.message)); }
  };
  return h('div', { class: 'card replay' }, h('h2', {}, 'Replay'),
    h('p', { class: 'muted' }, 'Send this connection\'s past traffic again. Preview first: nothing is sent until you start.'),
    h('div', { class: 'replay-fields' },
      h('div', {}, h('label', { for: 'replay-from' }, 'From'), from),
      h('div', {}, h('label', { for: 'replay-to' }, 'To'), to),
      h('div', {}, h('label', { for: 'replay-source' }, 'Source'), source),
      h('div', {}, h('label', { for: 'replay-rate' }, 'Requests per second'), rate)),
    h('label', { for: 'replay-types' }, 'Only these event types'), types,
    h('small', { class: 'help', id: 'replay-types-help' }, 'None selected: every type the connection forwards. Ctrl/Cmd-click to choose several.'),
    h('p', { class: 'row' }, h('button', { type: 'button', class: 'secondary', id: 'replay-preview', onclick: run(true) }, 'Preview replay'),
      h('button', { type: 'button', id: 'replay-start', onclick: run(false) }, 'Start replay')),
    result);
}

const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;

function showPreview(target, answer, source) {
  const from = source === 'dead_letters' ? count(answer.batches, 'dead letter', 'dead letters') : count(answer.batches, 'batch', 'batches');
  target.replaceChildren(h('p', { id: 'replay-preview-summary' },
    `Would send ${count(answer.requests, 'request', 'requests')} carrying ${count(answer.events, 'event', 'events')} from ${from}`,
    answer.complete ? '.' : ' (counted up to the scan limit; the range holds more).'),
  answer.sample.length ? [h('span', { class: 'field-label' }, `First ${answer.sample.length === 1 ? 'body' : `${answer.sample.length} bodies`}`),
    h('pre', { class: 'json' }, JSON.stringify(answer.sample[0], null, 2))] : h('p', { class: 'muted' }, 'Nothing in this range would be sent.'));
}

/** Shows a running replay's progress every second until it ends or the page is left. */
function follow(target, replayId) {
  const line = h('p', { id: 'replay-progress' }, 'Starting…');
  const cancel = h('button', { type: 'button', class: 'danger', onclick: async () => { await api('POST', `/api/v1/replays/${replayId}/cancel`).catch(() => {}); } }, 'Cancel replay');
  target.replaceChildren(line, cancel);
  const tick = async () => {
    if (!document.body.contains(line)) return;
    try {
      const r = await api('GET', `/api/v1/replays/${replayId}`);
      line.textContent = `Replay ${r.replay_id}: ${r.status} · ${r.batches} batches, ${r.events} events, ${r.requests} requests queued, ${r.sent} sent, ${r.failed} failed${r.expired ? `, ${r.expired} expired (pruned before their turn)` : ''}${r.error ? ` · ${r.error}` : ''}`;
      if (r.status === 'running') setTimeout(tick, 1000); else cancel.remove();
    } catch (err) { line.replaceChildren(errorLine(err.message)); }
  };
  tick();
}
