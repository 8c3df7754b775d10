// Real-browser tests: headless Chromium (Debian's, WebGPU on SwiftShader) driven by
// Playwright against the demo page served on 127.0.0.1.
//
// 1. Golden fixtures: the page loads a checkpoint (and its MTP assistant) by URL; plain and
//    speculative greedy generation must give the token ids the native build gives for the
//    same inputs (`wgemma generate --json`, run here on this machine's Vulkan adapter).
// 2. The trained pair the page loads by default (models/kjv-pair.wgemma), through the page's
//    own controls (prompt box, speculative toggle, Generate), must stream the text and tokens
//    `wgemma demo --json` prints, and show acceptance and speedup; the page's main thread
//    keeps ticking (the engine runs in a Web Worker) while the pair loads and generates.
// 3. A model artifact (`wgemma convert`, target + assistant in one file) loaded by URL
//    gives the native build's tokens from the same file, plain and speculative.
// 4. Without --enable-unsafe-webgpu the page must show a WebGpuUnavailable error.
//
//   node tools/browser/test.mjs [--cli PATH]   (default target/release/wgemma; built by test.sh)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const repoRoot = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const fixtures = join(repoRoot, 'crates/wgemma/tests/data/golden');
const cliArg = process.argv.indexOf('--cli');
const cli = cliArg > 0 ? process.argv[cliArg + 1] : join(repoRoot, 'target/release/wgemma');
const chromiumPath = process.env.WGEMMA_CHROMIUM ?? '/usr/bin/chromium';
const NEW_TOKENS = 24;
/** The trained pair decodes at ~0.1-0.3 tok/s on SwiftShader: 6 tokens (the first token and
 * at least one full round of 3 drafts) keep the run short. */
const DEMO_TOKENS = 6;
/** The page's 20 ms heartbeat may wait no longer than this while a model loads or generates
 * (the engine runs in a Web Worker). Measured on a busy 2-core machine: 39 ms while the pair
 * loaded, 588 ms at worst while it generated (SwiftShader compiling pipelines on every core). */
const MAX_TICK_GAP_MS = 1000;
/** SwiftShader compiles every pipeline on first use: the first generation takes a while. */
const STEP_TIMEOUT_MS = 300_000;

// No network chatter (without these flags Chromium floods a closed network with retries) and
// a fresh profile; WebGPU only with --enable-unsafe-webgpu (without it requestAdapter() is
// null on a machine with no GPU, docs/browser.md).
const BASE_FLAGS = [
  '--headless=new', '--no-sandbox', '--disable-gpu-sandbox', '--disable-quic',
  '--no-first-run', '--disable-background-networking', '--disable-component-update',
  '--disable-sync',
];

const failures = [];
function check(ok, what, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${detail ? `: ${detail}` : ''}`);
  if (!ok) failures.push(what);
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** `wgemma generate --json` on this machine: the native build's tokens and stats. */
function native(model, assistant, promptIds) {
  const args = ['generate', '--model', join(fixtures, model), '--prompt-ids', promptIds.join(','),
    '--max-new-tokens', String(NEW_TOKENS), '--json'];
  if (assistant) args.push('--assistant', join(fixtures, assistant), '--draft-tokens', '2', '--fixed-draft');
  const out = execFileSync(cli, args, { encoding: 'utf8', env: { XDG_RUNTIME_DIR: '/tmp', ...process.env } });
  return JSON.parse(out.trim().split('\n').pop());
}

async function launch(webgpu) {
  const profile = mkdtempSync(join(tmpdir(), 'wgemma-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: [...(webgpu ? ['--enable-unsafe-webgpu'] : []), ...BASE_FLAGS],
  });
  return { context, close: async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); } };
}

/** Opens the page and waits until it is ready (model loaded) or shows an error. */
async function openPage(context, url) {
  const page = await context.newPage();
  page.on('pageerror', (e) => console.log(`  page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().includes('404')) console.log(`  console: ${m.text()}`);
  });
  await page.goto(url);
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state),
    null, { timeout: STEP_TIMEOUT_MS });
  return page;
}

