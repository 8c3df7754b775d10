//! The Gemma 4 text decoder (HF `modeling_gemma4.py`).

pub mod assistant;
mod blocks;
pub mod config;
mod decode;
pub mod forward;
mod geglu_stage;
mod kv;
pub mod plan_options;
mod plan_parts;
mod planner;
mod residual;
pub mod state;
mod state_forward;
pub mod target;
pub mod weights;

pub use plan_options::{PlanOptions, DEFAULT_NORM_PROLOGUE_ROWS};

pub use config::{
    parse_config, KvSource, LayerKind, LayerSpec, ModelSpec, SizeEstimate, SizeLimits, TextConfig,
};
