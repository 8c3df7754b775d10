//! Chat prompts: the checkpoint's own Jinja template (`chat_template.jinja`, or the
//! `chat_template` of `tokenizer_config.json`) rendered with minijinja the way HF's
//! `apply_chat_template` renders it, and Gemma 4's turn format built in for checkpoints
//! that ship none.
//!
//! HF renders in a sandboxed jinja2 environment with `trim_blocks` and `lstrip_blocks`, the
//! loop-controls extension, a `tojson` that does not HTML-escape, and a `raise_exception`
//! global; the same are set up here (Python string methods such as `.strip()` come from
//! minijinja-contrib's pycompat). The rendered text carries its own `<bos>`; it is encoded
//! without adding special tokens, as HF does.
//!
//! `template` renders a checkpoint's template within a budget, `hf_jinja` gives it the
//! globals and filters of HF's environment, and `encode` encodes a rendered conversation
//! with message content inert.

mod encode;
mod hf_jinja;
mod template;

pub use encode::{encode_conversation, encode_conversation_with_tools};
pub use template::{ChatTemplate, RenderBudget, FUEL_PER_MESSAGE};

use super::tools::{
    render_call, render_declaration, render_response, ToolCall, ToolDeclaration, ToolResponse,
};
use crate::error::{Error, Result};
use crate::text::tokenizer::{BOS, TURN_END, TURN_START};
use serde::{Deserialize, Serialize};

/// Template errors name the session, as they did when templates lived there (the API
/// that reports them).
const OP: &str = "session";

/// One message of a conversation (OpenAI and HF: `{"role": ..., "content": ...}`), with the
/// calls a model turn made and the tools' responses to them (Gemma 4 keeps both in the
/// model's turn; HF's templates read them as `tool_calls` and `tool_responses`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_responses: Vec<ToolResponse>,
    /// The speaker's name (OpenAI's `name`): given to a template, which may write it (the
    /// built-in format has no place for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
            tool_calls: Vec::new(),
            tool_responses: Vec::new(),
            name: None,
        }
    }

    /// Bytes of its text, calls and responses (what a render may copy).
    fn text_bytes(&self) -> usize {
        let tool_bytes: usize = self
            .tool_calls
            .iter()
            .map(|c| render_call(c).len())
            .chain(self.tool_responses.iter().map(|r| render_response(r).len()))
            .sum();
        self.role.len()
            + self.content.len()
            + self.name.as_ref().map_or(0, String::len)
            + tool_bytes
    }
}

/// The roles the built-in format knows (HF's Gemma templates map `assistant` to `model`).
const ROLES: [&str; 4] = ["system", "user", "assistant", "model"];

/// Gemma 4's turn format: `<bos>`, then `<|turn>{role}\n{content}<turn|>\n` per message
/// (`assistant` written `model`), then `<|turn>model\n` when a reply is wanted. One user
/// message gives exactly what `Tokenizer::encode_chat` encodes.
pub fn builtin_gemma4(messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
    builtin_gemma4_with_tools(messages, &[], add_generation_prompt)
}

/// [`builtin_gemma4`] with tools, as Gemma 4's own template writes them: the declarations
/// in the system turn (the first message's, if it is a system message), a model turn's
/// calls after its text and the responses after the calls. When the conversation ends in
/// a model turn with responses and a reply is wanted, that turn stays open: the model goes
/// on from the responses in the same turn.
pub fn builtin_gemma4_with_tools(
    messages: &[ChatMessage],
    tools: &[ToolDeclaration],
    add_generation_prompt: bool,
) -> Result<String> {
    check_messages(messages)?;
    let mut text = String::from(BOS);
    let mut rest = messages.iter().enumerate().peekable();
    if !tools.is_empty() {
        text.push_str(&format!("{TURN_START}system\n"));
        if let Some((_, m)) = rest.next_if(|(_, m)| m.role == "system" && m.tool_calls.is_empty()) {
            text.push_str(&m.content);
        }
        for tool in tools {
            text.push_str(&render_declaration(tool));
        }
        text.push_str(&format!("{TURN_END}\n"));
    }
    let mut open = false;
    for (i, m) in rest {
        if !ROLES.contains(&m.role.as_str()) {
            return Err(Error::invalid(
                OP,
                format!("messages[{i}].role"),
                "one of system, user, assistant",
                format!("{:?}", m.role),
            ));
        }
        let role = if m.role == "assistant" {
            "model"
        } else {
            &m.role
        };
        if role != "model" && !(m.tool_calls.is_empty() && m.tool_responses.is_empty()) {
            return Err(Error::invalid(
                OP,
                format!("messages[{i}]"),
                "tool calls and responses on assistant messages only",
                format!("them on a {:?} message", m.role),
            ));
        }
        text.push_str(&format!("{TURN_START}{role}\n{}", m.content));
        for call in &m.tool_calls {
            text.push_str(&render_call(call));
        }
        for response in &m.tool_responses {
            text.push_str(&render_response(response));
        }
        open = add_generation_prompt && i + 1 == messages.len() && !m.tool_responses.is_empty();
        if !open {
            text.push_str(&format!("{TURN_END}\n"));
        }
    }
    if add_generation_prompt && !open {
        text.push_str(&format!("{TURN_START}model\n"));
    }
    Ok(text)
}