/** Greedy generation through the page's session (the JS API the page uses). */
function generateInPage(page, request) {
  return page.evaluate(async (request) => {
    try {
      return await window.wgemmaPage.session.generate(request);
    } catch (e) {
      return { error: `${e.name}: ${e.message}` };
    }
  }, request);
}

const rate = (s) => `decode ${s.decodeTokensPerS.toFixed(1)} tok/s, ttft ${s.ttftMs.toFixed(0)} ms`;
const nativeRate = (s) => `decode ${s.decode_tokens_per_s.toFixed(1)} tok/s, ttft ${s.ttft_ms.toFixed(0)} ms`;

/** abort() from the token callback stops the generation early (it reaches the worker
 * asynchronously: after that token or a step later); a second generate while one runs is
 * refused with WgemmaBusy; the session works again afterwards. */
async function abortAndBusyCase(page, prompt) {
  const r = await page.evaluate(async (promptIds) => {
    const s = window.wgemmaPage.session;
    let seen = 0;
    const running = s.generate({ promptIds, maxNewTokens: 16 }, () => {
      seen += 1;
      if (seen === 2) s.abort();
    });
    let busy = null;
    try {
      await s.generate({ promptIds, maxNewTokens: 1 });
    } catch (e) {
      busy = e.name;
    }
    const first = await running;
    const after = await s.generate({ promptIds, maxNewTokens: 3 });
    return { busy, tokens: first.tokens.length, stopped: first.stoppedEarly, after: after.tokens.length, idle: !s.busy };
  }, prompt);
  check(r.tokens >= 2 && r.tokens < 16 && r.stopped, 'abort() stops the generation early', JSON.stringify(r));
  check(r.busy === 'WgemmaBusy' && r.after === 3 && r.idle, 'a concurrent generate is refused with WgemmaBusy; the session recovers', JSON.stringify(r));
}

/** Fixture: load by URL in the page, compare plain and speculative tokens with native. */
async function fixtureCase(context, base, target, assistant, promptIndex) {
  const expected = JSON.parse(readFileSync(join(fixtures, target, 'expected.json'), 'utf8'));
  const prompt = expected.prompts[promptIndex].prompt;
  const name = `${target}+${assistant} p${promptIndex} (${prompt.length} prompt tokens)`;
  const page = await openPage(context, `${base}/web/?model=/fixtures/${target}&assistant=/fixtures/${assistant}`);
  const state = await page.evaluate(() => ({ state: document.body.dataset.state, error: window.wgemmaPage.error }));
  check(state.state === 'ready', `${name}: page loads the checkpoint and assistant by URL`, JSON.stringify(state.error ?? ''));
  if (state.state !== 'ready') return;
  if (promptIndex === 1) await abortAndBusyCase(page, prompt);
  for (const speculative of [false, true]) {
    const mode = speculative ? 'speculative' : 'plain';
    const want = native(target, speculative ? assistant : null, prompt);
    // A fixed 2 drafts per round, as the native run: the adaptive schedule (the session's
    // default) picks k from timings, so its rounds differ from run to run.
    const got = await generateInPage(page, { promptIds: prompt, maxNewTokens: NEW_TOKENS, speculative, draftTokens: 2, adaptiveDraft: false });
    check(!got.error && same(got.tokens, want.tokens), `${name}: ${mode} greedy tokens equal native`,
      got.error ?? `browser ${JSON.stringify(got.tokens)} vs native ${JSON.stringify(want.tokens)}`);
    if (got.error) continue;
    if (speculative) {
      check(got.stats.drafted === want.stats.drafted && got.stats.accepted === want.stats.accepted,
        `${name}: same drafts accepted as native`, `${got.stats.accepted}/${got.stats.drafted} vs ${want.stats.accepted}/${want.stats.drafted}`);
    }
    console.log(`     ${mode}: browser ${rate(got.stats)} | native ${nativeRate(want.stats)}`);
  }
  await page.close();
}

