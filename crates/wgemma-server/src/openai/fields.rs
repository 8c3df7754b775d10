//! Which request fields `wgemma serve` takes: every field of OpenAI's chat and completions
//! request schemas (and the extensions it implements) is either used or refused with a 400
//! that names it; a field it does not know is refused too. Nothing is accepted and ignored.

use crate::error::{kind_of, ApiError};
use crate::openai::response::Endpoint;
use serde_json::Value;

/// How the server treats a request field of OpenAI's chat or completions schema.
#[derive(Clone, Copy)]
pub(crate) enum FieldUse {
    /// Read and acted on.
    Used,
    /// Refused with a 400 naming it, unless absent, null or a value for which `allowed`
    /// holds (the value that asks for nothing this server lacks); `why` says what is missing.
    Refused {
        why: &'static str,
        allowed: fn(&Value) -> bool,
    },
}

use FieldUse::{Refused, Used};

fn never(_: &Value) -> bool {
    false
}

/// The fields both endpoints take.
pub(crate) const SHARED_FIELDS: &[(&str, FieldUse)] = &[
    ("model", Used),
    ("max_tokens", Used),
    ("temperature", Used),
    ("top_p", Used),
    ("top_k", Used),
    ("min_p", Used),
    ("seed", Used),
    ("stop", Used),
    ("stream", Used),
    ("stream_options", Used),
    ("n", Used),
    ("frequency_penalty", Used),
    ("presence_penalty", Used),
    ("repetition_penalty", Used),
    ("logit_bias", Used),
    ("logprobs", Used),
    // Identifies the end user: written to the request's log line.
    ("user", Used),
    // llama.cpp's prompt-cache hint: taken (no prompt cache here, so no effect on the answer).
    ("cache_prompt", Used),
];

pub(crate) const CHAT_FIELDS: &[(&str, FieldUse)] = &[
    ("messages", Used),
    ("max_completion_tokens", Used),
    ("top_logprobs", Used),
    ("safety_identifier", Used),
    ("response_format", Used),
    ("tools", Used),
    ("tool_choice", Used),
    ("parallel_tool_calls", Used),
    // vLLM's and llama.cpp's: more variables for the chat template.
    ("chat_template_kwargs", Used),
    (
        "functions",
        Refused {
            why: "the deprecated function calling is not implemented",
            allowed: never,
        },
    ),
    (
        "function_call",
        Refused {
            why: "the deprecated function calling is not implemented",
            allowed: never,
        },
    ),
    (
        "audio",
        Refused {
            why: "this server answers in text only",
            allowed: never,
        },
    ),
    (
        "modalities",
        Refused {
            why: "this server answers in text only: [\"text\"]",
            allowed: |v| *v == serde_json::json!(["text"]),
        },
    ),
    (
        "prediction",
        Refused {
            why: "predicted outputs are not implemented",
            allowed: never,
        },
    ),
    (
        "reasoning_effort",
        Refused {
            why: "the model has no reasoning modes",
            allowed: never,
        },
    ),
    (
        "verbosity",
        Refused {
            why: "the model has no verbosity setting",
            allowed: never,
        },
    ),
    (
        "web_search_options",
        Refused {
            why: "this server does not search the web",
            allowed: never,
        },
    ),
    (
        "store",
        Refused {
            why: "completions are not stored; only false",
            allowed: |v| *v == Value::Bool(false),
        },
    ),
    (
        "metadata",
        Refused {
            why: "completions are not stored, so they carry no metadata",
            allowed: never,
        },
    ),
    (
        "service_tier",
        Refused {
            why: "there is one tier; only \"auto\" or \"default\"",
            allowed: |v| matches!(v.as_str(), Some("auto" | "default")),
        },
    ),
    (
        "prompt_cache_key",
        Refused {
            why: "this server keeps no prompt cache",
            allowed: never,
        },
    ),
    (
        "prompt_cache_retention",
        Refused {
            why: "this server keeps no prompt cache",
            allowed: never,
        },
    ),
    (
        "prompt_cache_options",
        Refused {
            why: "this server keeps no prompt cache",
            allowed: never,
        },
    ),
    (
        "moderation",
        Refused {
            why: "this server runs no moderation model",
            allowed: never,
        },
    ),
];

pub(crate) const COMPLETION_FIELDS: &[(&str, FieldUse)] = &[
    ("prompt", Used),
    (
        "best_of",
        Refused {
            why: "one candidate per request; only 1",
            allowed: |v| v.as_u64() == Some(1),
        },
    ),
    (
        "echo",
        Refused {
            why: "the prompt is not echoed; only false",
            allowed: |v| *v == Value::Bool(false),
        },
    ),
    (
        "suffix",
        Refused {
            why: "insertion (a suffix) is not implemented; only \"\"",
            allowed: |v| v.as_str() == Some(""),
        },
    ),
];

/// Refuses a field this server does not take (unknown, or known and refused), by name.
pub(crate) fn check_fields(
    body: &serde_json::Map<String, Value>,
    endpoint: Endpoint,
) -> Result<(), ApiError> {
    let own = match endpoint {
        Endpoint::Chat => CHAT_FIELDS,
        Endpoint::Completion => COMPLETION_FIELDS,
    };
    for (name, value) in body {
        let found = SHARED_FIELDS
            .iter()
            .chain(own)
            .find(|(n, _)| n == name)
            .map(|(_, u)| *u);
        match found {
            Some(Used) => {}
            Some(Refused { .. }) if value.is_null() => {}
            Some(Refused { allowed, .. }) if allowed(value) => {}
            Some(Refused { why, .. }) => {
                return Err(ApiError::invalid(
                    name,
                    format!(
                        "{name}: not supported by this server ({why}); found {}",
                        kind_of(value)
                    ),
                ))
            }
            None => {
                let mut known: Vec<&str> = SHARED_FIELDS
                    .iter()
                    .chain(own)
                    .filter(|(_, u)| matches!(u, Used))
                    .map(|(n, _)| *n)
                    .collect();
                known.sort_unstable();
                return Err(ApiError::invalid(
                    name,
                    format!(
                        "{name}: unknown field; this endpoint takes {}",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}
