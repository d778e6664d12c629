// Connection settings as the admin API describes them. Names, labels, help texts and defaults
// live in Boson's Rust settings model (GET /api/v1/connection-settings); the dashboard only knows
// the kinds of setting, so a new setting needs no change here.

import { api } from './api.js';

let loading = null;

/**
 * The setting descriptors ({name, label, help, kind, default}, in form order) and the metadata
 * fields exclusions may name; fetched once per page load.
 */
export function connectionSettings() {
  loading ??= Promise.all([api('GET', '/api/v1/connection-settings'), api('GET', '/api/v1/metadata-fields')])
    .then(([settings, fields]) => ({ descriptors: settings.settings, metadataFields: fields.items }))
    // A failed load (e.g. signed out meanwhile) is tried again next time, not remembered.
    .catch((err) => { loading = null; throw err; });
  return loading;
}

/** What the diagram and badges show for a connection: inactive, failing or active. */
export function stateOf(connection, stats, descriptors) {
  const status = descriptors.find((d) => d.kind === 'status');
  if (status && connection.settings[status.name] === 'inactive') return 'inactive';
  if (status && connection.settings[status.name] === 'paused') return 'paused';
  return ['retry', 'dead_letter'].includes(stats?.last_outcome) ? 'failing' : 'active';
}
