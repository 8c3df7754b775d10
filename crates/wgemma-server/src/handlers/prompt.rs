//! A request's prompt made token ids before it reaches the model thread: tokenised on a
//! blocking thread, after a check from its byte length alone that it can fit the context.
//!
//! Tokenising costs memory in proportion to the text (the `tokenizers` crate holds about
//! 200 bytes per input byte at its peak: a 4 MiB `/tokenize` body took 0.9 GB), so every
//! text that reaches the tokenizer (messages with their tool calls and responses, the
//! declared tools, a completion's prompt, `/tokenize`'s content) is first held to
//! [`max_text_bytes`] of the context, and at most [`TOKENIZING_AT_ONCE`] requests tokenise
//! at a time: a request's memory is bounded before any work is done.

use crate::error::ApiError;
use crate::openai::request::{Parsed, Prompt};
use std::sync::OnceLock;
use tokio::sync::{Semaphore, SemaphorePermit};
use wgemma::session::{GenerateRequest, PromptEncoder, RenderBudget};

/// Bytes of text per position of the context a request may send to the tokenizer: text
/// averages 3 to 5 bytes a token, so a prompt past this cannot fit the context.
pub const TEXT_BYTES_PER_POSITION: usize = 16;
/// The least text a request may send, whatever the context.
pub const MIN_TEXT_BYTES: usize = 64 << 10;
/// Requests tokenised at the same time (others wait their turn).
pub const TOKENIZING_AT_ONCE: usize = 4;

/// Bytes of text one request may hand the tokenizer, for a context of `context` positions.
pub fn max_text_bytes(context: usize) -> usize {
    context
        .saturating_mul(TEXT_BYTES_PER_POSITION)
        .max(MIN_TEXT_BYTES)
}

/// Refuses text past [`max_text_bytes`] before it is tokenised; `param` names the field.
pub fn check_text_bytes(param: &str, bytes: usize, context: usize) -> Result<(), ApiError> {
    let max = max_text_bytes(context);
    if bytes > max {
        return Err(ApiError::field(
            param,
            format!(
                "at most {max} bytes of text ({TEXT_BYTES_PER_POSITION} per position of the \
                 context of {context}; no prompt that long fits it)"
            ),
            format!("{bytes} bytes"),
        ));
    }
    Ok(())
}

/// A turn at the tokenizer: held while a request's text is tokenised.
pub async fn tokenizer_turn() -> SemaphorePermit<'static> {
    static TURNS: OnceLock<Semaphore> = OnceLock::new();
    TURNS
        .get_or_init(|| Semaphore::new(TOKENIZING_AT_ONCE))
        .acquire()
        .await
        .expect("the tokenizer's semaphore is never closed")
}

/// The request's field a prompt error names: the library says where in the conversation
/// it found the problem (`tools[0]`, `messages[2].tool_calls[0]`); else `param`.
fn param_of(e: &wgemma::Error, param: &str) -> String {
    match e {
        wgemma::Error::In { inner, .. } => param_of(inner, param),
        wgemma::Error::Invalid { what, .. }
            if what.starts_with("tools[") || what.starts_with("messages[") =>
        {
            what.clone()
        }
        _ => param.to_string(),
    }
}

