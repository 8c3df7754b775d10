// The demo page: starts the engine in a Web Worker (worker.js: the wasm package and WebGPU
// run there, so loading and generating never freeze the page), loads the trained pair shipped
// in models/ (or the checkpoint named by ?model=DIR&assistant=DIR, the artifact named by
// ?artifact=URL, the GGUF file named by ?gguf=URL[&assistant=URL.gguf], the synthetic model with
// ?demo=synthetic, or files the user picks), streams
// generated text into the page and shows the stats. Tests read window.wgemmaPage and
// document.body.dataset.state (starting | loading | ready | generating | error).

const $ = (id) => document.getElementById(id);
/** The trained pair shipped in the repository (models/README.md), beside web/. */
const SHIPPED_PAIR = new URL('../models/kjv-pair.wgemma', location.href).href;
/** `wgemma demo`'s prompt for it. */
const PAIR_PROMPT = 'And Jesus said unto them,';
/** `wgemma demo --synthetic`'s prompt (token ids of the synthetic model's 4096-token vocabulary). */
const SYNTHETIC_PROMPT = [2, 818, 5, 1207, 3301, 77, 2900, 1024];

/** The wasm Session's API, run in the worker: every method returns a Promise; generate's
 * onToken sees each token as the worker posts it (returning false stops the generation);
 * errors keep their names (WebGpuUnavailable, WgemmaBusy, WgemmaError). abort() is
 * asynchronous: the generation stops at the first step after the worker receives it. */
class WorkerSession {
  constructor(worker) {
    this.worker = worker;
    this.next = 0;
    this.calls = new Map();
    this.running = 0;
    worker.onmessage = (event) => this.receive(event.data);
    worker.onerror = (event) => {
      const e = Object.assign(new Error(`the engine's worker failed: ${event.message}`), { name: 'WgemmaError' });
      for (const call of this.calls.values()) call.reject(e);
      this.calls.clear();
    };
  }

  static async create() {
    // The worker would see the same: say it here, as the wasm Session words it.
    if (!navigator.gpu) {
      const hint = isSecureContext
        ? 'use a browser with WebGPU (Chrome/Edge 113+, Safari 26+, Firefox 141+)'
        : 'WebGPU needs a secure context: serve the page over https or from localhost';
      throw Object.assign(new Error(`WebGPU is unavailable: navigator.gpu is undefined in this browser; ${hint}`),
        { name: 'WebGpuUnavailable' });
    }
    const session = new WorkerSession(new Worker(new URL('worker.js', import.meta.url), { type: 'module' }));
    session.device = await session.call('create', []);
    return session;
  }

  receive({ id, ok, error, token }) {
    const call = this.calls.get(id);
    if (!call) return;
    if (token !== undefined) {
      if (call.onToken?.(token) === false) this.abort();
      return;
    }
    this.calls.delete(id);
    if (call.counts) this.running -= 1;
    if (error) call.reject(Object.assign(new Error(error.message), { name: error.name }));
    else call.resolve(ok);
  }

  call(op, args, onToken = null) {
    const id = this.next++;
    const counts = op !== 'create' && op !== 'modelInfo';
    if (counts) this.running += 1;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject, onToken, counts });
      this.worker.postMessage({ id, op, args });
    });
  }

  info() { return this.device; }
  /** True while a load or generation runs. */
  get busy() { return this.running > 0; }
  abort() { this.worker.postMessage({ op: 'abort' }); }
  modelInfo() { return this.call('modelInfo', []); }
  loadModel(files, options) { return this.call('loadModel', [files, options]); }
  loadModelFromUrls(urls, options) { return this.call('loadModelFromUrls', [absoluteUrls(urls), options]); }
  loadArtifact(file, options) { return this.call('loadArtifact', [file, options]); }
  loadArtifactFromUrl(url, options) { return this.call('loadArtifactFromUrl', [absolute(url), options]); }
  loadGguf(file, options) { return this.call('loadGguf', [file, options]); }
  loadGgufFromUrl(url, options) { return this.call('loadGgufFromUrl', [absolute(url), options]); }
  loadDemo(options) { return this.call('loadDemo', [options]); }
  loadAssistant(files) { return this.call('loadAssistant', [files]); }
  loadAssistantFromUrls(urls) { return this.call('loadAssistantFromUrls', [absoluteUrls(urls)]); }
  loadAssistantGguf(file) { return this.call('loadAssistantGguf', [file]); }
  loadAssistantGgufFromUrl(url) { return this.call('loadAssistantGgufFromUrl', [absolute(url)]); }
  generate(request, onToken) { return this.call('generate', [request], onToken); }
}

