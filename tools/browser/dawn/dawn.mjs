// Dawn (Chrome's WebGPU, the npm package `webgpu`: "dawn.node") under Node, set up the way
// the wasm package's glue expects a browser: `navigator.gpu`, the GPU* classes and
// constants (GPUBufferUsage, ...) as globals, and a `WorkerGlobalScope` global, which is
// how wgpu's WebGPU backend recognises a worker and reads `navigator.gpu` from it.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** Where the `webgpu` package is: a staged folder (index.js + dist/) or tools/browser/node_modules. */
export function dawnPackageDir(given) {
  const here = new URL('.', import.meta.url).pathname;
  const candidates = given ? [resolve(given)] : [join(here, '..', 'node_modules', 'webgpu')];
  const dir = candidates.find((d) => existsSync(join(d, 'index.js')));
  if (!dir) {
    throw new Error(`the npm package \`webgpu\` (dawn.node): expected index.js in ${candidates.join(' or ')}, `
      + 'found none (run `npm ci` in tools/browser, or pass --dawn DIR)');
  }
  return dir;
}

/**
 * Loads dawn.node and installs it as the page's WebGPU. `toggles`: Dawn's create() options
 * (e.g. `enable-dawn-features=disable_robustness`). Returns the GPU object.
 */
export async function installDawn(dir, toggles = []) {
  const { create, globals } = await import(pathToFileURL(join(dir, 'index.js')).href);
  Object.assign(globalThis, globals);
  const gpu = create(toggles);
  if (globalThis.navigator === undefined) {
    globalThis.navigator = { gpu };
  } else {
    // Node 21+ has a navigator of its own (no gpu).
    Object.defineProperty(globalThis.navigator, 'gpu', { value: gpu, configurable: true });
  }
  if (globalThis.Window === undefined && globalThis.WorkerGlobalScope === undefined) {
    globalThis.WorkerGlobalScope = class WorkerGlobalScope {};
  }
  return gpu;
}

/** Drops the GPU object: dawn.node keeps Node alive while it is referenced. */
export function uninstallDawn() {
  if (globalThis.navigator) delete globalThis.navigator.gpu;
}

const LIMITS = [
  'maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX', 'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage', 'maxUniformBufferBindingSize', 'maxBindGroups',
  'minStorageBufferOffsetAlignment', 'maxSubgroupSize', 'minSubgroupSize',
];

/**
 * What Dawn offers here (as check.mjs printed it): adapter, features, WGSL language
 * features (packed_4x8_integer_dot_product ...) and limits; null when it offers no adapter.
 */
export async function describeAdapter(gpu) {
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) return null;
  const info = adapter.info ?? {};
  const limits = {};
  for (const name of LIMITS) if (adapter.limits[name] !== undefined) limits[name] = adapter.limits[name];
  return {
    vendor: info.vendor, architecture: info.architecture, device: info.device, description: info.description,
    isFallbackAdapter: info.isFallbackAdapter ?? adapter.isFallbackAdapter ?? false,
    features: [...adapter.features].sort(),
    wgslLanguageFeatures: [...(gpu.wgslLanguageFeatures ?? [])].sort(),
    limits,
  };
}

export const NO_ADAPTER = 'no adapter: Dawn (dawn.node) offered no WebGPU adapter on this machine '
  + '(it refuses software Vulkan drivers without shaderUniformArrayDynamicIndexing, e.g. Mesa 22 lavapipe; '
  + 'it needs a GPU with a Vulkan driver, or VK_DRIVER_FILES pointing at one)';
