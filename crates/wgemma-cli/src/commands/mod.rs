//! One module per `wgemma` command: its flags and its `run`.

pub mod bench;
pub mod chat;
pub mod convert;
pub mod demo;
pub mod generate;
pub mod info;
pub mod inspect;
pub mod load;
pub mod ops;
pub mod serve;
pub mod synth;
