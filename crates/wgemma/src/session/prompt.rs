//! A target's text side apart from its session: [`PromptEncoder`] (a request's prompt as
//! token ids, through the tokenizer and the chat template) and [`TextTools`] (what a
//! server renders and stops on from its HTTP threads), and the reply's text decoder.

use super::types::GenerateRequest;
use crate::error::{Error, Result};
use crate::text::chat::{
    builtin_gemma4_with_tools, encode_conversation, encode_conversation_with_tools, ChatMessage,
    ChatTemplate,
};
use crate::text::tokenizer::{TextStream, Tokenizer, TURN_END, TURN_START};
use crate::text::tools::ToolDeclaration;
use std::sync::Arc;

const OP: &str = "session";

/// A target's prompt encoding (tokenizer, chat template, context) apart from its session:
/// cheap to clone and shareable across threads, so a server tokenises on request threads
/// and the model thread never spends time on a prompt's text.
#[derive(Clone)]
pub struct PromptEncoder {
    pub(super) tokenizer: Option<Arc<Tokenizer>>,
    pub(super) chat_template: Option<Arc<ChatTemplate>>,
    pub(super) context: usize,
}

impl PromptEncoder {
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_deref()
    }

    /// Positions of the model's KV cache: prompt + new tokens must fit.
    pub fn context(&self) -> usize {
        self.context
    }

    /// A conversation as text, ready for the model's reply: the checkpoint's template, or
    /// Gemma 4's turn format (which needs a tokenizer with its turn markers).
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        self.render_chat_with_tools(messages, &[])
    }

    /// True when prompts can declare tools to the model: the built-in format, or a chat
    /// template that reads `tools`.
    pub fn takes_tools(&self) -> bool {
        self.chat_template.as_ref().is_none_or(|t| t.reads_tools())
    }

    /// [`PromptEncoder::render_chat`] with tools the model may call.
    pub fn render_chat_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
    ) -> Result<String> {
        render_chat(
            self.chat_template.as_deref(),
            self.tokenizer.as_deref(),
            messages,
            tools,
            &serde_json::Map::new(),
        )
    }

    /// The request's prompt as token ids: given ids, text (plain: `<bos>` + text; with
    /// `chat`: one user turn), or a conversation through the chat template.
    pub fn prompt_ids(&self, request: &GenerateRequest) -> Result<Vec<u32>> {
        let tokenizer = || {
            self.tokenizer.as_deref().ok_or_else(|| {
                Error::invalid(
                    OP,
                    "text prompt",
                    "a model with a tokenizer (tokenizer.json with the checkpoint)",
                    "a model without one: give promptIds instead",
                )
            })
        };
        let given = [
            request.prompt.is_some(),
            request.prompt_ids.is_some(),
            request.messages.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return Err(Error::invalid(
                OP,
                "prompt",
                "exactly one of prompt (text), promptIds (token ids) or messages",
                format!("{} of them", given.iter().filter(|&&g| g).count()),
            ));
        }
        if request.chat && request.prompt.is_none() {
            return Err(Error::invalid(
                OP,
                "chat",
                "a text prompt to wrap in the chat template",
                if request.prompt_ids.is_some() {
                    "promptIds"
                } else {
                    "messages (already a conversation)"
                },
            ));
        }
        let ids = if let Some(ids) = &request.prompt_ids {
            ids.clone()
        } else if let Some(messages) = &request.messages {
            encode_conversation_with_tools(tokenizer()?, messages, &request.tools, &|m| {
                render_chat(
                    self.chat_template.as_deref(),
                    self.tokenizer.as_deref(),
                    m,
                    &request.tools,
                    &request.template_kwargs,
                )
            })?
        } else {
            let text = request.prompt.as_deref().unwrap_or_default();
            let tok = tokenizer()?;
            if request.chat {
                encode_conversation(tok, &[ChatMessage::new("user", text)], &|m| {
                    self.render_chat(m)
                })?
            } else {
                tok.encode_prompt(text)?
            }
        };
        if ids.is_empty() {
            return Err(Error::invalid(OP, "prompt tokens", "at least one", 0));
        }
        Ok(ids)
    }
}

/// The text decoder of a request's reply: one that keeps the tool-call markers when the
/// request reads calls out of the reply.
pub(super) fn text_stream(tokenizer: Option<&Tokenizer>, request: &GenerateRequest) -> TextStream {
    match tokenizer {
        Some(tok) if request.keep_tool_markers => TextStream::keeping(tok.tool_marker_ids()),
        _ => TextStream::new(),
    }
}

/// A conversation as text through `template`, or Gemma 4's built-in turn format when there
/// is none (which needs the tokenizer, if any, to have the turn markers).
/// `kwargs` are more variables for the template (the built-in format has none to read).
fn render_chat(
    template: Option<&ChatTemplate>,
    tokenizer: Option<&Tokenizer>,
    messages: &[ChatMessage],
    tools: &[ToolDeclaration],
    kwargs: &serde_json::Map<String, serde_json::Value>,
) -> Result<String> {
    if let Some(template) = template {
        return template.render_with_kwargs(messages, tools, true, kwargs);
    }
    if let Some(tok) = tokenizer {
        for marker in [TURN_START, TURN_END] {
            if tok.token_id(marker).is_none() {
                return Err(Error::invalid(
                    OP,
                    "chat format",
                    format!("a chat template, or a tokenizer with the `{marker}` token (Gemma 4)"),
                    "neither",
                ));
            }
        }
    }
    builtin_gemma4_with_tools(messages, tools, true)
}

/// A target's text side, detached from its session ([`Session::text_tools`]).
#[derive(Clone)]
pub struct TextTools {
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    /// Token ids that end a generation.
    pub stop_ids: Vec<u32>,
}

impl TextTools {
    /// As [`Session::render_chat`], with tools the model may call.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
    ) -> Result<String> {
        render_chat(
            self.chat_template.as_deref(),
            self.tokenizer.as_deref(),
            messages,
            tools,
            &serde_json::Map::new(),
        )
    }
}