/** The worker resolves URLs against its own script: send it absolute ones. */
const absolute = (url) => new URL(url, location.href).href;
function absoluteUrls(urls) {
  const out = {};
  for (const [k, v] of Object.entries(urls)) out[k] = Array.isArray(v) ? v.map(absolute) : absolute(v);
  return out;
}

const page = {
  session: null, model: null, lastResult: null, results: [], error: null,
  // The main thread's heartbeat: a 20 ms timer; the longest wait between its ticks while a
  // model loads and while one generates (the page must stay responsive).
  ticks: 0, maxTickGapMs: { loading: 0, generating: 0 },
  // The last plain run's decode rate per model, for the speculative run's speedup.
  plainRate: null,
};
window.wgemmaPage = page;

function heartbeat() {
  let last = performance.now();
  setInterval(() => {
    const now = performance.now();
    const state = document.body.dataset.state;
    if (state in page.maxTickGapMs) page.maxTickGapMs[state] = Math.max(page.maxTickGapMs[state], now - last);
    page.ticks += 1;
    last = now;
  }, 20);
}

function setState(state) {
  document.body.dataset.state = state;
  const busy = state === 'loading' || state === 'generating';
  $('generate').disabled = busy || !page.model;
  $('abort').disabled = state !== 'generating';
  for (const id of ['load-files', 'load-pair', 'load-synthetic']) $(id).disabled = busy || !page.session;
}

function showError(e) {
  page.error = { name: e?.name ?? 'Error', message: e?.message ?? String(e) };
  const box = $('error');
  box.textContent = `${page.error.name}: ${page.error.message}`;
  box.dataset.name = page.error.name;
  box.classList.add('shown');
}

function clearError() {
  page.error = null;
  $('error').classList.remove('shown');
}

const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

/** `textPrompt`: the prompt box's text for a model with a tokenizer. */
function showModel(model, textPrompt) {
  page.model = model;
  page.plainRate = null;
  $('model').textContent = `${model.description}; ${mib(model.weightBytes)} of weights on the GPU, ` +
    `loaded in ${model.loadMs.toFixed(0)} ms${model.hasAssistant ? '; assistant loaded' : ''}`;
  $('speculative').disabled = !model.hasAssistant;
  if (!model.hasAssistant) $('speculative').checked = false;
  $('chat').disabled = !model.hasTokenizer;
  if (model.hasTokenizer) {
    $('prompt').value = textPrompt ?? 'Why is the sky blue?';
    $('prompt-help').textContent = 'Prompt text.';
  } else {
    $('prompt').value = SYNTHETIC_PROMPT.join(', ');
    $('prompt-help').textContent =
      'This model has no tokenizer: the prompt is comma-separated token ids, the output shows ids.';
  }
}

/** Runs one load; errors go to the page. */
async function load(what, run, textPrompt = null) {
  clearError();
  setState('loading');
  $('model').textContent = `Loading ${what}…`;
  try {
    showModel(await run(), textPrompt);
    setState('ready');
  } catch (e) {
    $('model').textContent = `Loading ${what} failed.`;
    showError(e);
    setState('error');
  }
}

/** Whether a URL exists (optional checkpoint files). */
async function exists(url) {
  const r = await fetch(url, { method: 'HEAD' });
  return r.ok;
}

