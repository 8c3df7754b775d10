//! Generation over a loaded model: [`plain`] (one token per forward), [`speculative`]
//! (the MTP assistant drafts, the target verifies) and [`sampling`].

pub mod plain;
pub mod sampling;
pub mod speculative;
