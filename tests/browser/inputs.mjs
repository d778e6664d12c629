// The Inputs page in Debian's headless Chromium: masked secrets with Reveal and Copy, rename,
// allowed origins and Web settings, the per-platform snippets (the Events API one is run with the
// real curl), secret rotation and delete. Screenshots at 1440 and 420 px under the given directory.
//
// Usage: node inputs.mjs <boson_url> <admin_token> <inputs_json> <screenshot_dir>
//   inputs_json: {"feed": input, "web": input} as the admin API answered them; `feed` is connected
//   to a webhook (so deleting it is refused), `web` is not. Prints {"ok", "curl"} as one JSON line.
import { execFileSync } from 'node:child_process';
import { chromium } from 'playwright-core';

const [base, token, inputsJson, shots] = process.argv.slice(2);
const { feed, web } = JSON.parse(inputsJson);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
const page = await context.newPage();
page.on('pageerror', (error) => console.error(`[page error] ${error}`));
const blocked = [];
page.on('console', (message) => {
  if (message.type() === 'error' && message.text().includes('Content Security Policy')) blocked.push(message.text());
});
// The page asks in its own dialog; a native one is a failure (and is dismissed, so nothing happens).
const nativeDialogs = [];
page.on('dialog', (dialog) => { nativeDialogs.push(dialog.message()); dialog.dismiss(); });
/** The in-page question's text, answered with its `action` button. */
async function answerQuestion(action) {
  const question = page.getByRole('alertdialog');
  await question.waitFor({ timeout: 3000 });
  const text = await question.textContent();
  await question.getByRole('button', { name: action }).click();
  await question.waitFor({ state: 'hidden' });
  expect(nativeDialogs.length === 0, `a native dialog appeared: ${nativeDialogs}`);
  return text;
}
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
const card = (input) => page.locator(`[data-input="${input.id}"]`);
const clipboard = () => page.evaluate(() => navigator.clipboard.readText());
const expect = (ok, what) => { if (!ok) throw new Error(what); };

/** Opens the Inputs page afresh: a real reload, so what shows comes from the API again. */
async function openInputs() {
  await page.goto(`${base}/#/inputs`);
  await page.reload();
  await page.getByRole('heading', { name: 'Inputs', exact: true }).waitFor();
  await card(feed).waitFor();
}

async function signIn() {
  await page.goto(base);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Connections' }).waitFor();
}

/** Masked by default; Copy gives the real secret without revealing; Reveal and Hide toggle. */
async function secretSteps() {
  const secret = card(feed).locator('code.api-secret');
  const masked = await secret.textContent();
  expect(!masked.includes(feed.api_secret) && masked.includes('•'), `the secret is not masked: ${masked}`);
  expect((await card(feed).locator('code.api-key').textContent()) === feed.api_key, 'the key is not shown');
  await card(feed).getByRole('button', { name: 'Copy API secret' }).click();
  expect((await clipboard()) === feed.api_secret, 'Copy did not put the secret on the clipboard');
  expect((await secret.textContent()) === masked, 'Copy revealed the secret');
  const reveal = card(feed).getByRole('button', { name: 'Reveal API secret' });
  expect((await reveal.getAttribute('aria-pressed')) === 'false', 'Reveal is not a toggle');
  await reveal.click();
  expect((await secret.textContent()) === feed.api_secret, 'Reveal did not show the secret');
  expect((await reveal.getAttribute('aria-pressed')) === 'true', 'Reveal is not pressed');
  await reveal.click();
  expect((await secret.textContent()) === masked, 'Hide did not mask the secret again');
}

/** Esc cancels, Enter saves; the name survives a reload; a blank name shows the API's error. */
async function renameSteps() {
  const rename = card(feed).getByRole('button', { name: 'Rename' });
  await rename.click();
  const field = card(feed).getByLabel('Input name');
  await field.fill('Not this');
  await field.press('Escape');
  await card(feed).locator('.input-name', { hasText: feed.name }).waitFor();
  await rename.click();
  await field.fill('   ');
  await field.press('Enter');
  await card(feed).locator('.input-rename [role=alert]').waitFor();
  await field.fill('Backend (renamed)');
  await field.press('Enter');
  await card(feed).locator('.input-name', { hasText: 'Backend (renamed)' }).waitFor();
  await openInputs();
  await card(feed).locator('.input-name', { hasText: 'Backend (renamed)' }).waitFor();
}

