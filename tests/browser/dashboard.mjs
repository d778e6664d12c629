// Walks the dashboard in Debian's headless Chromium like a user following the quickstart, and
// saves a screenshot of each page under the given directory.
//
// Usage: node dashboard.mjs setup <boson_url> <admin_token> <webhook_url> <screenshot_dir>
//          signs in, creates a custom-feed input and a webhook output, connects them; prints
//          {"api_key", "api_secret", "connection_id"} as one JSON line
//        node dashboard.mjs deactivate <boson_url> <admin_token> <connection_id> <screenshot_dir>
//          signs in and switches the connection to inactive on its detail page
//        node dashboard.mjs live <boson_url> <admin_token> <key:secret:expected> <screenshot_dir>
//          opens the Live Stream, sends one event to the Events API, and waits until the event
//          shows and its connection reports the expected outcome (forwarded or filtered)
//        node dashboard.mjs live-history <boson_url> <admin_token> <key:secret:name_sent_before> <screenshot_dir>
//          opens the Live Stream after an event named <name_sent_before> was sent and finds it by
//          name (history); sends one more and finds it by name; opens an outbound row (linked to
//          its event) and moves with the keyboard; screenshots at 1440 and 420 px; signs out and
//          checks that the navigation is hidden with no tab marked
//        node dashboard.mjs filter <boson_url> <admin_token> <connection_id> <screenshot_dir>
//          opens the input's data catalog from the connection, switches the event "Live Test" off
//          in the Data Filter grid, previews the change (dry run), saves; prints {"summary"}
//        node dashboard.mjs signing <boson_url> <admin_token> - <screenshot_dir>
//          generates the first output's signing secret, seen once, and adds the custom header
//          X-Team: growth; prints {"secret", "later"}
//        node dashboard.mjs unsigning <boson_url> <admin_token> - <screenshot_dir>
//          disables the first output's signing (confirmed) and waits for its badge to turn
//          unsigned; prints {"badge"}
//        node dashboard.mjs replay <boson_url> <admin_token> <connection_id> <screenshot_dir>
//          previews a replay of the last hour of the connection; prints {"summary"}
//        node dashboard.mjs retrying <boson_url> <admin_token> <connection_id> <screenshot_dir>
//          opens a failing connection; prints its next attempt and give-up line {"retrying"}
//        node dashboard.mjs charts <boson_url> <admin_token> <connection_id:received:forwarded> <screenshot_dir>
//          opens the Overview and the connection's page after traffic and checks the charts'
//          points add up to the events received and forwarded, at 1440 and 420 px
import { chromium } from 'playwright-core';

const [phase, base, token, target, shots] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await (await browser.newContext({ viewport: { width: 1280, height: 860 } })).newPage();
page.on('pageerror', (error) => console.error(`[page error] ${error}`));
// Anything the Content-Security-Policy blocks is a failure: the dashboard must work under it.
const blocked = [];
page.on('console', (message) => {
  if (message.type() === 'error' && message.text().includes('Content Security Policy')) blocked.push(message.text());
});
page.on('dialog', (dialog) => dialog.accept());
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });

async function signIn() {
  await page.goto(base);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Connections' }).waitFor();
}

