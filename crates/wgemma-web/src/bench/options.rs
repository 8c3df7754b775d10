//! `runBench`'s options: the native `wgemma bench` flags in camelCase, their defaults (the
//! native ones) and their checks.

use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::generate::speculative::MAX_DRAFT_TOKENS;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::session::bench::suite::SuitePlan;

#[wasm_bindgen(typescript_custom_section)]
const TS_BENCH: &str = r#"
/** What runBench measures (the native `wgemma bench` flags, camelCase). */
export interface BenchOptions {
  /** A synthetic model of real shapes: tiny, e2b or e4b (random weights); else pass a model artifact. */
  synthetic?: string;
  /** Seed of the synthetic weights and of the prompt's token ids (default 0). */
  seed?: number;
  /** Weights of a synthetic model: q4 (default), q4g64, q4g128, f16, f32. */
  dtype?: string;
  /** Prompt tokens of ppN (default 512; 64 for tiny). */
  nPrompt?: number;
  /** Generated tokens of tgN and the speculative rows (default 128; 32 for tiny). */
  nGen?: number;
  /** Tokens in the KV cache when the decode tests start (default 0). */
  nDepth?: number;
  /** Timed runs per test after the warm-up (default 5; 3 for tiny). */
  repetitions?: number;
  /** Rows per prefill forward (default 256). */
  prefillChunk?: number;
  /** Drafts per round of the speculative rows (default 2; 0: none). */
  draftTokens?: number;
  /** Acceptance rates of the oracle and drafter rows (default [1.0]). */
  acceptance?: number[];
}
"#;

/// The CLI's default rows per prefill forward.
const DEFAULT_PREFILL_CHUNK: usize = 256;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(super) struct BenchOptions {
    synthetic: Option<String>,
    seed: u64,
    dtype: Option<String>,
    n_prompt: Option<usize>,
    n_gen: Option<usize>,
    n_depth: usize,
    repetitions: Option<usize>,
    prefill_chunk: Option<usize>,
    draft_tokens: Option<usize>,
    acceptance: Option<Vec<f64>>,
}

/// The options with every default filled in and checked.
pub(super) struct Plan {
    /// The synthetic shape as given (the report's `model`).
    pub(super) synthetic: Option<String>,
    pub(super) shape: Option<SyntheticShape>,
    pub(super) seed: u64,
    pub(super) dtype: String,
    pub(super) format: WeightFormat,
    pub(super) prompt_len: usize,
    pub(super) gen: usize,
    pub(super) depth: usize,
    pub(super) repetitions: usize,
    pub(super) prefill_chunk: usize,
    pub(super) k: usize,
    pub(super) acceptance: Vec<f64>,
}

impl BenchOptions {
    pub(super) fn plan(self) -> Result<Plan, String> {
        let shape = self
            .synthetic
            .as_deref()
            .map(SyntheticShape::parse)
            .transpose()
            .map_err(|e| e.to_string())?;
        let tiny = matches!(shape, Some(SyntheticShape::Tiny));
        let dtype = self.dtype.unwrap_or_else(|| "q4".to_string());
        let plan = Plan {
            synthetic: self.synthetic,
            shape,
            seed: self.seed,
            format: WeightFormat::parse(&dtype).map_err(|e| e.to_string())?,
            dtype,
            prompt_len: self.n_prompt.unwrap_or(if tiny { 64 } else { 512 }),
            gen: self.n_gen.unwrap_or(if tiny { 32 } else { 128 }),
            depth: self.n_depth,
            repetitions: self.repetitions.unwrap_or(if tiny { 3 } else { 5 }),
            prefill_chunk: self.prefill_chunk.unwrap_or(DEFAULT_PREFILL_CHUNK),
            k: self.draft_tokens.unwrap_or(2),
            acceptance: self.acceptance.unwrap_or_else(|| vec![1.0]),
        };
        let checks = [
            (
                plan.prompt_len == 0,
                "nPrompt: expected at least 1 token, found 0".into(),
            ),
            (
                plan.gen < 2,
                format!("nGen: expected at least 2 tokens, found {}", plan.gen),
            ),
            (
                plan.repetitions == 0,
                "repetitions: expected at least 1 timed run, found 0".into(),
            ),
            (
                plan.prefill_chunk == 0,
                "prefillChunk: expected at least 1 row, found 0".into(),
            ),
            (
                plan.k > MAX_DRAFT_TOKENS,
                format!(
                    "draftTokens: expected 0..={MAX_DRAFT_TOKENS}, found {}",
                    plan.k
                ),
            ),
        ];
        if let Some((_, message)) = checks.into_iter().find(|(bad, _)| *bad) {
            return Err(message);
        }
        if let Some(p) = plan.acceptance.iter().find(|p| !(0.0..=1.0).contains(*p)) {
            return Err(format!(
                "acceptance: expected rates within 0..=1, found {p}"
            ));
        }
        Ok(plan)
    }
}

