//! How a load's errors name the part of the source they came from: the caller's
//! [`super::LoadHooks::place`] (the CLI names files by path), else the library's own names
//! (the browser's: files by role).

use super::source::{PlaceFn, Step};
use crate::error::Error;

/// Names errors by [`Step`]: the caller's names when it gave them, else the library's.
pub(super) struct Names<'h, 'a> {
    caller: Option<&'h PlaceFn<'a>>,
    own: fn(Step) -> Option<&'static str>,
}

impl Names<'_, '_> {
    /// `place`: the caller's [`LoadHooks::place`]; `own`: the library's names.
    pub(super) fn new<'h, 'a>(
        place: &'h Option<Box<PlaceFn<'a>>>,
        own: fn(Step) -> Option<&'static str>,
    ) -> Names<'h, 'a> {
        Names {
            caller: place.as_deref(),
            own,
        }
    }

    /// `step`'s errors, said to come from where the caller (or the library) names it.
    pub(super) fn at(&self, step: Step) -> impl Fn(Error) -> Error + '_ {
        move |e| {
            let place = match self.caller {
                Some(name) => name(step),
                None => (self.own)(step).map(str::to_string),
            };
            match place {
                Some(place) => e.within(place),
                None => e,
            }
        }
    }
}

/// The browser's names: the files of a checkpoint by role.
pub(super) fn checkpoint_names(step: Step) -> Option<&'static str> {
    match step {
        Step::Config => Some("config.json"),
        Step::Tokenizer => Some("tokenizer.json"),
        _ => None,
    }
}

pub(super) fn gguf_names(step: Step) -> Option<&'static str> {
    match step {
        Step::Open => Some("GGUF"),
        Step::Metadata => Some("GGUF metadata"),
        Step::Config => Some("the config the GGUF metadata describes"),
        Step::TokenizerMetadata => Some("the GGUF tokenizer metadata"),
        Step::Tokenizer => Some("tokenizer.json"),
        _ => None,
    }
}

pub(super) fn artifact_names(step: Step) -> Option<&'static str> {
    match step {
        Step::Open => Some("artifact"),
        Step::Tokenizer => Some("the artifact's text files: tokenizer.json"),
        _ => None,
    }
}

pub(super) fn no_names(_: Step) -> Option<&'static str> {
    None
}

pub(super) fn assistant_checkpoint_names(step: Step) -> Option<&'static str> {
    match step {
        Step::Config => Some("assistant config.json"),
        Step::Weights => Some("loading the assistant"),
        _ => None,
    }
}

pub(super) fn assistant_gguf_names(step: Step) -> Option<&'static str> {
    match step {
        Step::Open => Some("assistant GGUF"),
        Step::Metadata => Some("assistant GGUF metadata"),
        Step::Config => Some("the assistant config the GGUF metadata describes"),
        Step::Weights => Some("loading the assistant"),
        _ => None,
    }
}

pub(super) fn assistant_artifact_names(step: Step) -> Option<&'static str> {
    match step {
        Step::Weights => Some("loading the artifact's assistant"),
        _ => None,
    }
}