/** A bad origin shows the API's error next to the field; a good one is saved and shown. */
async function webSettingsSteps() {
  const origins = card(web).getByLabel('Allowed origins');
  await origins.fill('shop.example');
  await card(web).getByRole('button', { name: 'Save web settings' }).click();
  await card(web).locator('[data-field=allowed_origins] [role=alert]', { hasText: 'not an origin' }).waitFor();
  await origins.fill('https://shop.example\nhttp://localhost:3000');
  await card(web).locator('details.web-config > summary').click();
  await card(web).getByLabel('v3SecureServiceUrl').fill('https://cdp.example.com/v3/JS/');
  await card(web).getByRole('button', { name: 'Save web settings' }).click();
  await card(web).locator('[data-field="web_hosts.v3SecureServiceUrl"] [role=alert]').waitFor();
  await card(web).getByLabel('v3SecureServiceUrl').fill('');
  await card(web).getByRole('button', { name: 'Save web settings' }).click();
  await card(web).locator('.saved', { hasText: 'Saved' }).waitFor();
  await openInputs();
  const shown = await card(web).getByLabel('Allowed origins').inputValue();
  expect(shown === 'https://shop.example\nhttp://localhost:3000', `origins after reload: ${JSON.stringify(shown)}`);
}

/** The Web SDK snippet names this input's key and this Boson; the curl one, copied, really works. */
async function snippetSteps() {
  const host = new URL(base).host;
  const webSnippet = await card(web).locator('[data-snippet=web] pre').textContent();
  expect(webSnippet.includes(`mParticle.init('${web.api_key}'`), `the Web snippet lacks the key: ${webSnippet}`);
  expect(webSnippet.includes(`v3SecureServiceUrl: '${host}/v3/JS/'`), `the Web snippet lacks Boson's host: ${webSnippet}`);
  const curlShown = await card(feed).locator('[data-snippet=curl] pre').textContent();
  expect(curlShown.includes(`${feed.api_key}:`) && !curlShown.includes(feed.api_secret), `curl snippet shown: ${curlShown}`);
  await card(feed).locator('details.input-setup > summary').click();
  await card(feed).getByRole('button', { name: 'Copy Events API (curl) snippet' }).click();
  const curl = await clipboard();
  expect(curl.includes(`${feed.api_key}:${feed.api_secret}`) && curl.includes(`${base}/v2/events`), `copied: ${curl}`);
  const answer = execFileSync('sh', ['-c', curl], { encoding: 'utf8' });
  return { curl, answer };
}

/** Rotation keeps its confirm and shows the new secret, revealed. */
async function rotateSteps() {
  await card(web).getByRole('button', { name: 'Rotate secret' }).click();
  const asked = await answerQuestion('Rotate secret');
  expect(asked.includes('stops working'), `rotation question: ${asked}`);
  await card(web).locator('.input-notice', { hasText: 'new secret' }).waitFor();
  const shown = await card(web).locator('code.api-secret').textContent();
  expect(/^[0-9a-f]{64}$/.test(shown) && shown !== web.api_secret, `after rotation: ${shown}`);
}

/** Deleting a connected input shows the API's refusal next to it; an unconnected one goes. */
async function deleteSteps() {
  await card(feed).getByRole('button', { name: 'Delete' }).click();
  const asked = await answerQuestion('Delete input');
  expect(asked.includes('"Backend (renamed)"') && asked.includes('1 connection'), `delete question: ${asked}`);
  await card(feed).locator('[role=alert]', { hasText: 'used by a connection' }).waitFor();
  await card(web).getByRole('button', { name: 'Delete' }).click();
  await answerQuestion('Delete input');
  await card(web).waitFor({ state: 'detached' });
  await openInputs();
  expect((await card(web).count()) === 0, 'the deleted input is back after a reload');
}

/** Nothing wider than the viewport: long keys wrap, snippets scroll inside their box. */
async function fits(width) {
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(wide <= width, `the page is ${wide} px wide at ${width} px`);
}

let status = 0;
try {
  await signIn();
  await openInputs();
  await shot('30-inputs-1440');
  await fits(1440);
  await secretSteps();
  await renameSteps();
  await webSettingsSteps();
  const { curl, answer } = await snippetSteps();
  await card(web).locator('details.input-setup > summary').click();
  await shot('33-inputs-snippets-1440');
  await page.setViewportSize({ width: 420, height: 900 });
  await openInputs();
  for (const input of [web, feed]) await card(input).locator('details.input-setup > summary').click();
  await fits(420);
  await shot('31-inputs-420');
  await page.setViewportSize({ width: 1440, height: 900 });
  await openInputs();
  await rotateSteps();
  await shot('32-inputs-rotated');
  await deleteSteps();
  if (blocked.length) throw new Error(`blocked by the Content-Security-Policy: ${blocked.join(' | ')}`);
  console.log(JSON.stringify({ ok: true, curl, answer }));
} catch (error) {
  console.error(`inputs.mjs: ${error}`);
  await shot('zz-inputs-failure').catch(() => {});
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