/** The Live Stream phase: history, names, linked rows, keyboard, both widths, signed-out nav. */
async function liveHistoryPhase() {
  const [key, secret, before] = target.split(':');
  await page.setViewportSize({ width: 1440, height: 900 });
  await signIn();
  await page.getByRole('link', { name: 'Live Stream' }).click();
  // Sent before the page was opened: it comes from the node's history, by its name.
  await page.locator('#live-table tr.inbound', { hasText: before }).first().waitFor({ timeout: 5000 });
  const after = 'Sent After Opening';
  const event = { environment: 'development', mpid: 8, events: [{ event_type: 'screen_view', data: { screen_name: after } }] };
  const response = await fetch(`${base}/v2/events`, { method: 'POST', body: JSON.stringify(event),
    headers: { authorization: `Basic ${btoa(`${key}:${secret}`)}`, 'content-type': 'application/json' } });
  if (response.status !== 202) throw new Error(`the Events API answered ${response.status}`);
  await page.locator('#live-table tr.inbound', { hasText: after }).first().waitFor({ timeout: 5000 });
  // An outbound row names its event and opens that event, marked in the list, beside it.
  const outbound = page.locator('#live-table tr.outbound', { hasText: after }).first();
  await outbound.waitFor({ timeout: 5000 });
  await outbound.click();
  await page.locator('#live-detail h2', { hasText: after }).waitFor();
  await page.locator('#live-table tr.inbound.linked', { hasText: after }).waitFor();
  const [list, detail] = await Promise.all([page.locator('.live-list').boundingBox(), page.locator('#live-detail').boundingBox()]);
  if (!(detail.x > list.x + list.width - 1)) throw new Error('the detail is not beside the list at 1440 px');
  // Keyboard: into the list, down to the oldest rows, Enter opens the focused one.
  await page.locator('.live-list').focus();
  await page.keyboard.press('ArrowDown');
  const rows = await page.locator('#live-table tr.live-row').count();
  for (let i = 1; i < rows; i += 1) await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await page.locator('#live-detail h2', { hasText: before }).waitFor();
  await shot('live-1440');
  await page.setViewportSize({ width: 420, height: 900 });
  await shot('live-420');
  // Signed out, the navigation is hidden and no tab stays marked.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Admin token').waitFor();
  if (await page.locator('#nav').isVisible()) throw new Error('the navigation is visible when signed out');
  if (await page.locator('nav a.active').count()) throw new Error('a tab stays marked when signed out');
  await shot('signed-out-420');
  await page.setViewportSize({ width: 1440, height: 900 });
  await shot('signed-out-1440');
  return { ok: true, rows };
}

/** A screenshot at phone width (420 px) too, then back to the desktop size. */
async function narrowShot(name) {
  await page.setViewportSize({ width: 420, height: 860 });
  await page.waitForTimeout(100);
  await shot(`${name}-420`);
  await page.setViewportSize({ width: 1280, height: 860 });
}

// Phases of the connection controls (issues 13 and 14), apart from the quickstart's.
const controlPhases = {
  async filter() {
    await signIn();
    await page.goto(`${base}/#/connections/${target}`);
    await page.getByRole('link', { name: 'Data catalog of the input' }).click();
    await page.locator('#catalog-events', { hasText: 'Live Test' }).waitFor();
    await shot('12-catalog');
    await narrowShot('12-catalog');
    await page.goto(`${base}/#/connections/${target}`);
    const toggle = page.getByLabel('Send custom_event › Live Test', { exact: true });
    await toggle.waitFor();
    await page.locator('#data-filter-grid').scrollIntoViewIfNeeded();
    await shot('13-data-filter');
    await page.getByLabel('Search data points').fill('live');
    await toggle.uncheck();
    await page.getByRole('button', { name: 'Preview changes' }).click();
    await page.locator('#dry-run-changes', { hasText: 'data_filter: custom_event "Live Test"' }).waitFor();
    const summary = await page.locator('#dry-run-summary').textContent();
    await shot('14-dry-run');
    await narrowShot('14-dry-run');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('heading', { name: 'Saved', exact: true }).waitFor();
    await shot('15-saved');
    console.log(JSON.stringify({ ok: true, summary }));
  },
  async signing() {
    await signIn();
    await page.getByRole('link', { name: 'Outputs' }).click();
    await page.getByRole('button', { name: 'Signing secret' }).first().click();
    await page.getByRole('button', { name: 'Generate secret' }).click();
    const secret = await page.locator('#signing-secret').textContent();
    await shot('16-signing-secret');
    await narrowShot('16-signing-secret');
    await page.getByRole('button', { name: 'Close' }).click();
    await page.getByRole('button', { name: 'Signing secret' }).first().click();
    await page.getByRole('button', { name: 'Rotate secret' }).waitFor();
    const later = await page.locator('#modal').textContent();
    await shot('17-signing-enabled');
    await page.getByRole('button', { name: 'Close' }).click();
    await page.getByRole('button', { name: 'Edit' }).first().click();
    await page.getByRole('button', { name: '+ Add header' }).click();
    await page.getByLabel('Header name').fill('X-Team');
    await page.getByLabel('Header value').fill('growth');
    await shot('17-custom-headers');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.locator('#modal').waitFor({ state: 'hidden' });
    console.log(JSON.stringify({ ok: true, secret, later }));
  },
  async unsigning() {
    await signIn();
    await page.getByRole('link', { name: 'Outputs' }).click();
    await page.getByRole('button', { name: 'Signing secret' }).first().click();
    // The confirm dialog is accepted by the page-wide handler.
    await page.getByRole('button', { name: 'Disable signing' }).click();
    await page.locator('#modal').waitFor({ state: 'hidden' });
    const badge = page.locator('tr[data-output] .badge').first();
    await badge.filter({ hasText: 'unsigned' }).waitFor();
    await shot('18-signing-disabled');
    console.log(JSON.stringify({ ok: true, badge: await badge.textContent() }));
  },
  async retrying() {
    await signIn();
    await page.goto(`${base}/#/connections/${target}`);
    const line = page.locator('#retrying');
    await line.waitFor();
    await shot('19-connection-failing');
    console.log(JSON.stringify({ ok: true, retrying: await line.textContent() }));
  },
  async replay() {
    await signIn();
    await page.goto(`${base}/#/connections/${target}`);
    await page.getByRole('button', { name: 'Preview replay' }).click();
    const summary = await page.locator('#replay-preview-summary').textContent();
    await page.locator('#replay-result').scrollIntoViewIfNeeded();
    await shot('18-replay-preview');
    await narrowShot('18-connection');
    console.log(JSON.stringify({ ok: true, summary }));
  },
};
// ---- Charts phase (Overview and the connection page's Traffic block) ----
async function chartValues(selector) {
  await page.locator(`${selector} .point, ${selector} .bar`).first().waitFor({ state: 'attached' });
  return page.locator(`${selector} .point, ${selector} .bar`).evaluateAll((els) => els.map((e) => Number(e.dataset.value)));
}

