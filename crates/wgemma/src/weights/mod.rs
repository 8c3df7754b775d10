//! The one seam between weight formats and the model: a format implements
//! [`source::WeightSource`] (scoped tensor names) and hands over stored tensors
//! ([`raw::RawTensor`]: dtype, shape, bytes); [`raw`] converts them for the host and
//! [`upload`], the only uploader, puts them on the GPU in a [`layout::MatrixLayout`] as
//! [`linear::LinearWeight`]s, embedding tables and plain tensors. What is read is what the
//! model's blocks declare ([`declared`]). [`ggml`] holds the block formats a GGUF file
//! stores, which the uploader places like any other stored dtype.

pub mod conversion;
pub mod declared;
pub mod layout;
pub mod linear;
pub mod raw;
pub mod source;
pub mod upload;

/// ggml's block formats, defined with the op that runs them ([`crate::ops::ggml_linear::blocks`]).
pub use crate::ops::ggml_linear::blocks as ggml;
