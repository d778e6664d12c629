// The Data Filter grid of a connection: one row per data point of the input's catalog (event
// types → event names → attributes, user attributes, identity types), each with a toggle, a
// search box, the "send new data points" switch, and "copy filter from another connection".
// It reads and writes the `data_filter` setting: a row whose toggle differs from the default
// for new data points becomes a rule, and rules naming points the catalog has not seen stay.

import { h } from './dom.js';

/** The key of a rule's data point (everything but `send`), to match rows and rules. */
const keyOf = (point) => JSON.stringify(['event_type', 'event_name', 'attribute', 'user_attribute', 'identity_type'].map((k) => point[k] ?? null));

/** Rows from the catalog and the rules: events grouped by type, then user data. */
function rowsOf(catalog, rules) {
  const types = new Map();
  const typeOf = (t) => { if (!types.has(t)) types.set(t, new Map()); return types.get(t); };
  const userAttributes = new Set(Object.keys(catalog?.user_attributes ?? {}));
  const identityTypes = new Set(catalog?.identity_types ?? []);
  for (const e of catalog?.events ?? []) {
    const names = typeOf(e.event_type);
    if (e.event_name != null) names.set(e.event_name, new Set([...(names.get(e.event_name) ?? []), ...Object.keys(e.attributes ?? {})]));
  }
  for (const r of rules) {
    if (r.user_attribute != null) userAttributes.add(r.user_attribute);
    else if (r.identity_type != null) identityTypes.add(r.identity_type);
    else if (r.event_type != null) {
      const names = typeOf(r.event_type);
      if (r.event_name != null) {
        const attributes = names.get(r.event_name) ?? new Set();
        if (r.attribute != null) attributes.add(r.attribute);
        names.set(r.event_name, attributes);
      }
    }
  }
  const rows = [];
  for (const [type, names] of [...types].sort(([a], [b]) => a.localeCompare(b))) {
    rows.push({ point: { event_type: type }, label: type, level: 0, group: 'Events' });
    for (const [name, attributes] of [...names].sort(([a], [b]) => a.localeCompare(b))) {
      rows.push({ point: { event_type: type, event_name: name }, label: name, level: 1, group: 'Events', parent: type });
      for (const attribute of [...attributes].sort()) {
        rows.push({ point: { event_type: type, event_name: name, attribute }, label: attribute, level: 2, group: 'Events', parent: type, parentName: name });
      }
    }
  }
  for (const name of [...userAttributes].sort()) rows.push({ point: { user_attribute: name }, label: name, level: 0, group: 'User attributes' });
  for (const name of [...identityTypes].sort()) rows.push({ point: { identity_type: name }, label: name, level: 0, group: 'Identity types' });
  return rows;
}

/**
 * The grid as a settings-form control. `context.catalog` is the input's catalog (may be null),
 * `context.others` the other connections ({label, settings}) a filter can be copied from.
 */