async function expectSum(selector, expected) {
  const values = await chartValues(selector);
  const sum = values.reduce((a, v) => a + v, 0);
  if (sum !== expected) throw new Error(`${selector}: points ${JSON.stringify(values)} add up to ${sum}, not ${expected}`);
  return values.length;
}

// Every chart fits the viewport, and on a page of charts only (the Overview) all the content.
async function fitsWidth(width, wholePage) {
  const widest = await page.evaluate((whole) => Math.max(whole ? document.getElementById('main').scrollWidth : 0,
    ...[...document.querySelectorAll('.chart')].map((c) => c.getBoundingClientRect().right)), wholePage);
  if (widest > width) throw new Error(`the content is ${widest} px wide at a ${width} px viewport`);
}

async function chartsPhase(target) {
  const [connectionId, received, forwarded] = target.split(':');
  await page.setViewportSize({ width: 1440, height: 900 });
  await signIn();
  await page.getByRole('link', { name: 'Overview' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  const points = await expectSum('#chart-received', Number(received));
  await expectSum('#chart-forwarded', Number(forwarded));
  const latency = await chartValues('#chart-latency');
  if (!latency.length || latency.some((v) => !(v > 0))) throw new Error(`latency points: ${latency}`);
  // Hovering a point shows its value in the tooltip.
  await page.locator('#chart-received .point').first().hover();
  await page.locator('#chart-received .chart-tip', { hasText: received }).waitFor();
  await shot('20-overview-1440');
  await page.setViewportSize({ width: 420, height: 900 });
  await page.waitForTimeout(300);
  await expectSum('#chart-received', Number(received));
  await fitsWidth(420, true);
  await shot('21-overview-420');
  await page.getByRole('button', { name: 'Last day' }).click();
  await page.locator('button[data-range=day][aria-pressed=true]').waitFor();
  await expectSum('#chart-forwarded', Number(forwarded));
  await page.goto(`${base}/#/connections/${connectionId}`);
  await expectSum('#chart-connection-forwarded', Number(forwarded));
  await fitsWidth(420, false);
  await shot('22-connection-charts-420');
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.waitForTimeout(300);
  await expectSum('#chart-connection-forwarded', Number(forwarded));
  await shot('23-connection-charts-1440');
  console.log(JSON.stringify({ ok: true, points }));
}
// ---- end of the charts phase ----

let status = 0;
try {
  if (phase === 'setup') {
    await page.goto(base);
    await page.getByLabel('Admin token').waitFor();
    await shot('01-sign-in');
    await signIn();
    await shot('02-connections-empty');

    await page.getByRole('link', { name: 'Inputs' }).click();
    await page.getByRole('button', { name: 'Custom feed' }).click();
    await page.getByLabel('Name', { exact: true }).fill('Backend');
    await page.getByRole('button', { name: 'Create input' }).click();
    await page.locator('code.api-key').first().waitFor();
    await shot('03-inputs');
    const apiKey = await page.locator('code.api-key').first().textContent();
    // The secret is masked until revealed.
    await page.getByRole('button', { name: 'Reveal API secret' }).first().click();
    const apiSecret = await page.locator('code.api-secret').first().textContent();

    await page.getByRole('link', { name: 'Outputs' }).click();
    await page.getByRole('button', { name: 'webhooks' }).click();
    await page.getByLabel('Configuration name').fill('My webhook');
    await page.getByLabel('POST URL').fill(target);
    await page.getByLabel('Authorization Header').fill('Bearer dashboard-test');
    await shot('04-output-form');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('cell', { name: 'My webhook' }).waitFor();
    await shot('05-outputs');

    await page.getByRole('link', { name: 'Connections', exact: true }).click();
    await page.getByRole('link', { name: 'Connect', exact: true }).click();
    await page.getByLabel('Input', { exact: true }).selectOption({ label: 'Backend (Custom feed)' });
    await page.getByRole('button', { name: 'Connect Output', exact: true }).click();
    await page.getByLabel('Configuration').selectOption({ label: 'My webhook' });
    await shot('06-connect-output-modal');
    await page.getByRole('button', { name: 'Configure' }).click();
    await page.getByRole('button', { name: '+ Add' }).click();
    await page.getByLabel('Metadata field').selectOption('ip');
    await shot('07-connection-settings');
    await page.getByRole('button', { name: 'Add Connection' }).click();
    await page.locator('#diagram path.edge.active').waitFor({ state: 'attached' });
    await shot('08-connections-diagram');
    const connectionId = await page.locator('tr[data-connection]').first().getAttribute('data-connection');
    console.log(JSON.stringify({ api_key: apiKey, api_secret: apiSecret, connection_id: connectionId }));
  } else if (phase === 'deactivate') {
    await signIn();
    await page.goto(`${base}/#/connections/${target}`);
    await page.getByRole('heading', { name: 'Recent delivery attempts' }).waitFor();
    await shot('09-connection-detail');
    await page.getByLabel('Connection Status: Active').uncheck();
    await page.getByRole('button', { name: 'Save' }).click();
    await page.locator('#connection-state', { hasText: 'inactive' }).waitFor();
    await shot('10-connection-inactive');
    await page.getByRole('link', { name: 'Connections', exact: true }).click();
    await page.locator('#diagram path.edge.inactive').waitFor({ state: 'attached' });
    await shot('11-connections-inactive');
    console.log(JSON.stringify({ ok: true }));
  } else if (phase === 'live') {
    const [key, secret, expected] = target.split(':');
    await signIn();
    await page.getByRole('link', { name: 'Live Stream' }).click();
    await page.locator('#live-status', { hasText: 'Live' }).waitFor();
    const event = { environment: 'development', mpid: 7, events: [{ event_type: 'custom_event',
      data: { event_name: 'Live Test', custom_event_type: 'other', custom_attributes: { from: 'dashboard' } } }] };
    const response = await fetch(`${base}/v2/events`, { method: 'POST', body: JSON.stringify(event),
      headers: { authorization: `Basic ${btoa(`${key}:${secret}`)}`, 'content-type': 'application/json' } });
    if (response.status !== 202) throw new Error(`the Events API answered ${response.status}`);
    const inbound = page.locator('#live-table tr.inbound', { hasText: 'custom_event' }).first();
    await inbound.waitFor();
    // The connection's report can arrive just after the event: look again until it is there.
    const deadline = Date.now() + 10000;
    while (!(await page.locator('#live-outcomes', { hasText: expected }).count())) {
      if (Date.now() > deadline) throw new Error(`no "${expected}" outcome shown`);
      await inbound.click();
      await page.waitForTimeout(200);
    }
    await shot(`live-${expected}`);
    console.log(JSON.stringify({ ok: true, detail: await page.locator('#live-detail').textContent() }));
  } else if (phase === 'live-history') {
    console.log(JSON.stringify(await liveHistoryPhase()));
  } else if (controlPhases[phase]) {
    await controlPhases[phase]();
  } else if (phase === 'charts') {
    await chartsPhase(target);
  } else {
    throw new Error(`unknown phase ${phase}`);
  }
  if (blocked.length) throw new Error(`blocked by the Content-Security-Policy: ${blocked.join(' | ')}`);
} catch (error) {
  console.error(`dashboard.mjs: ${error}`);
  await shot('zz-failure').catch(() => {});
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
