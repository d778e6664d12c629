// What a settings change would have done, as the dry run answers it
// (POST /api/v1/connections/{id}/dry-run): a sentence with the totals before and after, and the
// events whose fate changes, each with its verdict now and after the change.

import { h } from './dom.js';

const verdict = (v) => (v.reason ? `${v.outcome.replace('_', ' ')} (${v.reason})` : v.outcome);

/** One sentence: what the change would have filtered of the last events, against today. */
export function previewSentence(result) {
  if (!result.events) return 'No events on this input yet: there is nothing to compare the change with.';
  const { before, after, events } = result;
  const last = events === 1 ? 'the last event' : `the last ${events} events`;
  const parts = [`this change would have filtered ${after.filtered} of ${last} (now ${before.filtered})`];
  if (after.attribute_removed || before.attribute_removed) parts.push(`removed attributes from ${after.attribute_removed} (now ${before.attribute_removed})`);
  parts.push(`and forwarded ${after.forwarded} (now ${before.forwarded})`);
  return `On the input's recent traffic, ${parts.join(', ')}.`;
}

/** The dry run's answer as a card; `title` says whether it was saved already. */
export function previewCard(result, title) {
  const changed = result.items.filter((i) => JSON.stringify(i.before) !== JSON.stringify(i.after));
  return h('div', { class: 'card dry-run', id: 'dry-run', role: 'status' },
    h('h2', {}, title),
    h('p', { id: 'dry-run-summary' }, previewSentence(result)),
    changed.length
      ? h('div', { class: 'df-scroll' }, h('table', { id: 'dry-run-changes' },
          h('tr', {}, h('th', {}, 'Event'), h('th', {}, 'Batch'), h('th', {}, 'Now'), h('th', {}, 'After the change')),
          ...changed.map((i) => h('tr', {},
            h('td', {}, i.event_name ? `${i.event_type} "${i.event_name}"` : i.event_type), h('td', {}, i.batch_id),
            h('td', { class: `outcome-${i.before.outcome}` }, verdict(i.before)),
            h('td', { class: `outcome-${i.after.outcome}` }, verdict(i.after))))))
      : h('p', { class: 'muted' }, `No event of the last ${result.events} would be treated differently.`));
}
