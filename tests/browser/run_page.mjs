// Opens a test page in Debian's headless Chromium (driven by playwright-core) and waits until
// the page sets `window.__bosonDone` (or `window.__bosonError`). Prints one JSON line with what
// the page recorded, and the browser console on stderr.
//
// Usage: node run_page.mjs <url> [timeout_ms]
import { chromium } from 'playwright-core';

const [url, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg ?? 30000);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  // Boson's HTTPS in tests uses a self-signed certificate.
  args: ['--no-sandbox', '--disable-gpu', '--ignore-certificate-errors', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let status = 0;
try {
  const page = await browser.newPage();
  page.on('console', (message) => console.error(`[page ${message.type()}] ${message.text()}`));
  page.on('pageerror', (error) => console.error(`[page error] ${error}`));
  await page.goto(url);
  await page.waitForFunction(() => window.__bosonDone || window.__bosonError, null, { timeout });
  const result = await page.evaluate(() => ({
    error: window.__bosonError ?? null,
    identifyMpid: window.__identifyMpid ?? null,
    loginMpid: window.__loginMpid ?? null,
    modifyCode: window.__modifyCode ?? null,
    logoutMpid: window.__logoutMpid ?? null,
  }));
  console.log(JSON.stringify(result));
  if (result.error) status = 1;
} catch (error) {
  console.error(`run_page: ${error}`);
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
