// The engine's Web Worker: the wasm package, WebGPU and every load and generation run here,
// so the page's main thread stays free (no frozen page while a model loads or generates).
// The page talks to it through app.js's WorkerSession, which mirrors the wasm Session API.
//
// Messages in:  { id, op, args }   op: create | a Session method name | abort
// Messages out: { id, ok: value } | { id, error: { name, message } } | { id, token: TokenEvent }
import init, { Session } from './pkg/wgemma_web.js';

let session = null;

const METHODS = new Set([
  'loadModel', 'loadModelFromUrls', 'loadArtifact', 'loadArtifactFromUrl', 'loadGguf',
  'loadGgufFromUrl', 'loadDemo',
  'loadAssistant', 'loadAssistantFromUrls', 'loadAssistantGguf', 'loadAssistantGgufFromUrl',
  'modelInfo',
]);

/** Errors cross to the page as plain data: an Error's `name` (WgemmaBusy, ...) is kept. */
function errorData(e) {
  return { name: e?.name ?? 'Error', message: e?.message ?? String(e) };
}

async function handle({ id, op, args }) {
  if (op === 'create') {
    await init();
    session = await Session.create();
    return session.info();
  }
  if (!session) throw Object.assign(new Error('no WebGPU session (create failed)'), { name: 'WgemmaError' });
  if (op === 'generate') {
    // Every committed token goes to the page as it comes.
    return session.generate(args[0], (token) => { postMessage({ id, token }); });
  }
  if (METHODS.has(op)) return session[op](...args);
  throw new Error(`unknown worker operation ${op}`);
}

onmessage = (event) => {
  const message = event.data;
  // abort() must reach the running generation: it is handled at once, never queued behind it
  // (the generation yields to this event loop while it waits for the GPU).
  if (message.op === 'abort') {
    session?.abort();
    return;
  }
  handle(message).then(
    (ok) => postMessage({ id: message.id, ok }),
    (e) => postMessage({ id: message.id, error: errorData(e) }),
  );
};
