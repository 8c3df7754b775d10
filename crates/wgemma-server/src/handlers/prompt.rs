//! A request's prompt made token ids before it reaches the model thread: tokenised on a
//! blocking thread, after a check from its byte length alone that it can fit the context.

use crate::error::ApiError;
use crate::openai::request::{Parsed, Prompt};
use wgemma::session::{GenerateRequest, PromptEncoder};

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
            let n = m.iter().map(|m| m.role.len() + m.content.len()).sum();
            request.messages = Some(m);
            request.template_kwargs = parsed.sampling.template_kwargs.clone();
            // A model reads the declared tools as text in its prompt.
            if let Some(tools) = &parsed.sampling.tools {
                request.tools = tools.declared().to_vec();
            }
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
    let ids = tokio::task::spawn_blocking(move || encoder.prompt_ids(&request))
        .await
        .map_err(|e| ApiError::internal(format!("tokenising the prompt: {e}")))?
        .map_err(|e| ApiError::invalid(param, format!("{param}: {e}")))?;
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
