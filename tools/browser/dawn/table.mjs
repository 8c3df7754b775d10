// `wgemma bench`'s table (llama-bench's form: one line per test, mean ± standard
// deviation, the speculative rows' speed over the plain decode test) from a bench report,
// native (`wgemma bench --json`) or the wasm package's (`runBench`).

function mean(t) { return t.avg_ts; }

function meanSd(t) { return `${t.avg_ts.toFixed(2)} ± ${t.stddev_ts.toFixed(2)}`; }

function vsTg(t) {
  if (t.speedup === undefined) return '';
  if ((t.samples_ts ?? []).length < 2) return `x${t.speedup.toFixed(2)} (1 run)`;
  return t.measurable ? `x${t.speedup.toFixed(2)}` : `x${t.speedup.toFixed(2)} (within spread)`;
}

/** Markdown rows, text left and numbers right as the native table aligns them. */
export function markdownTable(head, rows, numericFrom) {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => `| ${cells.map((c, i) => (i >= numericFrom
    ? String(c).padStart(widths[i]) : String(c).padEnd(widths[i]))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i >= numericFrom ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`;
  return [line(head), rule, ...rows.map(line)].join('\n');
}

/** The bench table of one report. */
export function benchTable(report) {
  const tg = report.tests.find((t) => t.test.startsWith('tg'))?.test ?? 'tg';
  const model = report.model_name ?? report.model;
  const rows = report.tests.map((t) => [model, report.dtype, t.test, meanSd(t), vsTg(t)]);
  return markdownTable(['model', 'dtype', 'test', 't/s', `vs ${tg}`], rows, 3);
}

/**
 * Several reports side by side (`columns`: [name, report] pairs, the first the baseline):
 * every test's mean t/s, and each later column's ratio to the first.
 */
export function sideBySide(columns) {
  const present = columns.filter(([, r]) => r?.tests);
  if (present.length === 0) return '(no bench report to compare)';
  const tests = [...new Set(present.flatMap(([, r]) => r.tests.map((t) => t.test)))];
  const [, base] = present[0];
  const head = ['test', ...present.map(([name], i) => (i === 0 ? `${name} t/s` : `${name} t/s (x base)`))];
  const rows = tests.map((test) => [test, ...present.map(([, r], i) => {
    const t = r.tests.find((x) => x.test === test);
    if (!t) return '-';
    const b = base.tests.find((x) => x.test === test);
    return i === 0 || !b ? meanSd(t) : `${meanSd(t)} (x${(mean(t) / mean(b)).toFixed(2)})`;
  })]);
  return markdownTable(head, rows, 1);
}