/** An artifact (`wgemma convert` of a fixture and its assistant) loaded by URL in the page:
 * plain and speculative tokens equal native generation from the same artifact file. */
async function artifactCase(context, base, artifactDir) {
  const file = join(artifactDir, 'e2b_like.q4.wgemma');
  execFileSync(cli, ['convert', '--model', join(fixtures, 'e2b_like'), '--assistant',
    join(fixtures, 'e2b_like_assistant'), '--out', file], { env: { XDG_RUNTIME_DIR: '/tmp', ...process.env } });
  const prompt = JSON.parse(readFileSync(join(fixtures, 'e2b_like', 'expected.json'), 'utf8')).prompts[0].prompt;
  const page = await openPage(context, `${base}/web/?artifact=/artifacts/e2b_like.q4.wgemma`);
  const state = await page.evaluate(() => ({ state: document.body.dataset.state, error: window.wgemmaPage.error, model: window.wgemmaPage.model }));
  check(state.state === 'ready' && state.model.hasAssistant, 'artifact: page loads target and assistant from one file by URL',
    JSON.stringify(state.error ?? state.model?.description));
  if (state.state !== 'ready') return;
  for (const speculative of [false, true]) {
    const mode = speculative ? 'speculative' : 'plain';
    const args = ['generate', '--model', file, '--prompt-ids', prompt.join(','), '--max-new-tokens', String(NEW_TOKENS), '--json'];
    if (speculative) args.push('--assistant', file, '--draft-tokens', '2', '--fixed-draft');
    const want = JSON.parse(execFileSync(cli, args, { encoding: 'utf8', env: { XDG_RUNTIME_DIR: '/tmp', ...process.env } }).trim().split('\n').pop());
    const got = await generateInPage(page, { promptIds: prompt, maxNewTokens: NEW_TOKENS, speculative, draftTokens: 2, adaptiveDraft: false });
    check(!got.error && same(got.tokens, want.tokens), `artifact: ${mode} greedy tokens equal native`,
      got.error ?? `browser ${JSON.stringify(got.tokens)} vs native ${JSON.stringify(want.tokens)}`);
  }
  await page.close();
}

/** The trained pair through the page's controls, against `wgemma demo --json`. */
async function demoCase(context, base) {
  const want = JSON.parse(execFileSync(cli, ['demo', '--json', '-r', '1', '--max-new-tokens', String(DEMO_TOKENS)],
    { encoding: 'utf8', env: { XDG_RUNTIME_DIR: '/tmp', ...process.env } }).trim().split('\n').pop());
  const page = await openPage(context, `${base}/web/`);
  const model = await page.evaluate(() => window.wgemmaPage.model);
  check(model?.hasTokenizer && model?.hasAssistant && model?.vocabSize === 8192,
    'demo page loads the trained pair (target, assistant, tokenizer) with no model given', JSON.stringify(model));
  if (!model) return;
  const prompt = await page.inputValue('#prompt');
  check(prompt === want.prompt_text, 'demo page: the prompt box holds `wgemma demo`\'s prompt text', prompt);
  const loading = await page.evaluate(() => ({ gap: window.wgemmaPage.maxTickGapMs.loading, ticks: window.wgemmaPage.ticks }));
  check(loading.ticks > 0 && loading.gap < MAX_TICK_GAP_MS, 'the page stays responsive while the pair loads (engine in a Web Worker)',
    `longest wait of the 20 ms timer while loading: ${loading.gap.toFixed(0)} ms`);
  check(same(await page.evaluate(() => window.wgemmaPage.lastResult), null), 'nothing generated before Generate is clicked');
  await page.fill('#max-new', String(DEMO_TOKENS));
  for (const speculative of [false, true]) {
    const mode = speculative ? 'speculative' : 'plain';
    await page.setChecked('#speculative', speculative);
    const before = await page.evaluate(() => window.wgemmaPage.results.length);
    // The click waits for the page to render: on a software GPU (lavapipe in CI) the GPU
    // process may still be compiling the pair's pipelines, and no frame comes until it is done.
    await page.click('#generate', { timeout: STEP_TIMEOUT_MS });
    await page.waitForFunction((n) => window.wgemmaPage.results.length > n || window.wgemmaPage.error,
      before, { timeout: STEP_TIMEOUT_MS });
    const { result, output, stats, error } = await page.evaluate(() => ({
      result: window.wgemmaPage.lastResult,
      output: document.getElementById('output').textContent,
      stats: document.getElementById('stats').textContent,
      error: window.wgemmaPage.error,
    }));
    const wantTokens = want[mode].tokens;
    check(!error && same(result.tokens, wantTokens), `demo page: ${mode} tokens equal \`wgemma demo\``,
      error ? JSON.stringify(error) : `browser ${JSON.stringify(result.tokens)} vs native ${JSON.stringify(wantTokens)}`);
    if (error) continue;
    check(output === want[mode].text, `demo page: ${mode} text streamed into the page`, output.slice(0, 80));
    check(stats.includes('tok/s') && (speculative === stats.includes('acceptance'))
      && (speculative === stats.includes('decode tok/s over the last plain run')),
      `demo page: ${mode} stats shown (speculative: acceptance and speedup)`, stats.slice(0, 200));
    console.log(`     ${mode}: browser ${rate(result.stats)} | native ${nativeRate(want[mode].stats)}`);
  }
  const gap = await page.evaluate(() => window.wgemmaPage.maxTickGapMs.generating);
  check(gap < MAX_TICK_GAP_MS, 'the page stays responsive while the pair generates',
    `longest wait of the 20 ms timer while generating: ${gap.toFixed(0)} ms`);
  await page.close();
}

