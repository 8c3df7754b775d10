//! The one seam between weight formats and the model: a format implements
//! [`source::WeightSource`] (scoped tensor names), hands over matrices in a
//! [`layout::MatrixLayout`], and [`upload`] puts them on the GPU as [`linear::LinearWeight`]s,
//! embedding tables and plain tensors. What is read is what the model's blocks declare
//! ([`declared`]).

pub mod declared;
pub mod layout;
pub mod linear;
pub mod source;
pub mod upload;
