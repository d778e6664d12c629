// The connection settings form, used by the Connect flow and by a connection's page. It is built
// from the API's setting descriptors: each kind of setting has one control, labelled with the
// descriptor's label and followed by its help text.

import { forwardingRulesControl } from './forwarding-rules.js';
import { dataFilterControl } from './data-filter.js';
import { errorLine, h } from './dom.js';

/** One control per kind: `block` goes in the form, `read()` gives the value to send. */
const CONTROLS = {
  boolean(d, value) {
    const box = h('input', { type: 'checkbox', id: `setting-${d.name}`, checked: Boolean(value), 'aria-describedby': `help-${d.name}` });
    return { block: field(d, h('label', { class: 'check' }, box, d.label)), read: () => box.checked };
  },
  status(d, value) {
    // A paused connection (paused by Boson after failing) stays paused until the box is ticked
    // and saved; the box starts unticked so that saving other settings does not resume it.
    const paused = value === 'paused';
    const box = h('input', { type: 'checkbox', class: 'toggle', id: `setting-${d.name}`, checked: value === 'active', 'aria-describedby': `help-${d.name}` });
    const label = paused ? `${d.label}: Active (paused after failing; tick to resume)` : `${d.label}: Active`;
    return { block: field(d, h('label', { class: 'check' }, box, label)), read: () => (box.checked ? 'active' : (paused ? 'paused' : 'inactive')) };
  },
  metadata_exclusions(d, value, { metadataFields }) {
    // Not a labelled group: each select is already named "Metadata field", and a group named
    // after the setting would match that name too wherever controls are found by label.
    const rows = h('div', { id: `setting-${d.name}` });
    const addRow = (chosen = '') => {
      const select = h('select', { 'aria-label': 'Metadata field', 'aria-describedby': `help-${d.name}` }, h('option', { value: '' }, 'Unselected'),
        ...metadataFields.map((f) => h('option', { value: f.path, selected: f.path === chosen }, `${f.label} (${f.path})`)));
      const row = h('div', { class: 'row' }, select, h('button', { type: 'button', class: 'link', 'aria-label': 'Remove field', onclick: () => row.remove() }, '✕'));
      rows.append(row);
    };
    (value || []).forEach((path) => addRow(path));
    const add = h('button', { type: 'button', class: 'secondary', id: `add-${d.name}`, onclick: () => addRow() }, '+ Add');
    return {
      // The help goes under the heading here: below a growing list of rows it would drift away.
      block: h('div', { class: 'setting', 'data-setting': d.name }, h('span', { class: 'field-label' }, d.label), help(d), rows, add),
      read: () => [...rows.querySelectorAll('select')].map((s) => s.value).filter(Boolean),
    };
  },
  optional_count(d, value) {
    const input = h('input', { type: 'number', min: '1', step: '1', id: `setting-${d.name}`, value: value ?? '', 'aria-describedby': `help-${d.name}` });
    return { block: field(d, h('label', { for: `setting-${d.name}` }, d.label), input), read: () => (input.value === '' ? null : Number(input.value)) };
  },
  count(d, value) {
    // A whole number with a default (never empty): an empty box sends the default.
    const input = h('input', { type: 'number', min: '0', step: '1', id: `setting-${d.name}`, value: value ?? d.default, 'aria-describedby': `help-${d.name}` });
    return { block: field(d, h('label', { for: `setting-${d.name}` }, d.label), input), read: () => (input.value === '' ? d.default : Number(input.value)) };
  },
  data_filter: dataFilterControl,
  forwarding_rules: forwardingRulesControl,
  optional_hours(d, value) {
    const input = h('input', { type: 'number', min: '0', step: 'any', id: `setting-${d.name}`, value: value ?? '', 'aria-describedby': `help-${d.name}` });
    return { block: field(d, h('label', { for: `setting-${d.name}` }, d.label), input), read: () => (input.value === '' ? null : Number(input.value)) };
  },
  ordering(d, value) {
    const select = h('select', { id: `setting-${d.name}`, 'aria-describedby': `help-${d.name}` },
      h('option', { value: 'none', selected: value !== 'per_user' }, 'None (fastest)'),
      h('option', { value: 'per_user', selected: value === 'per_user' }, 'Per user (MPID)'));
    return { block: field(d, h('label', { for: `setting-${d.name}` }, d.label), select), read: () => select.value };
  },
  optional_text(d, value) {
    const input = h('input', { type: 'text', id: `setting-${d.name}`, value: value ?? '', 'aria-describedby': `help-${d.name}` });
    return { block: field(d, h('label', { for: `setting-${d.name}` }, d.label), input), read: () => input.value || null };
  },
};

/** A setting's control(s) with its help text beside them. */
function field(d, ...controls) {
  return h('div', { class: 'setting', 'data-setting': d.name }, ...controls, help(d));
}

function help(d) { return h('small', { class: 'help', id: `help-${d.name}` }, d.help); }

/**
 * The settings form. `values` holds the connection's current settings; a setting it lacks starts
 * at the API's default. `onSubmit` gets the complete settings object. `context` carries what
 * the richer controls need: `metadataFields`, and for the Data Filter the input's `catalog` and
 * the `others` connections a filter can be copied from. `extraButtons` go beside the submit
 * button and get `read()`, which returns the settings as the form holds them. `context.saved`,
 * when set, is the confirmation of the last save, shown beside the submit button.
 */
export function settingsForm(context, values, submitLabel, onSubmit, extraButtons = () => []) {
  const { descriptors } = context;
  const controls = descriptors.map((d) => {
    const value = d.name in values ? values[d.name] : d.default;
    const make = CONTROLS[d.kind];
    // A kind this dashboard does not know yet is left out of what is sent, so it keeps its value.
    return make ? { name: d.name, kind: d.kind, ...make(d, value, context) }
      : { name: d.name, kind: d.kind, block: field(d, h('span', { class: 'field-label' }, d.label), h('p', { class: 'muted' }, 'Not editable in this dashboard.')) };
  });
  // Runs of on/off settings share a two-column grid; the others take a full row each.
  const blocks = [];
  for (const control of controls) {
    const last = blocks.at(-1);
    if (control.kind === 'boolean' && last?.classList.contains('grid2')) last.append(control.block);
    else blocks.push(control.kind === 'boolean' ? h('div', { class: 'grid2' }, control.block) : control.block);
  }
  const error = h('div');
  // Beside the button it concerns: the last save's confirmation, or what went wrong.
  const status = h('span', { id: 'settings-status', role: 'status', class: context.saved ? 'success' : '' }, context.saved ?? '');
  const read = () => {
    const out = {};
    for (const control of controls) if (control.read) out[control.name] = control.read();
    return out;
  };
  return h('form', { class: 'card', onsubmit: async (e) => {
    e.preventDefault();
    error.replaceChildren();
    status.replaceChildren();
    try { await onSubmit(read()); } catch (err) { error.replaceChildren(errorLine(err.message)); }
  } },
  h('h2', {}, 'Connection settings'), ...blocks,
  error, h('p', { class: 'row' }, h('button', { type: 'submit', id: 'submit-settings' }, submitLabel), ...extraButtons(read, error), status));
}