/** Without the flag there is no WebGPU adapter: the page must say so, visibly. */
async function noWebGpuCase(base) {
  const browser = await launch(false);
  try {
    const page = await openPage(browser.context, `${base}/web/`);
    const shown = await page.evaluate(() => {
      const box = document.getElementById('error');
      return {
        state: document.body.dataset.state,
        visible: box.offsetParent !== null && getComputedStyle(box).display !== 'none',
        text: box.textContent,
        name: box.dataset.name,
      };
    });
    check(shown.state === 'error' && shown.visible && shown.name === 'WebGpuUnavailable'
      && shown.text.includes('WebGPU is unavailable'),
      'without --enable-unsafe-webgpu the page shows a WebGpuUnavailable error', shown.text);
    // A browser with no WebGPU API at all (navigator.gpu undefined).
    await browser.context.addInitScript(() => { delete Navigator.prototype.gpu; });
    const bare = await openPage(browser.context, `${base}/web/`);
    const text = await bare.evaluate(() => document.getElementById('error').textContent);
    check(text.includes('WebGpuUnavailable') && text.includes('navigator.gpu is undefined'),
      'without navigator.gpu the page says so', text);
  } finally {
    await browser.close();
  }
}

const artifactDir = mkdtempSync(join(tmpdir(), 'wgemma-artifacts-'));
const server = await startServer(0, { '/artifacts/': artifactDir });
const base = `http://127.0.0.1:${server.address().port}`;
const started = Date.now();
try {
  const browser = await launch(true);
  try {
    const page = await openPage(browser.context, `${base}/web/?model=/fixtures/none`);
    const device = await page.evaluate(() => window.wgemmaPage.device);
    console.log(`adapter: ${JSON.stringify(device)}`);
    await page.close();
    await fixtureCase(browser.context, base, 'e2b_like', 'e2b_like_assistant', 1);
    await fixtureCase(browser.context, base, 'dense_kv', 'dense_kv_assistant', 0);
    await artifactCase(browser.context, base, artifactDir);
    await demoCase(browser.context, base);
  } finally {
    await browser.close();
  }
  await noWebGpuCase(base);
} finally {
  server.close();
  rmSync(artifactDir, { recursive: true, force: true });
}
console.log(`browser tests: ${failures.length === 0 ? 'all passed' : `${failures.length} failed`} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
process.exit(failures.length === 0 ? 0 : 1);
