//! The answers of `wgemma serve`'s completions: the response and stream-chunk JSON of chat
//! completions and completions (OpenAI's shapes), their `usage`, finish reasons, ids and
//! log-probabilities.

use serde_json::{json, Value};
use wgemma::session::FinishReason;

/// `system_fingerprint` of every answer: the build that made it.
pub const SYSTEM_FINGERPRINT: &str = concat!("wgemma-", env!("CARGO_PKG_VERSION"));

/// One generated token's log-probability and its alternatives', with their text.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

/// A log-probability JSON can carry: a banned token's -inf is OpenAI's -9999.
fn finite(logprob: f32) -> f32 {
    logprob.max(-9999.0)
}

pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        // A cancelled request has no client left to read it.
        FinishReason::Length | FinishReason::Cancelled => "length",
        // The worker answers a failed stream with its error instead of a finish.
        FinishReason::Failed => "error",
    }
}

pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The fields that open every response and chunk of one answer: its id, when it was
/// created (Unix seconds) and the model's name.
#[derive(Debug, Clone, Copy)]
pub struct AnswerHeader<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
}

/// Which endpoint a response is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completion => "/v1/completions",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat_completions",
            Endpoint::Completion => "completions",
        }
    }

    /// A fresh response id: the endpoint's prefix and 96 random bits (unique across
    /// restarts, unlike a counter).
    pub fn new_id(self) -> String {
        let prefix = match self {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        };
        format!("{prefix}-{:024x}", rand::random::<u128>() >> 32)
    }

    /// The whole response of a non-streaming request (`logprobs`: [`Endpoint::logprobs`]
    /// or null).
    pub fn response(
        self,
        header: AnswerHeader<'_>,
        text: &str,
        finish: &str,
        usage: Value,
        logprobs: Value,
    ) -> Value {
        let AnswerHeader { id, created, model } = header;
        match self {
            Endpoint::Chat => json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": logprobs, "finish_reason": finish}],
                "usage": usage,
            }),
            Endpoint::Completion => json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}],
                "usage": usage,
            }),
        }
    }

    /// One stream chunk: `text` (the chat's first chunk also carries the role), or the last
    /// one with `finish`; `logprobs` those of the chunk's tokens, or null.
    pub fn chunk(
        self,
        header: AnswerHeader<'_>,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        logprobs: Value,
    ) -> Value {
        let AnswerHeader { id, created, model } = header;
        match self {
            Endpoint::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                json!({
                    "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "system_fingerprint": SYSTEM_FINGERPRINT,
                    "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
                })
            }
            Endpoint::Completion => json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{"index": 0, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish}],
            }),
        }
    }

    /// The `logprobs` object of `tokens` (null when the request asked for none): chat's
    /// `{"content": [...]}`, or completions' parallel lists; `text_offset` is where the
    /// first token's text starts in the completion.
    pub fn logprobs(self, tokens: Option<&[TokenLogprob]>, text_offset: usize) -> Value {
        let Some(tokens) = tokens else {
            return Value::Null;
        };
        match self {
            Endpoint::Chat => {
                let entry = |token: &str, logprob: f32| json!({"token": token, "logprob": finite(logprob), "bytes": token.as_bytes()});
                let content: Vec<Value> = tokens
                    .iter()
                    .map(|t| {
                        let mut e = entry(&t.token, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|(tok, lp)| entry(tok, *lp)).collect();
                        e
                    })
                    .collect();
                json!({"content": content, "refusal": null})
            }
            Endpoint::Completion => {
                let mut offset = text_offset;
                let offsets: Vec<usize> = tokens
                    .iter()
                    .map(|t| {
                        let at = offset;
                        offset += t.token.len();
                        at
                    })
                    .collect();
                json!({
                    "tokens": tokens.iter().map(|t| t.token.clone()).collect::<Vec<_>>(),
                    "token_logprobs": tokens.iter().map(|t| finite(t.logprob)).collect::<Vec<_>>(),
                    "top_logprobs": tokens.iter().map(|t| {
                        t.top.iter().map(|(tok, lp)| (tok.clone(), json!(finite(*lp))))
                            .collect::<serde_json::Map<_, _>>()
                    }).collect::<Vec<_>>(),
                    "text_offset": offsets,
                })
            }
        }
    }

    /// The usage chunk (`stream_options.include_usage`): no choices.
    pub fn usage_chunk(self, header: AnswerHeader<'_>, usage: Value) -> Value {
        let AnswerHeader { id, created, model } = header;
        let object = match self {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completion => "text_completion",
        };
        json!({"id": id, "object": object, "created": created, "model": model,
               "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [], "usage": usage})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_json_has_openai_shapes() {
        let t = |tok: &str, lp: f32| TokenLogprob {
            token: tok.into(),
            logprob: lp,
            top: vec![(tok.into(), lp), ("b".into(), f32::NEG_INFINITY)],
        };
        let tokens = [t("ab", -0.5), t("c", -1.0)];
        let chat = Endpoint::Chat.logprobs(Some(&tokens), 0);
        assert_eq!(chat["content"][0]["token"], "ab");
        assert_eq!(chat["content"][0]["bytes"], json!([97, 98]));
        assert_eq!(
            chat["content"][1]["top_logprobs"][1]["logprob"],
            json!(-9999.0)
        );
        let c = Endpoint::Completion.logprobs(Some(&tokens), 3);
        assert_eq!(c["tokens"], json!(["ab", "c"]));
        assert_eq!(c["token_logprobs"], json!([-0.5, -1.0]));
        assert_eq!(c["text_offset"], json!([3, 5]));
        assert_eq!(c["top_logprobs"][0]["b"], json!(-9999.0));
        assert_eq!(Endpoint::Chat.logprobs(None, 0), Value::Null);
        assert!(Endpoint::Chat.new_id().starts_with("chatcmpl-"));
        assert_ne!(Endpoint::Chat.new_id(), Endpoint::Chat.new_id());
    }
}
