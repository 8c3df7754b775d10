//! The Gemma 4 text decoder (HF `modeling_gemma4.py`).

pub mod checkpoint;
pub mod config;
pub mod sampling;
pub mod tokenizer;

pub use config::{parse_config, KvSource, LayerKind, LayerSpec, ModelSpec, TextConfig};
