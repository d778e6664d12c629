// The data catalog of one input: every event (by type and name) it has sent, with counts, first
// and last seen and each attribute's detected type, its user attributes and identity types
// (GET /api/v1/catalog). New data points show within seconds of first being sent.

import { api } from '../lib/api.js';
import { h, page, stackTable } from '../lib/dom.js';
import { PLATFORMS } from '../lib/platforms.js';

const when = (ms) => new Date(ms).toLocaleString();

export async function catalogPage(id) {
  const inputs = await api('GET', '/api/v1/inputs');
  if (!inputs.length) return page('Data catalog', h('div', { class: 'card empty' }, 'Create an input first (Inputs).'));
  const input = inputs.find((i) => i.id === id) ?? inputs[0];
  const catalog = await api('GET', `/api/v1/catalog?input_id=${encodeURIComponent(input.id)}`);
  const pick = h('select', { id: 'catalog-input', onchange: (e) => { location.hash = `#/catalog/${e.target.value}`; } },
    ...inputs.map((i) => h('option', { value: i.id, selected: i.id === input.id }, `${i.name} (${PLATFORMS[i.platform] ?? i.platform})`)));
  const search = h('input', { type: 'search', id: 'catalog-search', placeholder: 'Search events and attributes', 'aria-label': 'Search the catalog' });
  const table = stackTable(['Event type', 'Name', 'Count', 'First seen', 'Last seen', 'Attributes'], catalog.events.map((e) => ({
    attrs: { 'data-search': [e.event_type, e.event_name, ...Object.keys(e.attributes)].join(' ').toLowerCase() },
    cells: [h('code', {}, e.event_type), e.event_name ?? h('span', { class: 'muted' }, '–'), String(e.count), when(e.first_seen_ms), when(e.last_seen_ms),
      Object.keys(e.attributes).length ? h('ul', { class: 'attrs' }, ...Object.entries(e.attributes).map(([name, type]) => h('li', {}, name, ' ', h('small', { class: 'muted' }, type))))
        : h('span', { class: 'muted' }, 'none')],
  })), { id: 'catalog-events' });
  const events = table.tBodies[0];
  table.querySelectorAll('td:nth-child(3)').forEach((td) => td.classList.add('num'));
  search.addEventListener('input', () => {
    const q = search.value.trim().toLowerCase();
    events.querySelectorAll('tr').forEach((tr) => { tr.hidden = q !== '' && !tr.dataset.search.includes(q); });
  });
  const userAttributes = Object.entries(catalog.user_attributes);
  page('Data catalog',
    h('div', { class: 'card filters' }, h('div', {}, h('label', { for: 'catalog-input' }, 'Input'), pick), h('div', {}, h('label', { for: 'catalog-search' }, 'Search'), search)),
    h('div', { class: 'card' }, h('h2', {}, 'Events'),
      catalog.events.length
        ? h('div', { class: 'df-scroll' }, table)
        : h('p', { class: 'empty' }, 'Nothing seen on this input yet. Events appear here within seconds of being sent.')),
    h('div', { class: 'card' }, h('h2', {}, 'User attributes'),
      userAttributes.length ? h('ul', { class: 'attrs', id: 'catalog-user-attributes' }, ...userAttributes.map(([name, type]) => h('li', {}, name, ' ', h('small', { class: 'muted' }, type))))
        : h('p', { class: 'muted' }, 'None yet.'),
      h('h2', {}, 'Identity types'),
      catalog.identity_types.length ? h('ul', { class: 'attrs', id: 'catalog-identities' }, ...catalog.identity_types.map((t) => h('li', {}, t)))
        : h('p', { class: 'muted' }, 'None yet.')));
}
