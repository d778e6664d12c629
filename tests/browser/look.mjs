// Walks every dashboard page at 1440 and 420 px in Debian's headless Chromium and checks that it
// looks and works like a product: no horizontal scroll, the nav on one row, help text on every
// connection setting, confirmations next to what they concern (no native dialogs), a visible
// focus ring, Esc closing dialogs, and a retrying Live Stream row saying status, error and next
// attempt. Saves `look-<page>-<width>.png` under the screenshot directory.
//
// Usage: node look.mjs <boson_url> <admin_token> <api_key:api_secret:connection_id> <screenshot_dir>
//   the connection's endpoint answers 500, and an event was sent to it before the walk.
import { chromium } from 'playwright-core';

const [base, token, target, shots] = process.argv.slice(2);
const [, , connectionId] = target.split(':');
const WIDTHS = [1440, 420];
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await (await browser.newContext({ viewport: { width: 1440, height: 900 } })).newPage();
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error}`));
// A native alert/confirm is not a product's dialog: every one is a failure (and dismissed).
page.on('dialog', (dialog) => { problems.push(`native ${dialog.type()} dialog: ${dialog.message()}`); dialog.dismiss(); });
// A dialog is fixed to the viewport: its shots show the viewport, not the whole page.
const shot = (name, fullPage = true) => page.screenshot({ path: `${shots}/${name}.png`, fullPage });
const fail = (message) => { throw new Error(message); };

async function atWidth(width) {
  await page.setViewportSize({ width, height: 900 });
  await page.waitForTimeout(150);
}

/** Nothing on the page is wider than the viewport. */
async function noHorizontalScroll(name) {
  const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, innerWidth]);
  if (scroll > inner) {
    const wide = await page.evaluate(() => [...document.querySelectorAll('main *')]
      .filter((el) => el.getBoundingClientRect().right > innerWidth + 1).slice(0, 3)
      .map((el) => `${el.tagName.toLowerCase()}#${el.id}.${el.className?.baseVal ?? el.className}`));
    fail(`${name}: the page scrolls horizontally (${scroll} > ${inner}): ${wide.join(', ')}`);
  }
}

/** The nav's tabs sit on one row (a scrollable tab bar at narrow width, never wrapped). */
async function navOnOneRow(name) {
  const tops = await page.locator('nav a').evaluateAll((links) => links.map((a) => Math.round(a.getBoundingClientRect().top)));
  if (new Set(tops).size !== 1) fail(`${name}: the nav's tabs wrap onto ${new Set(tops).size} rows`);
}

async function signIn() {
  await page.goto(base);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Connections' }).waitFor();
}

/** Opens a page by its hash and waits for its heading and data. */
async function open(hash, ready) {
  await page.goto(`${base}/${hash}`);
  await page.locator('main h1').waitFor();
  if (ready) await page.locator(ready).first().waitFor({ state: 'attached' });
  await page.waitForTimeout(300);
}

/** Every page at both widths: no horizontal scroll, the nav on one row, a screenshot. */
async function everyPage() {
  const pages = [
    ['overview', '#/overview', '.chart'], ['connections', '#/connections', '#diagram'],
    ['connection', `#/connections/${connectionId}`, '#submit-settings'], ['connect', '#/connect', '#connect-output-button'],
    ['inputs', '#/inputs', 'main h1'], ['outputs', '#/outputs', '#webhooks-tile'],
    ['live', '#/live', '#live-table tr.live-row'], ['catalog', '#/catalog', '#catalog-events'],
  ];
  for (const [name, hash, ready] of pages) {
    await open(hash, ready);
    for (const width of WIDTHS) {
      await atWidth(width);
      await noHorizontalScroll(`${name} at ${width} px`);
      await navOnOneRow(`${name} at ${width} px`);
      await shot(`look-${name}-${width}`);
    }
    await atWidth(1440);
  }
}

/** Every control of every connection setting names its help text, and the help says something. */
async function settingsHaveHelp() {
  await open(`#/connections/${connectionId}`, '#submit-settings');
  const missing = await page.evaluate(() => {
    const out = [];
    for (const block of document.querySelectorAll('form [data-setting]')) {
      const name = block.dataset.setting;
      const help = document.getElementById(`help-${name}`);
      if (!help?.textContent.trim()) out.push(`${name}: no help text`);
      // The Data Filter grid's switches are named by their rows; its heading has the help.
      for (const control of block.querySelectorAll('input, select, textarea')) {
        if (control.closest('#data-filter-grid')) continue;
        const ids = (control.getAttribute('aria-describedby') ?? '').split(/\s+/).filter(Boolean);
        const text = ids.map((id) => document.getElementById(id)?.textContent.trim() ?? '').join('');
        if (!text) out.push(`${name}: ${control.type || control.tagName} "${control.id || control.getAttribute('aria-label') || ''}" has no aria-describedby help`);
      }
    }
    return out;
  });
  if (missing.length) fail(`settings without help: ${missing.join('; ')}`);
}

/** Saving the settings says so beside the Save button; the page keeps its place. */
async function saveConfirms() {
  await open(`#/connections/${connectionId}`, '#submit-settings');
  await page.getByRole('button', { name: 'Save', exact: true }).click();
  const status = page.locator('form #settings-status', { hasText: 'Saved' });
  await status.waitFor({ timeout: 5000 });
  await status.scrollIntoViewIfNeeded();
  for (const width of WIDTHS) {
    await atWidth(width);
    await noHorizontalScroll(`connection saved at ${width} px`);
    await shot(`look-connection-saved-${width}`);
  }
  await atWidth(1440);
}

