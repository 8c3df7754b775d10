// device.sh's summary: reads the reports of one call (native bench, native bench with
// --webgpu-limits, native demo, the wasm package on Dawn) from a folder, prints a Markdown
// summary (the side-by-side table, the issue's target ratios, Dawn's adapter, the token
// checks) and writes every report into one JSON file.
//   node tools/browser/dawn/summary.mjs WORK_DIR RESULTS_JSON
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { markdownTable, sideBySide } from './table.mjs';

const [work, resultsPath] = process.argv.slice(2);
const read = (name) => {
  const path = join(work, name);
  if (!existsSync(path)) return null;
  try {
    return JSON.parse(readFileSync(path, 'utf8').trim().split('\n').pop() || 'null');
  } catch (e) {
    return { unreadable: `${name}: ${e.message}` };
  }
};
// `wgemma ... --json` prints one object on its last line; run.mjs writes a whole file.
const readWhole = (name) => {
  const path = join(work, name);
  if (!existsSync(path)) return null;
  try { return JSON.parse(readFileSync(path, 'utf8')); } catch (e) { return { unreadable: `${name}: ${e.message}` }; }
};
const r = {
  native: read('native.json'),
  native_webgpu_limits: read('native-webgpu-limits.json'),
  native_demo: read('native-demo.json'),
  dawn_adapter: readWhole('dawn-adapter.json'),
  dawn_demo: readWhole('dawn-demo.json'),
  dawn_bench: readWhole('dawn-bench.json'),
  dawn_diag: readWhole('dawn-diag.json'),
  steps: existsSync(join(work, 'steps')) ? readFileSync(join(work, 'steps'), 'utf8').trim().split('\n')
    .map((l) => { const [name, exit, seconds] = l.split(' '); return { name, exit: Number(exit), seconds: Number(seconds) }; }) : [],
};
writeFileSync(resultsPath, `${JSON.stringify(r, null, 1)}\n`);

const lines = [];
const say = (s = '') => lines.push(s);
const dawn = r.dawn_bench?.bench;
say('# Native wgpu / native --webgpu-limits / Dawn (the wasm package under Node), one call');
say();
say(markdownTable(['step', 'exit', 's'], r.steps.map((s) => [s.name, s.exit, s.seconds]), 1));
say();
const adapter = r.dawn_adapter?.adapter;
if (adapter) {
  say(`Dawn adapter: ${adapter.description} (${adapter.vendor}, ${adapter.architecture})`);
  say(`- features: ${adapter.features.join(', ')}`);
  say(`- WGSL language features: ${adapter.wgslLanguageFeatures.join(', ')}`);
  say(`- limits: ${JSON.stringify(adapter.limits)}`);
} else {
  say(`Dawn adapter: none (${r.dawn_adapter?.error ?? 'the adapter step wrote no report'})`);
}
say();
for (const [name, rep] of [['native', r.native], ['native --webgpu-limits', r.native_webgpu_limits], ['Dawn', dawn]]) {
  if (rep?.adapter) say(`- ${name}: ${rep.adapter}; ${rep.gemm}; features ${rep.features}`);
}
say();
const columns = [['native', r.native], ['--webgpu-limits', r.native_webgpu_limits], ['Dawn', dawn]];
if (r.dawn_diag?.bench) columns.push(['Dawn, no robustness', r.dawn_diag.bench]);
say(sideBySide(columns));
say();
const ratio = (a, b) => (a && b ? (a / b).toFixed(2) : 'n/a');
const drafter = (rep) => rep?.speculative?.[0]?.drafted?.speedup;
if (r.native && dawn) {
  say('Targets (issue 48): Dawn / native decode >= 0.8, prefill >= 0.5, speculative speedup within 10%, --webgpu-limits within 15% of Dawn');
  say(markdownTable(['figure', 'native', '--webgpu-limits', 'Dawn', 'Dawn / native', 'Dawn / --webgpu-limits'], [
    ['prefill t/s', r.native.prefill_tokens_per_s, r.native_webgpu_limits?.prefill_tokens_per_s, dawn.prefill_tokens_per_s],
    ['decode t/s', r.native.decode_tokens_per_s, r.native_webgpu_limits?.decode_tokens_per_s, dawn.decode_tokens_per_s],
    ['oracle k=2 speedup', r.native.oracle_speedup, r.native_webgpu_limits?.oracle_speedup, dawn.oracle_speedup],
    ['drafter k=2 speedup', drafter(r.native), drafter(r.native_webgpu_limits), drafter(dawn)],
    ['dispatches / token', r.native.dispatches_per_token, r.native_webgpu_limits?.dispatches_per_token, dawn.dispatches_per_token],
    ['host ms / decode step', r.native.host_ms_per_decode_step, r.native_webgpu_limits?.host_ms_per_decode_step, dawn.host_ms_per_decode_step],
    ['unpipelined step ms', r.native.unpipelined_decode_ms_per_step, r.native_webgpu_limits?.unpipelined_decode_ms_per_step, dawn.unpipelined_decode_ms_per_step],
  ].map(([name, n, l, d]) => [name, n?.toFixed?.(2) ?? 'n/a', l?.toFixed?.(2) ?? 'n/a', d?.toFixed?.(2) ?? 'n/a', ratio(d, n), ratio(d, l)]), 1));
  say();
}
const nd = r.native_demo;
const dd = r.dawn_demo?.demo;
if (nd || dd) {
  say(markdownTable(['demo (kjv pair, decode tok/s, median)', 'native', 'Dawn'], [
    ['plain', nd?.plain_decode_tokens_per_s?.median_ts?.toFixed(1) ?? 'n/a', dd?.plain?.decode_tokens_per_s_median?.toFixed(1) ?? 'n/a'],
    ['speculative', nd?.speculative_decode_tokens_per_s?.median_ts?.toFixed(1) ?? 'n/a', dd?.speculative?.decode_tokens_per_s_median?.toFixed(1) ?? 'n/a'],
  ], 1));
  say();
}
const checks = [...(r.dawn_demo?.checks ?? []), ...(r.dawn_bench?.checks ?? [])];
say(`Checks (${checks.filter((c) => c.ok).length}/${checks.length} passed):`);
for (const c of checks) say(`- ${c.ok ? 'ok' : 'FAIL'} ${c.what}${c.detail ? `: ${c.detail}` : ''}`);
for (const [name, rep] of Object.entries(r)) if (rep?.error || rep?.unreadable) say(`- ${name}: ${rep.error ?? rep.unreadable}`);
console.log(lines.join('\n'));
