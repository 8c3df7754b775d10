// The demo page: opens WebGPU through the wasm package, loads the built-in demo model (or
// the checkpoint named by ?model=DIR&assistant=DIR, the artifact named by ?artifact=URL,
// or files the user picks), streams
// generated tokens into the page and shows the stats. Tests read window.wgemmaPage and
// document.body.dataset.state (starting | loading | ready | generating | error).
import init, { Session } from './pkg/wgemma_web.js';

const $ = (id) => document.getElementById(id);
/** `wgemma demo`'s prompt (token ids of the demo model's 4096-token vocabulary). */
const DEMO_PROMPT = [2, 818, 5, 1207, 3301, 77, 2900, 1024];

const page = { session: null, model: null, lastResult: null, results: [], error: null };
window.wgemmaPage = page;

function setState(state) {
  document.body.dataset.state = state;
  const busy = state === 'loading' || state === 'generating';
  $('generate').disabled = busy || !page.model;
  $('abort').disabled = state !== 'generating';
  for (const id of ['load-files', 'load-demo']) $(id).disabled = busy || !page.session;
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

function showModel(model) {
  page.model = model;
  $('model').textContent = `${model.description}; ${mib(model.weightBytes)} of weights on the GPU, ` +
    `loaded in ${model.loadMs.toFixed(0)} ms${model.hasAssistant ? '; assistant loaded' : ''}`;
  $('speculative').disabled = !model.hasAssistant;
  if (!model.hasAssistant) $('speculative').checked = false;
  $('chat').disabled = !model.hasTokenizer;
  if (model.hasTokenizer) {
    $('prompt').value = 'Why is the sky blue?';
    $('prompt-help').textContent = 'Prompt text.';
  } else {
    $('prompt').value = DEMO_PROMPT.join(', ');
    $('prompt-help').textContent =
      'This model has no tokenizer: the prompt is comma-separated token ids, the output shows ids.';
  }
}

/** Runs one load; errors go to the page. */
async function load(what, run) {
  clearError();
  setState('loading');
  $('model').textContent = `Loading ${what}…`;
  try {
    showModel(await run());
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

async function loadFiles() {
  const artifact = $('artifact-file').files[0];
  if (artifact) {
    await load(artifact.name, () => page.session.loadArtifact(artifact));
    return;
  }
  const modelFiles = $('model-files').files;
  const assistantFiles = $('assistant-files').files;
  await load('the chosen checkpoint', async () => {
    let model = await page.session.loadModel(checkpointFiles(modelFiles, 'checkpoint'),
      { dtype: $('dtype').value });
    if (assistantFiles.length > 0) {
      const { config, weights } = checkpointFiles(assistantFiles, 'assistant');
      model = await page.session.loadAssistant({ config, weights });
    }
    return model;
  });
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

async function main() {
  setState('starting');
  $('generate').addEventListener('click', generate);
  $('abort').addEventListener('click', () => page.session?.abort());
  $('load-demo').addEventListener('click', () => load('the demo model', () => page.session.loadDemo()));
  $('load-files').addEventListener('click', loadFiles);
  try {
    await init();
    page.session = await Session.create();
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
  } else if (params.get('model')) await load(params.get('model'), () => loadFromParams(params));
  else await load('the demo model', () => page.session.loadDemo());
}

main();