/// The prompt of `parsed` as token ids, tokenised on a blocking thread (the model thread
/// never spends time on text), with the length checked against the context: first from
/// the byte length alone (a prompt that cannot fit is refused without tokenising it), then
/// exactly. Ids given as ids are left to the model thread's checks (they cost nothing).
pub async fn encode_prompt(
    encoder: &PromptEncoder,
    mut parsed: Parsed,
) -> Result<Parsed, ApiError> {
    let param = match parsed.prompt {
        Prompt::Messages(_) => "messages",
        Prompt::Text(_) => "prompt",
        Prompt::Ids(_) => return Ok(parsed),
    };
    let context = encoder.context();
    let mut request = GenerateRequest::default();
    let bytes = match std::mem::replace(&mut parsed.prompt, Prompt::Ids(Vec::new())) {
        Prompt::Messages(m) => {
            check_message_count(m.len(), context)?;
            request.template_kwargs = parsed.sampling.template_kwargs.clone();
            // A model reads the declared tools as text in its prompt.
            if let Some(tools) = &parsed.sampling.tools {
                request.tools = tools.declared().to_vec();
            }
            // Every text the template writes: contents, calls, responses, declarations.
            let n = RenderBudget::for_conversation(&m, &request.tools).input_bytes;
            request.messages = Some(m);
            if !request.tools.is_empty() && !encoder.takes_tools() {
                return Err(ApiError::invalid(
                    "tools",
                    "tools: expected a model whose chat template declares tools (reads \
                     `tools`), found a template that would drop them",
                ));
            }
            n
        }
        Prompt::Text(t) => {
            let n = t.len();
            request.prompt = Some(t);
            n
        }
        Prompt::Ids(_) => unreachable!("returned above"),
    };
    check_text_bytes(param, bytes, context)?;
    if let Some(tok) = encoder.tokenizer() {
        let at_least = tok.min_tokens(bytes);
        if at_least >= context {
            return Err(ApiError::field(
                param,
                format!("fewer than {context} tokens (the context)"),
                format!("{bytes} bytes, at least {at_least} tokens"),
            ));
        }
    }
    let encoder = encoder.clone();
    let turn = tokenizer_turn().await;
    let ids = tokio::task::spawn_blocking(move || encoder.prompt_ids(&request))
        .await
        .map_err(|e| ApiError::internal(format!("tokenising the prompt: {e}")))?
        .map_err(|e| {
            let at = param_of(&e, param);
            ApiError::invalid(&at, format!("{at}: {e}"))
        })?;
    drop(turn);
    let room = context.saturating_sub(ids.len());
    if room == 0 {
        return Err(ApiError::field(
            param,
            format!("fewer than {context} tokens (the context)"),
            format!("{} tokens", ids.len()),
        ));
    }
    if let Some(m) = parsed.sampling.max_tokens.filter(|&m| m > room) {
        return Err(ApiError::field(
            "max_tokens",
            format!(
                "at most {room} (the context of {context} positions less the prompt's {} tokens)",
                ids.len()
            ),
            m,
        ));
    }
    parsed.prompt = Prompt::Ids(ids);
    Ok(parsed)
}

/// Refuses a conversation of at least `context` messages before its template renders:
/// every message takes at least one position of the context (a turn's markers alone take
/// three in Gemma's format), and a template's work grows with the count, so a body of many
/// empty messages would cost rendering time for a prompt that cannot fit.
pub fn check_message_count(messages: usize, context: usize) -> Result<(), ApiError> {
    if messages >= context {
        return Err(ApiError::field(
            "messages",
            format!("fewer than {context} messages (each takes a position of the context)"),
            format!("{messages} messages"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgemma::session::{ChatMessage, ToolDeclaration, ToolResponse};

    #[test]
    fn tool_text_counts_toward_the_tokenizer_bound_and_errors_name_their_place() {
        // Tool declarations and tool messages skipped the size check (3.8 MB tokenised).
        let big = "w".repeat(40 << 10);
        let tools = vec![ToolDeclaration::new("f", Some(&big), None).unwrap()];
        let mut answer = ChatMessage::new("assistant", "");
        answer.tool_responses = vec![ToolResponse {
            name: "f".into(),
            response: serde_json::json!({ "value": big }),
        }];
        let messages = vec![ChatMessage::new("user", "hi"), answer];
        let bytes = RenderBudget::for_conversation(&messages, &tools).input_bytes;
        assert!(bytes > 80 << 10, "{bytes}");
        let e = check_text_bytes("messages", bytes, 256).unwrap_err();
        assert!(e.message.contains("65536 bytes"), "{}", e.message);
        assert!(check_text_bytes("content", 1000, 256).is_ok());
        assert_eq!(max_text_bytes(1 << 20), 16 << 20);
        // A special token in a declaration is blamed on `tools`, not `messages`.
        let e = wgemma::Error::invalid("session", "tools[0]", "text", "<|turn>");
        assert_eq!(param_of(&e.within("prompt"), "messages"), "tools[0]");
        let other = wgemma::Error::invalid("session", "chat template", "a", "b");
        assert_eq!(param_of(&other, "messages"), "messages");
    }
}