/** Deleting asks in the page (no native confirm); Esc closes the question and deletes nothing. */
async function confirmationsInPage() {
  await open(`#/connections/${connectionId}`, '#submit-settings');
  const remove = page.getByRole('button', { name: 'Delete connection' });
  await remove.focus();
  await page.keyboard.press('Enter');
  const dialog = page.getByRole('alertdialog');
  await dialog.waitFor({ timeout: 3000 });
  await shot('look-confirm-delete-1440', false);
  await page.keyboard.press('Escape');
  await dialog.waitFor({ state: 'hidden' });
  const focused = await page.evaluate(() => document.activeElement?.textContent);
  if (focused !== 'Delete connection') fail(`after Esc the focus is on "${focused}", not back on Delete connection`);
}

/** Rotating a signing secret asks in the page first, then shows the new secret once. */
async function rotateAsks() {
  await open('#/outputs', '#webhooks-tile');
  const hook = page.locator('tr[data-output]', { hasText: 'Spare webhook' });
  await hook.getByRole('button', { name: 'Signing secret' }).click();
  await page.getByRole('button', { name: 'Generate secret' }).click();
  await page.locator('#signing-secret').waitFor();
  await page.getByRole('button', { name: 'Close' }).click();
  await hook.getByRole('button', { name: 'Signing secret' }).click();
  await page.getByRole('button', { name: 'Rotate secret' }).click();
  const question = page.getByRole('alertdialog');
  await question.waitFor({ timeout: 3000 });
  await shot('look-confirm-rotate-1440', false);
  await question.getByRole('button', { name: 'Rotate secret' }).click();
  await page.locator('#signing-secret').waitFor({ timeout: 3000 });
  await page.getByRole('button', { name: 'Close' }).click();
}

/** Tabbing through a page, every focused control shows a focus ring. */
async function focusRings() {
  await open('#/outputs', '#webhooks-tile');
  await page.locator('body').focus();
  const unringed = [];
  for (let i = 0; i < 14; i += 1) {
    await page.keyboard.press('Tab');
    const ring = await page.evaluate(() => {
      const el = document.activeElement;
      if (!el || el === document.body) return null;
      const style = getComputedStyle(el);
      const shown = (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0) || style.boxShadow !== 'none';
      return shown ? null : `${el.tagName.toLowerCase()} "${el.textContent.trim().slice(0, 30)}"`;
    });
    if (ring) unringed.push(ring);
  }
  if (unringed.length) fail(`focused without a visible ring: ${[...new Set(unringed)].join(', ')}`);
  // The directory tile opens its dialog with the keyboard, and Esc closes it.
  await page.locator('#webhooks-tile').focus();
  await page.keyboard.press('Enter');
  await page.locator('#modal').waitFor();
  await page.keyboard.press('Escape');
  await page.locator('#modal').waitFor({ state: 'hidden' });
}

/** Add Connection on the Connect page confirms on the Connections page it lands on. */
async function connectConfirms() {
  await open('#/connect', '#connect-output-button');
  await page.getByRole('button', { name: 'Connect Output', exact: true }).click();
  await page.getByLabel('Configuration').selectOption({ label: 'Spare webhook' });
  await page.getByRole('button', { name: 'Configure' }).click();
  await page.getByRole('button', { name: 'Add Connection' }).click();
  await page.locator('#notice', { hasText: 'Connection added' }).waitFor({ timeout: 5000 });
  for (const width of WIDTHS) {
    await atWidth(width);
    await noHorizontalScroll(`connections after adding at ${width} px`);
    await navOnOneRow(`connections after adding at ${width} px`);
    await shot(`look-connection-added-${width}`);
  }
  await atWidth(1440);
}

/** The Live Stream's retrying row says the status, the error and when the next attempt goes. */
async function retryingRow() {
  await open('#/live', '#live-table tr.live-row');
  const row = page.locator('#live-table tr.outbound', { hasText: 'retrying' }).first();
  await row.waitFor({ timeout: 10000 });
  for (const width of WIDTHS) {
    await atWidth(width);
    const text = await row.innerText();
    for (const part of ['500', 'receiver answered 500', 'next']) {
      if (!text.includes(part)) fail(`the retrying row at ${width} px does not show "${part}": ${text}`);
    }
    await noHorizontalScroll(`live with a retrying row at ${width} px`);
    await shot(`look-live-retrying-${width}`);
  }
  await atWidth(1440);
}

/** Signed out: the sign-in page at both widths, no nav. */
async function signedOut() {
  await page.goto(base);
  await page.getByLabel('Admin token').waitFor();
  for (const width of WIDTHS) {
    await atWidth(width);
    if (await page.locator('#nav').isVisible()) fail('the nav shows when signed out');
    await noHorizontalScroll(`sign-in at ${width} px`);
    await shot(`look-signin-${width}`);
  }
  await atWidth(1440);
}

// Every step runs even after one fails, so one walk lists everything that is wrong.
let status = 0;
const failed = [];
const done = [];
try {
  await signedOut();
  await signIn();
  for (const step of [everyPage, settingsHaveHelp, saveConfirms, confirmationsInPage, rotateAsks, focusRings, connectConfirms, retryingRow]) {
    try {
      await step();
      done.push(step.name);
    } catch (error) {
      failed.push(`${step.name}: ${error.message.split('\n')[0]}`);
      await shot(`zz-look-failure-${step.name}`).catch(() => {});
      await atWidth(1440);
    }
  }
  if (problems.length) failed.push(...problems);
  if (failed.length) fail(failed.join('\n  '));
  console.log(JSON.stringify({ ok: true, done }));
} catch (error) {
  console.error(`look.mjs (passed: ${done.join(', ') || 'nothing'}):\n  ${error.message}`);
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
