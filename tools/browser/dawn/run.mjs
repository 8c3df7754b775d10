// The wasm package's engine on Dawn (Chrome's WebGPU) under Node: the same ES module and
// wasm file the demo page's Web Worker runs (web/pkg), with dawn.node as its WebGPU.
//
//   node tools/browser/dawn/run.mjs [--adapter-only]
//       [--bench-synthetic e2b | --bench-artifact FILE] [--bench-options JSON]
//       [--demo FILE] [--demo-tokens N] [--demo-runs N]
//       [--native-bench JSON_FILE] [--native-demo JSON_FILE] [--cli WGEMMA_BINARY]
//       [--pkg DIR] [--dawn DIR] [--toggle DAWN_TOGGLE]... [--json OUT]
//
// Prints what Dawn offers (adapter, features, WGSL language features, limits), then runs
// `runBench` (`wgemma bench`'s tests, its table and JSON fields) and the shipped pair's
// demo (plain and speculative greedy generation). Given the native runs' JSON
// (`wgemma bench --json`, `wgemma demo --json`; or --cli: run them with that binary once
// Dawn has offered an adapter), the greedy tokens must be identical.
// Exit status: 0 all ran and matched, 1 a failure or mismatch, 2 Dawn offered no adapter.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { dawnPackageDir, describeAdapter, installDawn, NO_ADAPTER, uninstallDawn } from './dawn.mjs';
import { benchTable } from './table.mjs';

const repoRoot = join(new URL('.', import.meta.url).pathname, '..', '..', '..');

const { values: args } = parseArgs({
  options: {
    'adapter-only': { type: 'boolean', default: false },
    'bench-synthetic': { type: 'string' },
    'bench-artifact': { type: 'string' },
    'bench-options': { type: 'string', default: '{}' },
    demo: { type: 'string' },
    'demo-tokens': { type: 'string', default: '64' },
    'demo-runs': { type: 'string', default: '3' },
    'native-bench': { type: 'string' },
    'native-demo': { type: 'string' },
    cli: { type: 'string' },
    pkg: { type: 'string', default: join(repoRoot, 'web', 'pkg') },
    dawn: { type: 'string' },
    toggle: { type: 'string', multiple: true, default: [] },
    json: { type: 'string' },
  },
});

const log = (line) => console.error(`dawn: ${line}`);
const report = { runtime: `node ${process.version} + dawn.node`, toggles: args.toggle, checks: [] };

