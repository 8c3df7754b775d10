// Decode speed in headless Chromium (WebGPU on SwiftShader) against the native build on
// this machine, both warm: the trained pair the page loads by default (`wgemma demo`'s, which
// warms up itself) and the e2b_like fixture. Speed is reported, never asserted.
//   node tools/browser/bench.mjs [--cli PATH] [--tokens N]   (after tools/browser/build.sh)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const repoRoot = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const cli = arg('--cli', join(repoRoot, 'target/release/wgemma'));
const tokens = Number(arg('--tokens', '32'));
const env = { XDG_RUNTIME_DIR: '/tmp', ...process.env };
const fixtures = join(repoRoot, 'crates/wgemma/tests/data/golden');
const prompt = JSON.parse(readFileSync(join(fixtures, 'e2b_like/expected.json'), 'utf8')).prompts[1].prompt;

/** Warm-up run, then the timed runs, in the page. */
async function browserRuns(context, url, promptIds, draftTokens = 2) {
  const page = await context.newPage();
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300_000 });
  return page.evaluate(async ({ promptIds, tokens, draftTokens }) => {
    const s = window.wgemmaPage.session;
    const out = {};
    for (const speculative of [false, true]) {
      await s.generate({ promptIds, maxNewTokens: 4, speculative, draftTokens });
      out[speculative ? 'speculative' : 'plain'] = (await s.generate({ promptIds, maxNewTokens: tokens, speculative, draftTokens })).stats;
    }
    return out;
  }, { promptIds, tokens, draftTokens });
}

/** Native: one warm-up run then the timed one, in one process (`wgemma demo` does that). */
function nativeDemo() {
  const d = JSON.parse(execFileSync(cli, ['demo', '--json', '--max-new-tokens', String(tokens)], { encoding: 'utf8', env }).trim().split('\n').pop());
  return { adapter: d.adapter, prompt: d.prompt, draftTokens: d.draft_tokens, plain: d.plain.stats, speculative: d.speculative.stats };
}

/** Native fixture runs are separate processes: the second of each pair is reported. */
function nativeFixture() {
  const run = (speculative) => {
    const args = ['generate', '--model', join(fixtures, 'e2b_like'), '--prompt-ids', prompt.join(','),
      '--max-new-tokens', String(tokens), '--json'];
    if (speculative) args.push('--assistant', join(fixtures, 'e2b_like_assistant'));
    execFileSync(cli, args, { env });
    return JSON.parse(execFileSync(cli, args, { encoding: 'utf8', env }).trim().split('\n').pop()).stats;
  };
  return { plain: run(false), speculative: run(true) };
}

const server = await startServer(0);
const base = `http://127.0.0.1:${server.address().port}`;
const profile = mkdtempSync(join(tmpdir(), 'wgemma-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.WGEMMA_CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--enable-unsafe-webgpu', '--headless=new', '--no-sandbox', '--disable-gpu-sandbox',
    '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
try {
  const nd = nativeDemo();
  const nf = nativeFixture();
  const demo = await browserRuns(context, `${base}/web/`, nd.prompt, nd.draftTokens);
  const fixture = await browserRuns(context, `${base}/web/?model=/fixtures/e2b_like&assistant=/fixtures/e2b_like_assistant`, prompt);
  console.log(`native adapter: ${nd.adapter}`);
  console.log(`| model | mode | Chromium (SwiftShader) decode tok/s | native decode tok/s |`);
  console.log(`|---|---|---|---|`);
  for (const [name, b, n] of [['trained pair (kjv-pair, q4)', demo, nd], ['e2b_like fixture (q4)', fixture, nf]]) {
    for (const mode of ['plain', 'speculative']) {
      console.log(`| ${name} | ${mode} | ${b[mode].decodeTokensPerS.toFixed(2)} | ${n[mode].decode_tokens_per_s.toFixed(1)} |`);
    }
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  server.close();
}
