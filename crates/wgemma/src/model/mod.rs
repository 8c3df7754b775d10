//! The Gemma 4 text decoder (HF `modeling_gemma4.py`).

pub mod assistant;
mod blocks;
pub mod checkpoint;
pub mod config;
mod decode;
pub mod forward;
mod geglu_stage;
pub mod generate;
pub mod linear_weight;
pub mod prepared;
mod residual;
pub mod sampling;
pub mod source;
pub mod speculative;
pub mod synthetic;
pub mod target;
pub mod tokenizer;
pub mod upload;
pub mod weights;

pub use config::{
    parse_config, KvSource, LayerKind, LayerSpec, ModelSpec, SizeEstimate, SizeLimits, TextConfig,
};
