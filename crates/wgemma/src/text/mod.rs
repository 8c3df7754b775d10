//! Text around the model: the [`tokenizer`], [`chat`] templates and [`stop`] strings.

pub mod chat;
pub mod stop;
pub mod tokenizer;
