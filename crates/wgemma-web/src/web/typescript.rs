//! The TypeScript types of the JS API (emitted into the package's `.d.ts`).

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &str = r#"
/** Bytes of one file: text, bytes, a Blob/File, or a fetch Response. */
export type FileSource = string | Uint8Array | ArrayBuffer | Blob | Response;
/** A Hugging Face checkpoint: config.json, the safetensors shard(s), optionally tokenizer.json and generation_config.json. */
export interface ModelFiles {
  config: FileSource;
  weights: FileSource | FileSource[];
  tokenizer?: FileSource;
  generationConfig?: FileSource;
  /** tokenizer_config.json (its chat_template and special tokens). */
  tokenizerConfig?: FileSource;
  /** chat_template.jinja. */
  chatTemplate?: FileSource;
}
/** The same files as URLs (fetched by the library). */
export interface ModelUrls {
  config: string;
  weights: string | string[];
  tokenizer?: string;
  generationConfig?: string;
  tokenizerConfig?: string;
  chatTemplate?: string;
}
/** A gemma4_assistant checkpoint (its weights take the target's dtype). */
export interface AssistantFiles { config: FileSource; weights: FileSource | FileSource[]; }
export interface AssistantUrls { config: string; weights: string | string[]; }
export interface LoadOptions {
  /** "auto" (default: a checkpoint in q4, a GGUF file at its own types), "q4" (group 32),
   * "q4g64", "q4g128", "f16" or "f32". */
  dtype?: string;
  /** KV cache positions (prompt + generated tokens); default 4096. */
  context?: number;
  /** Rows per prefill forward; default 64. */
  prefillChunk?: number;
  /** KV cache slots (conversations held at once); default 1. */
  sequences?: number;
  /** Load a checkpoint holding decoder tensors its config does not describe (ignored)
   * instead of refusing it; default false. */
  allowExtraTensors?: boolean;
}
export interface ArtifactOptions {
  /** KV cache positions; default 4096. */
  context?: number;
  prefillChunk?: number;
  /** Check every tensor's checksum while loading (default true). */
  verify?: boolean;
}
export interface DemoOptions { seed?: number; dtype?: string; context?: number; }
export interface GenerateRequest {
  /** Prompt text (needs a tokenizer); or give promptIds. */
  prompt?: string;
  promptIds?: number[];
  /** A conversation ({role, content}), rendered with the checkpoint's chat template (Gemma 4's turn format when it has none); instead of prompt. */
  messages?: { role: string; content: string }[];
  /** Wrap the text prompt in the chat template as one user turn. */
  chat?: boolean;
  /** Default 128. */
  maxNewTokens?: number;
  /** 0 (default) = greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
  /** Divides the logits of the last 64 generated tokens before sampling (1 = none, the
   *  default); greedy and speculative decoding ignore it. */
  repeatPenalty?: number;
  /** MTP speculative decoding with the loaded assistant. */
  speculative?: boolean;
  /** Drafts per round, 1..=8 (default 2). */
  draftTokens?: number;
  /** Adaptive drafts per round (default true): k in 0..=8 from the measured acceptance and
   *  round costs, plain decode steps when drafting does not pay. */
  adaptiveDraft?: boolean;
  /** Text that ends the generation (cut before it). */
  stop?: string[];
  /** Keep every speculative round's drafts (GenerateResult.draftRounds). */
  traceDrafts?: boolean;
}
/** One generated token, as it is committed. */
export interface TokenEvent {
  index: number;
  id: number;
  /** Newly printable text; null without a tokenizer or inside a multi-byte character. */
  text: string | null;
}
export interface Stats {
  loadMs: number;
  promptTokens: number;
  generatedTokens: number;
  ttftMs: number;
  prefillTokensPerS: number;
  decodeTokensPerS: number;
  speculative: boolean;
  rounds?: number;
  drafted?: number;
  accepted?: number;
  acceptanceRate?: number;
  tokensPerRound?: number;
}
export interface GenerateResult {
  promptIds: number[];
  tokens: number[];
  text: string | null;
  /** Stopped by abort() or by the callback returning false. */
  stoppedEarly: boolean;
  /** "stop" (a stop token or string), "length" (the budget) or "cancelled". */
  finishReason: string;
  stats: Stats;
  draftRounds?: { committed: number; drafts: number[]; accepted: number }[];
}
export interface ModelInfo {
  description: string;
  layers: number;
  hiddenSize: number;
  vocabSize: number;
  dtype: string;
  hasTokenizer: boolean;
  /** The checkpoint's own chat template is used (else Gemma 4's built-in turn format). */
  hasChatTemplate: boolean;
  hasAssistant: boolean;
  weightBytes: number;
  loadMs: number;
  /** KV cache positions. */
  context: number;
}
export interface DeviceInfo {
  adapter: string;
  backend: string;
  fallbackAdapter: boolean;
  features: string[];
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  maxComputeWorkgroupsPerDimension: number;
  maxComputeInvocationsPerWorkgroup: number;
  maxComputeWorkgroupStorageSize: number;
}
"#;
