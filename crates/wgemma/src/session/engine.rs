//! What a driver needs from below the session, in one place: the model, generation loops,
//! sampling, tokenizer and tool-call parsing that the CLI's benches, demo and server reach
//! past [`super::Session`]. A caller names `session` (and `formats`, `weights`, `gpu` for
//! what it reads from disk and runs on) instead of every layer.

pub use crate::generate::plain::{generate, GenerateOptions, GenerateStats};
pub use crate::generate::sampling::{LogitAdjust, SamplingParams, REPETITION_PENALTY_RANGE};
pub use crate::generate::speculative::{
    generate_speculative, generate_speculative_replacing_drafts, DraftSchedule, Phase, PhaseSpan,
    ReplacedDrafts, SpeculativeOptions, SpeculativeOutput, SpeculativeStats, MAX_DRAFT_TOKENS,
};
pub use crate::model::assistant::Assistant;
pub use crate::model::forward::LogitRows;
pub use crate::model::state::KvState;
pub use crate::model::target::{Model, ModelOptions, Want};
pub use crate::model::weights::WeightFormat;
pub use crate::model::{PlanOptions, DEFAULT_NORM_PROLOGUE_ROWS};
pub use crate::ops::attention::MAX_SEQUENCES;
pub use crate::text::tokenizer::{parse_prompt_ids, Tokenizer};
pub use crate::text::tool_grammar::{tool_call_grammar, tool_calls_or_answer_grammar};
pub use crate::text::tool_json::{partial_call, PartialCall};
pub use crate::text::tool_markers::TOOL_RESPONSE_START;
pub use crate::text::tools::{parse_cut_reply, parse_reply, ReplyPiece, ToolCallParser};

/// The op cases and the harness that checks them against their CPU references and times
/// them (`wgemma ops`, the bench's read-bandwidth case); with the `harness` feature only.
#[cfg(feature = "harness")]
pub mod op_checks {
    // Timing blocks on the GPU (native only, as the harness itself).
    #[cfg(not(target_arch = "wasm32"))]
    pub use crate::harness::perf;
    pub use crate::harness::{check, rng};
    pub use crate::ops::attention::prefill_check_cases;
    pub use crate::ops::linear::{int8_check_cases, prefill_cases, DeviceCaps};
    pub use crate::ops::read_bandwidth::ReadBandwidthCase;
    pub use crate::ops::{bench_cases, random_cases};
}
