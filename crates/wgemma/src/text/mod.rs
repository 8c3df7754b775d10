//! Text around the model: the [`tokenizer`] and its chat [`markers`], [`chat`] templates, [`stop`] strings, and
//! [`tools`] (Gemma 4's tool declarations, calls and responses; [`tool_markers`], the
//! markers of their syntax; [`tool_grammar`], the grammar of a forced call; [`tool_json`],
//! a call's arguments as JSON text while they are written).

pub mod chat;
pub mod markers;
pub mod stop;
pub mod tokenizer;
pub mod tool_grammar;
pub mod tool_json;
pub mod tool_markers;
pub mod tools;
