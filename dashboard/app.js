// Boson's dashboard: a small single-page app over the admin API, written as native ES modules
// (no build step, no framework; Boson embeds these files as they are). This entry module maps
// each section of the URL to its page and wires the nav bar's Sign out.

import { api, setCsrf } from './lib/api.js';
import { leavePage, route, start } from './lib/router.js';
import { catalogPage } from './pages/catalog.js';
import { connectPage } from './pages/connect.js';
import { connectionPage } from './pages/connection.js';
import { connectionsPage } from './pages/connections.js';
import { inputsPage } from './pages/inputs.js';
import { livePage } from './pages/live.js';
import { outputsPage } from './pages/outputs.js';
import { signInPage } from './pages/signin.js';

document.getElementById('signout').addEventListener('click', async () => {
  leavePage();
  await api('POST', '/dashboard/logout').catch(() => {});
  setCsrf(null);
  // Setting the hash it already has fires no hashchange: render the sign-in page directly then.
  if (location.hash === '#/signin') route();
  else location.hash = '#/signin';
});

// The first entry is also the page for an empty or unknown hash.
start({
  connections: connectionsPage,
  'connections/:id': connectionPage,
  inputs: inputsPage,
  outputs: outputsPage,
  connect: connectPage,
  live: livePage,
  catalog: catalogPage,
  'catalog/:id': catalogPage,
}, signInPage);
