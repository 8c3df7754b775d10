// The chat page at `/` of `wgemma serve` in headless Chromium: enters the key, picks the
// server's model, sends one message at temperature 0 and waits for the streamed answer.
// Prints one JSON line: {"text", "status", "updates"} (updates: how many times the answer's
// text grew while streaming). Uses tools/browser's playwright-core and Debian's chromium.
//   node tools/server_test/page.mjs URL KEY MESSAGE MAX_TOKENS
import { chromium } from '../browser/node_modules/playwright-core/index.mjs';

const [url, key, message, maxTokens] = process.argv.slice(2);
if (!maxTokens) {
  console.error('usage: page.mjs URL KEY MESSAGE MAX_TOKENS');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.WGEMMA_CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(120_000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.fill('#key', key);
  await page.dispatchEvent('#key', 'change');
  await page.waitForFunction(() => document.querySelector('#model').options.length > 0);
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', maxTokens);
  // Count the answer's growth: a streamed answer grows once per piece.
  await page.evaluate(() => {
    window.updates = 0;
    new MutationObserver(() => {
      const out = document.querySelector('.assistant');
      if (out && out.textContent) window.updates += 1;
    }).observe(document.querySelector('#log'), { subtree: true, childList: true, characterData: true });
  });
  await page.fill('#input', message);
  await page.click('#send');
  await page.waitForFunction(() => /^(done|error|stopped)/.test(document.querySelector('#status').textContent));
  const result = await page.evaluate(() => ({
    text: document.querySelector('.assistant').textContent,
    status: document.querySelector('#status').textContent,
    updates: window.updates,
  }));
  if (errors.length) result.page_errors = errors;
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