fn check_messages(messages: &[ChatMessage]) -> Result<()> {
    if messages.is_empty() {
        return Err(Error::invalid(
            OP,
            "messages",
            "at least one message",
            "an empty list",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_format_matches_encode_chat_and_names_bad_roles() {
        let one = builtin_gemma4(&[ChatMessage::new("user", "hi")], true).unwrap();
        assert_eq!(one, "<bos><|turn>user\nhi<turn|>\n<|turn>model\n");
        let conv = [
            ChatMessage::new("system", "be brief"),
            ChatMessage::new("user", "hi"),
            ChatMessage::new("assistant", "hello"),
            ChatMessage::new("user", "bye"),
        ];
        assert_eq!(
            builtin_gemma4(&conv, false).unwrap(),
            "<bos><|turn>system\nbe brief<turn|>\n<|turn>user\nhi<turn|>\n\
             <|turn>model\nhello<turn|>\n<|turn>user\nbye<turn|>\n"
        );
        let err = builtin_gemma4(&[ChatMessage::new("robot", "x")], true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("messages[0].role") && err.contains("\"robot\""),
            "{err}"
        );
        assert!(builtin_gemma4(&[], true).is_err());
    }

    #[test]
    fn template_errors_name_the_cause() {
        let err = ChatTemplate::new("{% for m in messages %}", "<bos>", "<eos>")
            .unwrap_err()
            .to_string();
        assert!(err.contains("chat template"), "{err}");
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
            "<bos>",
            "<eos>",
        )
        .unwrap();
        let err = t
            .render(&[ChatMessage::new("system", "x")], true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("first must be user"), "{err}");
        assert_eq!(
            t.render(&[ChatMessage::new("user", "x")], true).unwrap(),
            "ok"
        );
    }

    #[test]
    fn names_and_kwargs_reach_the_template() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.name or '-' }}:{{ m.content }};{% endfor %}\
             {{ enable_thinking }}{{ add_generation_prompt }}",
            "<bos>",
            "<eos>",
        )
        .unwrap();
        let mut named = ChatMessage::new("user", "hi");
        named.name = Some("aaron".into());
        let kwargs = serde_json::json!({"enable_thinking": false, "add_generation_prompt": "x"});
        let got = t
            .render_with_kwargs(
                &[named, ChatMessage::new("user", "yo")],
                &[],
                true,
                kwargs.as_object().unwrap(),
            )
            .unwrap();
        // A kwarg never replaces the conversation's own variables.
        assert_eq!(got, "aaron:hi;-:yo;FalseTrue");
    }

    #[test]
    fn tokenizer_config_forms() {
        let none = ChatTemplate::from_checkpoint(None, Some(r#"{"bos_token": "<bos>"}"#)).unwrap();
        assert!(none.is_none());
        let list = r#"{"bos_token": {"content": "<s>"}, "chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"}]}"#;
        let t = ChatTemplate::from_checkpoint(None, Some(list))
            .unwrap()
            .unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "x")], true).unwrap(),
            "<s>x"
        );
        // chat_template.jinja wins over the config's template.
        let t = ChatTemplate::from_checkpoint(Some("jinja {{ eos_token }}"), Some(list))
            .unwrap()
            .unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "x")], true).unwrap(),
            "jinja <eos>"
        );
        let err = ChatTemplate::from_checkpoint(None, Some(r#"{"chat_template": 3}"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("a number"), "{err}");
        let err = ChatTemplate::from_checkpoint(None, Some("{"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("valid JSON"), "{err}");
    }
}