/** ?model=DIR[&weights=a.safetensors,b.safetensors][&assistant=DIR][&dtype=q4] */
async function loadFromParams(params) {
  const dir = params.get('model').replace(/\/$/, '');
  const weights = (params.get('weights') ?? 'model.safetensors').split(',');
  const urls = { config: `${dir}/config.json`, weights: weights.map((w) => `${dir}/${w}`) };
  if (await exists(`${dir}/tokenizer.json`)) urls.tokenizer = `${dir}/tokenizer.json`;
  if (await exists(`${dir}/generation_config.json`)) {
    urls.generationConfig = `${dir}/generation_config.json`;
  }
  const options = { dtype: params.get('dtype') ?? $('dtype').value };
  let model = await page.session.loadModelFromUrls(urls, options);
  const assistant = params.get('assistant')?.replace(/\/$/, '');
  if (assistant) {
    model = await page.session.loadAssistantFromUrls({
      config: `${assistant}/config.json`,
      weights: [`${assistant}/model.safetensors`],
    });
  }
  return model;
}

/** Sorts picked files into a checkpoint: config.json, shards, tokenizer, generation config. */
function checkpointFiles(fileList, what) {
  const files = [...fileList];
  const named = (name) => files.find((f) => f.name === name);
  const config = named('config.json');
  const weights = files.filter((f) => f.name.endsWith('.safetensors'))
    .sort((a, b) => a.name.localeCompare(b.name));
  if (!config || weights.length === 0) {
    throw new Error(`${what}: choose config.json and the *.safetensors file(s) together`);
  }
  const out = { config, weights };
  if (named('tokenizer.json')) out.tokenizer = named('tokenizer.json');
  if (named('generation_config.json')) out.generationConfig = named('generation_config.json');
  return out;
}

const isGguf = (file) => file.name.toLowerCase().endsWith('.gguf');

/** The assistant picked beside a target: one gemma4-assistant .gguf file, or a checkpoint's
 * files; the model info as it stands when none is picked. */
async function loadPickedAssistant(model) {
  const files = [...$('assistant-files').files];
  if (files.length === 0) return model;
  const gguf = files.filter(isGguf);
  if (gguf.length > 0) {
    if (files.length > 1) {
      throw new Error(`assistant: expected one .gguf file or a checkpoint's files, found ${files.length} files with a .gguf among them`);
    }
    return page.session.loadAssistantGguf(gguf[0]);
  }
  const { config, weights } = checkpointFiles(files, 'assistant');
  return page.session.loadAssistant({ config, weights });
}

async function loadFiles() {
  const artifact = $('artifact-file').files[0];
  if (artifact && isGguf(artifact)) {
    // A llama.cpp GGUF file: at its own types with dtype auto, else converted to the chosen
    // dtype (Q4_0 as it is), with its assistant (a gemma4-assistant .gguf, or a
    // checkpoint's files) when one is picked.
    await load(artifact.name, async () => loadPickedAssistant(
      await page.session.loadGguf(artifact, { dtype: $('dtype').value })));
    return;
  }
  if (artifact) {
    await load(artifact.name, () => page.session.loadArtifact(artifact));
    return;
  }
  const modelFiles = $('model-files').files;
  await load('the chosen checkpoint', async () => loadPickedAssistant(
    await page.session.loadModel(checkpointFiles(modelFiles, 'checkpoint'), { dtype: $('dtype').value })));
}

function parsePrompt() {
  const text = $('prompt').value;
  if (page.model.hasTokenizer) return { prompt: text, chat: $('chat').checked };
  const ids = text.split(/[\s,]+/).filter((t) => t !== '').map(Number);
  if (ids.length === 0 || ids.some((t) => !Number.isInteger(t) || t < 0)) {
    throw new Error(`expected comma-separated token ids, found "${text}"`);
  }
  return { promptIds: ids };
}

function showStats(rows) {
  const body = $('stats').tBodies[0];
  body.replaceChildren(...rows.map(([k, v]) => {
    const tr = document.createElement('tr');
    for (const text of [k, v]) tr.appendChild(document.createElement('td')).textContent = text;
    return tr;
  }));
}