impl Plan {
    /// What the library's suite runs (the adaptive schedule is the native bench's alone).
    pub(super) fn suite_plan(&self) -> SuitePlan {
        SuitePlan {
            prompt_len: self.prompt_len,
            gen: self.gen,
            depth: self.depth,
            repetitions: self.repetitions,
            seed: self.seed,
            k: self.k,
            acceptance: self.acceptance.clone(),
            adaptive: false,
            shape: self.shape,
        }
    }

    /// The KV cache, prefill chunk and verify rows the tests need (as the native bench).
    pub(super) fn model_options(&self) -> Result<ModelOptions, String> {
        let plan = self;
        let context_len = plan.depth.max(1);
        let max_context = context_len
            .checked_add(plan.gen)
            .and_then(|n| n.checked_add(MAX_DRAFT_TOKENS + 1))
            .map(|n| n.max(plan.prompt_len))
            .and_then(|n| n.checked_add(16))
            .ok_or_else(|| {
                format!(
                    "nPrompt {}, nDepth {} and nGen {}: expected a total that fits a KV cache",
                    plan.prompt_len, plan.depth, plan.gen
                )
            })?;
        Ok(ModelOptions {
            format: plan.format,
            max_context,
            prefill_chunk: plan
                .prefill_chunk
                .clamp(1, plan.prompt_len.max(context_len)),
            max_verify_rows: plan.k + 1,
            sequences: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(json: &str) -> Result<Plan, String> {
        serde_json::from_str::<BenchOptions>(json)
            .map_err(|e| e.to_string())?
            .plan()
    }

    #[test]
    fn defaults_are_the_native_bench_ones() {
        let p = plan(r#"{"synthetic": "e2b"}"#).unwrap();
        assert_eq!(
            (p.prompt_len, p.gen, p.depth, p.repetitions),
            (512, 128, 0, 5)
        );
        assert_eq!(
            (p.k, p.prefill_chunk, p.acceptance.clone()),
            (2, 256, vec![1.0])
        );
        let p = plan(r#"{"synthetic": "tiny", "nDepth": 3}"#).unwrap();
        assert_eq!(
            (p.prompt_len, p.gen, p.depth, p.repetitions),
            (64, 32, 3, 3)
        );
        let options = p.model_options().unwrap();
        // The decode context, the generated tokens, a verify round and a margin.
        assert_eq!(options.max_context, 64 + 16);
        assert_eq!((options.max_verify_rows, options.prefill_chunk), (3, 64));
    }

    #[test]
    fn bad_options_say_what_was_expected() {
        let cases = [
            (r#"{"synthetic": "e3b"}"#, "tiny, e2b, e4b or 31b"),
            (
                r#"{"synthetic": "tiny", "nGen": 1}"#,
                "nGen: expected at least 2 tokens, found 1",
            ),
            (
                r#"{"synthetic": "tiny", "nPrompt": 0}"#,
                "nPrompt: expected at least 1 token",
            ),
            (
                r#"{"synthetic": "tiny", "repetitions": 0}"#,
                "repetitions: expected at least 1",
            ),
            (
                r#"{"synthetic": "tiny", "draftTokens": 9}"#,
                "draftTokens: expected 0..=8, found 9",
            ),
            (
                r#"{"synthetic": "tiny", "acceptance": [1.5]}"#,
                "within 0..=1, found 1.5",
            ),
            (r#"{"synthetic": "tiny", "dtype": "q3"}"#, "q3"),
            (
                r#"{"synthetic": "tiny", "nPromt": 5}"#,
                "unknown field `nPromt`",
            ),
        ];
        for (json, want) in cases {
            let e = plan(json)
                .err()
                .unwrap_or_else(|| panic!("{json}: accepted"));
            assert!(e.contains(want), "{json}: {e}");
        }
    }
}