export function dataFilterControl(d, value, context) {
  const block = h('div', { class: 'setting df', 'data-setting': d.name, id: `setting-${d.name}` });
  let state = null;
  const render = (filter) => {
    const rules = filter?.rules ?? [];
    const byKey = new Map(rules.map((r) => [keyOf(r), r.send]));
    const sendNew = h('input', { type: 'checkbox', id: 'df-send-new', 'aria-describedby': 'help-df-send-new', checked: filter?.send_new_data_points !== false });
    const search = h('input', { type: 'search', id: 'df-search', placeholder: 'Search data points', 'aria-label': 'Search data points', 'aria-describedby': 'help-data_filter' });
    const rows = rowsOf(context.catalog, rules);
    const body = h('tbody');
    const boxes = new Map();
    let group = null;
    for (const row of rows) {
      if (row.group !== group) {
        group = row.group;
        body.append(h('tr', { class: 'df-group', 'data-group': group }, h('th', { colspan: '2' }, group)));
      }
      const key = keyOf(row.point);
      const box = h('input', { type: 'checkbox', role: 'switch', checked: byKey.get(key) ?? sendNew.checked,
        'aria-label': `Send ${[row.parent, row.parentName, row.label].filter(Boolean).join(' › ')}` });
      boxes.set(key, { box, row });
      body.append(h('tr', { class: `df-row df-level-${row.level}`, 'data-point': key, 'data-search': [row.parent, row.parentName, row.label].filter(Boolean).join(' ').toLowerCase() },
        h('td', {}, h('span', { class: 'df-label' }, row.label), row.level === 0 && row.group === 'Events' ? h('small', { class: 'muted' }, ' event type') : ''),
        h('td', { class: 'df-toggle' }, h('label', { class: 'switch' }, box, h('span', { class: 'slider', 'aria-hidden': 'true' })))));
    }
    // A type switched off gates all its events: its children are shown as not applying.
    const dim = () => {
      for (const { box, row } of boxes.values()) {
        const tr = box.closest('tr');
        const parentOff = row.parent && boxes.get(keyOf({ event_type: row.parent }))?.box.checked === false;
        const nameOff = row.parentName && boxes.get(keyOf({ event_type: row.parent, event_name: row.parentName }))?.box.checked === false;
        tr.classList.toggle('df-gated', Boolean(parentOff || nameOff));
      }
    };
    body.addEventListener('change', dim);
    dim();
    // A match shows with its event type and name above it, so it reads in context.
    search.addEventListener('input', () => {
      const q = search.value.trim().toLowerCase();
      const shown = new Set();
      for (const { box, row } of boxes.values()) {
        if (q !== '' && !box.closest('tr').dataset.search.includes(q)) continue;
        shown.add(keyOf(row.point)).add(row.group);
        if (row.parent) shown.add(keyOf({ event_type: row.parent }));
        if (row.parentName) shown.add(keyOf({ event_type: row.parent, event_name: row.parentName }));
      }
      body.querySelectorAll('tr.df-row').forEach((tr) => { tr.hidden = !shown.has(tr.dataset.point); });
      body.querySelectorAll('tr.df-group').forEach((tr) => { tr.hidden = !shown.has(tr.dataset.group); });
    });
    const unseen = rules.filter((r) => !boxes.has(keyOf(r)));
    state = { sendNew, boxes, unseen, originals: new Set(rules.map(keyOf)) };
    const copy = copyFrom(context.others, (other) => render(other));
    block.replaceChildren(h('span', { class: 'field-label' }, d.label), h('small', { class: 'help', id: `help-${d.name}` }, d.help),
      h('div', { class: 'df-tools' },
        h('label', { class: 'check' }, sendNew, 'Send new data points by default'),
        search, copy),
      h('small', { class: 'help', id: 'help-df-send-new' }, 'Off: only data points switched on below leave through this connection; a data point first seen later stays back until you switch it on.'),
      rows.length ? h('div', { class: 'df-scroll' }, h('table', { class: 'df-grid', id: 'data-filter-grid' }, body))
        : h('p', { class: 'muted' }, 'No data points seen on this input yet. Send events to it and they appear here within seconds.'));
  };
  render(value);
  return {
    block,
    read: () => {
      const sendNew = state.sendNew.checked;
      const rules = [];
      for (const [, { box, row }] of state.boxes) {
        // A row that follows the default needs no rule, unless it had one (kept, as set now).
        if (box.checked !== sendNew || state.originals.has(keyOf(row.point))) rules.push({ ...row.point, send: box.checked });
      }
      return { send_new_data_points: sendNew, rules: [...rules, ...state.unseen] };
    },
  };
}

/** "Copy filter from another connection": a select of the others and a button. */
function copyFrom(others, apply) {
  if (!others?.length) return h('span');
  const select = h('select', { id: 'df-copy-from', 'aria-label': 'Copy filter from', 'aria-describedby': 'help-df-copy' },
    ...others.map((o, i) => h('option', { value: String(i) }, o.label)));
  return h('div', { class: 'row df-copy' }, h('span', { class: 'muted' }, 'Copy from'), select,
    h('small', { class: 'help', id: 'help-df-copy', hidden: true }, 'Replaces this form\'s Data Filter with the chosen connection\'s; nothing is saved until you save.'),
    h('button', { type: 'button', class: 'secondary', id: 'df-copy', onclick: () => apply(others[Number(select.value)].settings.data_filter) }, 'Copy filter'));
}