function finalStats(s) {
  const rows = [
    ['load', `${s.loadMs.toFixed(0)} ms`],
    ['time to first token', `${s.ttftMs.toFixed(1)} ms`],
    ['prefill', `${s.promptTokens} tokens, ${s.prefillTokensPerS.toFixed(1)} tok/s`],
    ['decode', `${s.generatedTokens} tokens, ${s.decodeTokensPerS.toFixed(1)} tok/s`],
    ['mode', s.speculative ? 'speculative (MTP assistant)' : 'plain'],
  ];
  if (s.speculative) {
    rows.push(['acceptance', `${(s.acceptanceRate * 100).toFixed(1)}% (${s.accepted}/${s.drafted} drafts)`]);
    rows.push(['rounds', `${s.rounds}, ${s.tokensPerRound.toFixed(2)} tokens/round`]);
    rows.push(['speedup', page.plainRate
      ? `x${(s.decodeTokensPerS / page.plainRate).toFixed(2)} decode tok/s over the last plain run`
      : 'run once without speculative decoding to compare']);
  } else {
    page.plainRate = s.decodeTokensPerS;
  }
  return rows;
}

async function generate() {
  clearError();
  let request;
  try {
    request = {
      ...parsePrompt(),
      maxNewTokens: Number($('max-new').value),
      speculative: $('speculative').checked,
      draftTokens: Number($('draft-tokens').value),
    };
  } catch (e) {
    showError(e);
    return;
  }
  const out = $('output');
  out.textContent = '';
  setState('generating');
  const start = performance.now();
  let count = 0;
  const onToken = (t) => {
    count += 1;
    out.textContent += page.model.hasTokenizer ? (t.text ?? '') : `${count > 1 ? ' ' : ''}${t.id}`;
    const s = (performance.now() - start) / 1000;
    showStats([['generating', `${count} tokens in ${s.toFixed(2)} s (${(count / s).toFixed(1)} tok/s)`]]);
  };
  try {
    const result = await page.session.generate(request, onToken);
    page.lastResult = result;
    page.results.push(result);
    showStats(finalStats(result.stats));
    setState('ready');
  } catch (e) {
    showError(e);
    setState('ready');
  }
}

/** The shipped pair: target, MTP assistant and tokenizer in one artifact. */
function loadPair() {
  return load('the trained pair (models/kjv-pair.wgemma, 11 MB)',
    () => page.session.loadArtifactFromUrl(SHIPPED_PAIR), PAIR_PROMPT);
}

async function main() {
  setState('starting');
  $('generate').addEventListener('click', generate);
  $('abort').addEventListener('click', () => page.session?.abort());
  $('load-pair').addEventListener('click', loadPair);
  $('load-synthetic').addEventListener('click', () => load('the synthetic model', () => page.session.loadDemo()));
  $('load-files').addEventListener('click', loadFiles);
  heartbeat();
  try {
    page.session = await WorkerSession.create();
  } catch (e) {
    $('device').textContent = 'WebGPU unavailable: nothing can run on this page.';
    showError(e);
    setState('error');
    return;
  }
  const info = page.session.info();
  page.device = info;
  $('device').textContent = `${info.adapter}; storage bindings up to ` +
    `${mib(info.maxStorageBufferBindingSize)}, buffers up to ${mib(info.maxBufferSize)}; ` +
    `features: ${info.features.join(', ') || 'none'}`;
  const params = new URLSearchParams(location.search);
  if (params.get('artifact')) {
    await load(params.get('artifact'), () => page.session.loadArtifactFromUrl(params.get('artifact')));
  } else if (params.get('gguf')) {
    // ?gguf=URL[&assistant=URL of a gemma4-assistant .gguf][&dtype=auto]
    await load(params.get('gguf'), async () => {
      const model = await page.session.loadGgufFromUrl(params.get('gguf'),
        { dtype: params.get('dtype') ?? $('dtype').value });
      const assistant = params.get('assistant');
      return assistant ? page.session.loadAssistantGgufFromUrl(assistant) : model;
    });
  } else if (params.get('model')) await load(params.get('model'), () => loadFromParams(params));
  else if (params.get('demo') === 'synthetic') await load('the synthetic model', () => page.session.loadDemo());
  else await loadPair();
}

main();