function check(ok, what, detail = '') {
  report.checks.push({ ok, what, detail });
  log(`${ok ? 'ok  ' : 'FAIL'} ${what}${detail ? `: ${detail}` : ''}`);
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** The CLI flags of runBench's options. */
const CLI_FLAGS = {
  synthetic: '--synthetic', seed: '--seed', dtype: '--dtype', nPrompt: '-p', nGen: '-n', nDepth: '-d',
  repetitions: '-r', prefillChunk: '--prefill-chunk', draftTokens: '--draft-tokens', acceptance: '--acceptance',
};

/** A native report: from --native-X FILE, or by running `--cli` with `cliArgs`; null without either. */
function nativeReport(file, cliArgs) {
  if (file) {
    // A native step that failed leaves no report: the Dawn run goes on without the comparison.
    try {
      return JSON.parse(readFileSync(file, 'utf8').trim().split('\n').pop());
    } catch (e) {
      check(false, `native report ${file} readable`, e.message);
      return null;
    }
  }
  if (!args.cli) return null;
  log(`native: ${args.cli} ${cliArgs.join(' ')}`);
  const out = execFileSync(args.cli, cliArgs, { encoding: 'utf8', env: { XDG_RUNTIME_DIR: '/tmp', ...process.env },
    stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 64 << 20 });
  return JSON.parse(out.trim().split('\n').pop());
}

/** The wasm package, instantiated under Node from its files (no fetch of file: URLs). */
async function loadPackage(dir) {
  const glue = await import(pathToFileURL(join(dir, 'wgemma_web.js')).href);
  await glue.default({ module_or_path: readFileSync(join(dir, 'wgemma_web_bg.wasm')) });
  return glue;
}

async function bench(glue) {
  const options = JSON.parse(args['bench-options']);
  let model;
  if (args['bench-synthetic']) options.synthetic = args['bench-synthetic'];
  else model = readFileSync(args['bench-artifact']);
  const t0 = performance.now();
  const result = await glue.runBench(options, model, (line) => console.error(line));
  result.wall_s = (performance.now() - t0) / 1e3;
  if (!options.synthetic) result.model = args['bench-artifact'];
  result.model_name = options.synthetic ? `${options.synthetic} (synthetic)` : basename(args['bench-artifact']);
  report.bench = result;
  console.log(`wasm package on ${result.adapter} (Dawn): ${result.repetitions} timed runs per test after a warm-up\n`);
  console.log(benchTable(result));
  console.log(`\nload ${result.load_ms.toFixed(0)} ms | prefill chunk ${result.prefill_chunk}, ${result.gemm} | `
    + `${result.dispatches_per_token.toFixed(1)} dispatches, ${result.barriers_per_token.toFixed(1)} barriers per decode token\n`);
  const cliArgs = ['bench', '--json', ...Object.entries(options).flatMap(([k, v]) => [CLI_FLAGS[k], String(v)])];
  if (args['bench-artifact']) cliArgs.push('--model', args['bench-artifact']);
  const native = nativeReport(args['native-bench'], cliArgs);
  if (native) {
    check(same(result.greedy_tokens, native.greedy_tokens), 'bench: decode test greedy tokens equal the native run\'s',
      same(result.greedy_tokens, native.greedy_tokens) ? `${result.greedy_tokens.length} tokens`
        : `dawn ${JSON.stringify(result.greedy_tokens?.slice(0, 16))}... vs native ${JSON.stringify(native.greedy_tokens?.slice(0, 16))}...`);
  }
}

/** Median of decode tok/s over runs. */
function median(values) {
  const v = [...values].sort((a, b) => a - b);
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
}

async function demo(glue) {
  const session = await glue.Session.create();
  const model = await session.loadArtifact(readFileSync(args.demo));
  const maxNewTokens = Number(args['demo-tokens']);
  const runs = Number(args['demo-runs']);
  const native = nativeReport(args['native-demo'],
    ['demo', '--json', '-m', args.demo, '-r', String(runs), '--max-new-tokens', String(maxNewTokens)]);
  const out = { model: model.description, load_ms: model.loadMs, max_new_tokens: maxNewTokens, draft_tokens: 2 };
  for (const speculative of [false, true]) {
    const mode = speculative ? 'speculative' : 'plain';
    const request = { prompt: native?.prompt_text ?? 'And Jesus said unto them,', maxNewTokens, speculative, draftTokens: 2 };
    let last;
    const rates = [];
    for (let i = 0; i <= runs; i += 1) {
      last = await session.generate(request);
      if (i > 0) rates.push(last.stats.decodeTokensPerS);  // the first run warms up
    }
    out[mode] = { tokens: last.tokens, text: last.text, stats: last.stats, decode_tokens_per_s_runs: rates,
      decode_tokens_per_s_median: median(rates) };
    if (native) {
      check(same(last.promptIds, native.prompt), `demo: prompt ids equal \`wgemma demo\`'s`);
      check(same(last.tokens, native[mode].tokens), `demo: ${mode} greedy tokens equal \`wgemma demo\`'s`,
        same(last.tokens, native[mode].tokens) ? `${last.tokens.length} tokens`
          : `dawn ${JSON.stringify(last.tokens)} vs native ${JSON.stringify(native[mode].tokens)}`);
    }
  }
  out.speedup = out.speculative.decode_tokens_per_s_median / out.plain.decode_tokens_per_s_median;
  check(same(out.plain.tokens, out.speculative.tokens), 'demo: speculative greedy tokens equal plain ones');
  report.demo = out;
  console.log(`demo (${basename(args.demo)}, ${maxNewTokens} tokens, median of ${runs} runs): plain `
    + `${out.plain.decode_tokens_per_s_median.toFixed(1)} tok/s, speculative (k = 2, adaptive) `
    + `${out.speculative.decode_tokens_per_s_median.toFixed(1)} tok/s (x${out.speedup.toFixed(2)}), `
    + `acceptance ${(out.speculative.stats.acceptanceRate ?? 0).toFixed(2)}`);
}

function writeReport() {
  if (args.json) writeFileSync(args.json, `${JSON.stringify(report, null, 1)}\n`);
}

function finish(status) {
  writeReport();
  uninstallDawn();
  process.exit(status);
}

async function main() {
  const dawnDir = dawnPackageDir(args.dawn);
  const gpu = await installDawn(dawnDir, args.toggle);
  const adapter = await describeAdapter(gpu);
  report.adapter = adapter;
  if (!adapter) {
    log(NO_ADAPTER);
    report.error = NO_ADAPTER;
    // The wasm package must still load and say the same through its own API.
    const glue = await loadPackage(args.pkg);
    try {
      await glue.Session.create();
      check(false, 'Session.create() rejects without an adapter', 'it resolved');
    } catch (e) {
      check(e.name === 'WebGpuUnavailable', 'the wasm package loads under Node and Session.create() rejects with WebGpuUnavailable',
        `${e.name}: ${e.message}`);
    }
    return finish(report.checks.every((c) => c.ok) ? 2 : 1);
  }
  console.log(`adapter ${JSON.stringify({ vendor: adapter.vendor, architecture: adapter.architecture, description: adapter.description })}`);
  console.log(`features ${adapter.features.join(',')}`);
  console.log(`wgsl ${adapter.wgslLanguageFeatures.join(',')}`);
  console.log(`limits ${JSON.stringify(adapter.limits)}`);
  if (args['adapter-only']) return finish(0);
  const glue = await loadPackage(args.pkg);
  const steps = [];
  // The demo first: it is short, and its report is written before the bench starts.
  if (args.demo) steps.push(['demo', demo]);
  if (args['bench-synthetic'] || args['bench-artifact']) steps.push(['bench', bench]);
  for (const [name, step] of steps) {
    try {
      await step(glue);
    } catch (e) {
      check(false, `${name} ran`, `${e?.name ?? 'Error'}: ${e?.message ?? e}`);
    }
    writeReport();
  }
  return finish(report.checks.every((c) => c.ok) ? 0 : 1);
}

main().catch((e) => {
  log(`${e?.stack ?? e}`);
  report.error = String(e?.message ?? e);
  finish(1);
});
