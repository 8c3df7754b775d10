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

use super::tools::{
    render_call, render_declaration, render_response, strings_of, ToolCall, ToolDeclaration,
    ToolResponse,
};
use crate::error::{Error, Result};
use crate::text::tokenizer::{json_kind, Tokenizer, BOS, TURN_END, TURN_START};
use serde::{Deserialize, Serialize};
use serde_json::Map;

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

/// A checkpoint's Jinja chat template, parsed once.
#[derive(Clone)]
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    /// The template reads `tools` (a template that does not would drop them).
    reads_tools: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

const TEMPLATE_NAME: &str = "chat_template";

impl ChatTemplate {
    /// Parses `source` (refusing a template that does not compile, with minijinja's reason
    /// and line). `bos_token` / `eos_token` are what the template sees under those names.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = minijinja::Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| Error::invalid(OP, "chat template syntax", "HF's", e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| Error::invalid(OP, "chat template", "a Jinja template", describe(&e)))?;
        let reads_tools = env
            .get_template(TEMPLATE_NAME)
            .is_ok_and(|t| t.undeclared_variables(false).contains("tools"));
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            reads_tools,
        })
    }

    /// What the template may write besides message content: its source and the BOS / EOS
    /// strings it is given (the added tokens in them are chat markers,
    /// [`Tokenizer::mark_format_tokens`]).
    pub fn format_text(&self) -> [&str; 3] {
        [&self.source, &self.bos_token, &self.eos_token]
    }

    /// True when the template declares tools to the model (it reads `tools`).
    pub fn reads_tools(&self) -> bool {
        self.reads_tools
    }

    /// The template a checkpoint defines, if any: `chat_template.jinja` first (what
    /// transformers >= 4.43 saves), else `tokenizer_config.json`'s `chat_template` (a string,
    /// or a list of `{name, template}` of which `default` is used). The special tokens come
    /// from `tokenizer_config.json` (`<bos>` / `<eos>` when it has none).
    pub fn from_checkpoint(
        chat_template_jinja: Option<&str>,
        tokenizer_config_json: Option<&str>,
    ) -> Result<Option<ChatTemplate>> {
        let config: Option<serde_json::Value> = tokenizer_config_json
            .map(|json| {
                serde_json::from_str(json).map_err(|e| {
                    Error::invalid(OP, "tokenizer_config.json", "valid JSON", e.to_string())
                })
            })
            .transpose()?;
        let token = |name: &str, default: &str| -> String {
            match config.as_ref().and_then(|c| c.get(name)) {
                Some(serde_json::Value::String(s)) => s.clone(),
                // The older AddedToken form: {"content": "<bos>", ...}.
                Some(serde_json::Value::Object(o)) => o
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or(default)
                    .to_string(),
                _ => default.to_string(),
            }
        };
        let (bos, eos) = (token("bos_token", BOS), token("eos_token", "<eos>"));
        let source = match chat_template_jinja {
            Some(source) => Some(source.to_string()),
            None => match config.as_ref().and_then(|c| c.get("chat_template")) {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(serde_json::Value::Array(list)) => Some(default_of(list)?),
                Some(other) => {
                    return Err(Error::invalid(
                        OP,
                        "tokenizer_config.json field `chat_template`",
                        "a string or a list of {name, template}",
                        json_kind(other),
                    ))
                }
            },
        };
        source
            .map(|s| ChatTemplate::new(&s, &bos, &eos))
            .transpose()
    }

    /// The conversation as text, as HF's `apply_chat_template(messages, tokenize=False,
    /// add_generation_prompt=...)` renders it. A template's `raise_exception` (roles out of
    /// order, say) comes back as an error carrying its message.
    ///
    /// A template is a program from the checkpoint: it runs on a budget of minijinja fuel
    /// (instructions plus bytes it creates, checked before each allocation) and an output
    /// cap, both scaled to the conversation's size ([`RenderBudget`]), so a template with
    /// runaway loops or output ends in an error instead of holding the caller.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with_tools(messages, &[], add_generation_prompt)
    }

    /// [`ChatTemplate::render`] with `tools` (HF's `apply_chat_template(..., tools=...)`:
    /// OpenAI's `{"type": "function", "function": {...}}` list; none when empty, so a
    /// template's `{% if tools %}` is false).
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.render_with_kwargs(messages, tools, add_generation_prompt, &Map::new())
    }

    /// [`ChatTemplate::render_with_tools`] with more variables for the template (HF's
    /// `apply_chat_template(..., **kwargs)`, e.g. `enable_thinking`); the conversation's
    /// own variables (`messages`, `tools`, `add_generation_prompt`, the BOS and EOS
    /// tokens) win over a kwarg of the same name.
    pub fn render_with_kwargs(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        add_generation_prompt: bool,
        kwargs: &Map<String, serde_json::Value>,
    ) -> Result<String> {
        check_messages(messages)?;
        if !tools.is_empty() && !self.reads_tools {
            return Err(Error::invalid(
                OP,
                "tools",
                "a chat template that declares tools to the model (reads `tools`)",
                "one that never reads them",
            ));
        }
        let budget = RenderBudget::for_conversation(messages, tools);
        let tools = if tools.is_empty() {
            minijinja::Value::from(())
        } else {
            minijinja::Value::from(minijinja::value::Serde(
                tools
                    .iter()
                    .map(ToolDeclaration::to_template_value)
                    .collect::<Vec<_>>(),
            ))
        };
        let mut env = self.env.clone();
        env.set_fuel(Some(budget.fuel));
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| Error::invalid(OP, "chat template", "a Jinja template", describe(&e)))?;
        let mut out = CappedOutput {
            bytes: Vec::new(),
            cap: budget.output_bytes,
            over: false,
        };
        let rendered = template.render_captured_to(
            minijinja::context! {
                messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                add_generation_prompt => add_generation_prompt,
                tools => tools,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
                ..minijinja::Value::from(minijinja::value::Serde(kwargs))
            },
            &mut out,
        );
        if out.over {
            return Err(Error::invalid(
                OP,
                "chat template output",
                format!(
                    "at most {} bytes for a conversation of {} bytes",
                    budget.output_bytes, budget.input_bytes
                ),
                "a template that writes more (a runaway template?)",
            ));
        }
        match rendered {
            Ok(_) => {}
            Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => {
                return Err(Error::invalid(
                    OP,
                    "chat template",
                    format!(
                        "a template that renders this conversation within {} units of work \
                         (minijinja fuel)",
                        budget.fuel
                    ),
                    format!(
                        "one that needs more (a runaway loop or data growth?): {}",
                        describe(&e)
                    ),
                ))
            }
            Err(e) => {
                return Err(Error::invalid(
                    OP,
                    "messages",
                    "a conversation the checkpoint's chat template accepts",
                    describe(&e),
                ))
            }
        }
        String::from_utf8(out.bytes)
            .map_err(|e| Error::invalid(OP, "chat template output", "UTF-8 text", e.to_string()))
    }
}

/// What one render may spend: generous for any real template (a few hundred instructions
/// and a few copies of the text per message), small enough that a runaway one ends in well
/// under a second and a bounded amount of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderBudget {
    /// Bytes of the messages' roles, contents, tool calls and responses, and of the tools'
    /// declarations.
    pub input_bytes: usize,
    /// minijinja fuel: one per instruction, one per 64 bytes of data created or written.
    pub fuel: u64,
    /// Bytes the rendered text may have.
    pub output_bytes: usize,
}

/// The fuel a render gets for each message (see [`RenderBudget::for_conversation`]).
pub const FUEL_PER_MESSAGE: u64 = 5_000;

impl RenderBudget {
    pub fn for_conversation(messages: &[ChatMessage], tools: &[ToolDeclaration]) -> RenderBudget {
        let input_bytes: usize = messages.iter().map(ChatMessage::text_bytes).sum::<usize>()
            + tools
                .iter()
                .map(|t| render_declaration(t).len())
                .sum::<usize>();
        RenderBudget {
            input_bytes,
            // 1M instructions of base; 5k per message (the Gemma 4 templates of
            // tests/data spend 41-52 per message: a hundredfold margin, while a request of
            // many empty messages buys little); each input byte may be copied, filtered
            // and written about 32 times.
            fuel: 1_000_000 + FUEL_PER_MESSAGE * messages.len() as u64 + input_bytes as u64 / 2,
            // The turn markup around each message plus the text, a few times over.
            output_bytes: (1 << 20) + 4 * input_bytes,
        }
    }
}

/// Collects the rendered text, refusing to grow past `cap` (the write fails, which ends
/// the render; `over` tells that failure from the template's own errors).
struct CappedOutput {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("chat template output over its cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A conversation's prompt ids, with message content read as text: only the markup the
/// template (or the built-in format) writes may hold special tokens. `render` is the
/// template. Content without any special token's string is the common case: the whole
/// rendering is encoded at once, exactly as HF encodes it. Otherwise the conversation is
/// rendered a second time with a placeholder for each content; the placeholders' places
/// in that skeleton are where the contents went (verified: the skeleton with the contents
/// put back, as written or trimmed as Gemma's templates trim them, must be the rendering),
/// and there the contents are encoded with special tokens inert. A template that changes
/// content in other ways cannot be checked and such content is refused.
pub fn encode_conversation(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    render: &dyn Fn(&[ChatMessage]) -> Result<String>,
) -> Result<Vec<u32>> {
    encode_conversation_with_tools(tok, messages, &[], render)
}

/// [`encode_conversation`] of a conversation with tools (`render` renders them). The tools'
/// declarations and the messages' calls and responses are written by the template as
/// markup, so none of their text may hold a special token (refused by name): only a
/// message's content is encoded inert.
pub fn encode_conversation_with_tools(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    tools: &[ToolDeclaration],
    render: &dyn Fn(&[ChatMessage]) -> Result<String>,
) -> Result<Vec<u32>> {
    let special_in = |place: String, value: &serde_json::Value| -> Result<()> {
        let mut found = Vec::new();
        strings_of(value, &mut found);
        match found.iter().find_map(|s| tok.first_marker(s)) {
            Some(special) => Err(Error::invalid(
                OP,
                place,
                "text without special tokens",
                format!("the special token {special:?}"),
            )),
            None => Ok(()),
        }
    };
    for (i, t) in tools.iter().enumerate() {
        special_in(format!("tools[{i}]"), &t.to_template_value())?;
    }
    for (i, m) in messages.iter().enumerate() {
        for (j, c) in m.tool_calls.iter().enumerate() {
            let value = serde_json::to_value(c).map_err(|e| {
                Error::invalid(OP, "tool call", "a serialisable call", e.to_string())
            })?;
            special_in(format!("messages[{i}].tool_calls[{j}]"), &value)?;
        }
        for (j, r) in m.tool_responses.iter().enumerate() {
            let value = serde_json::json!([r.name, r.response]);
            special_in(format!("messages[{i}].tool_responses[{j}]"), &value)?;
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let named = [("role", Some(&m.role)), ("name", m.name.as_ref())];
        for (field, text) in named {
            if let Some(special) = text.and_then(|t| tok.first_marker(t)) {
                return Err(Error::invalid(
                    OP,
                    format!("messages[{i}].{field}"),
                    format!("a {field} without special tokens (a template writes it as markup)"),
                    format!("one holding the special token {special:?}"),
                ));
            }
        }
    }
    let text = render(messages)?;
    if !messages.iter().any(|m| tok.has_marker(&m.content)) {
        return tok.encode(&text);
    }
    let marked: Vec<ChatMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| ChatMessage {
            content: placeholder(i),
            ..m.clone()
        })
        .collect();
    let skeleton = render(&marked)?;
    for trim in [false, true] {
        let Some(parts) = fill_skeleton(&skeleton, messages, trim) else {
            continue;
        };
        let joined: String = parts.iter().map(|(_, t)| *t).collect();
        if joined != text {
            continue;
        }
        let mut ids = Vec::new();
        for (is_content, part) in parts {
            if is_content {
                ids.extend(tok.encode_inert(part)?);
            } else {
                ids.extend(tok.encode(part)?);
            }
        }
        return Ok(ids);
    }
    let (i, special) = messages
        .iter()
        .enumerate()
        .find_map(|(i, m)| tok.first_marker(&m.content).map(|s| (i, s)))
        .expect("a content with a special token");
    Err(Error::invalid(
        OP,
        format!("messages[{i}].content"),
        "text without special tokens, for a chat template that changes content",
        format!("the special token {special:?}"),
    ))
}

/// Private-use delimiters around a message's index: text no real template writes.
const OPEN: char = '\u{F0000}';
const CLOSE: char = '\u{F0001}';

fn placeholder(i: usize) -> String {
    format!("{OPEN}{i}{CLOSE}")
}

/// The skeleton cut into markup (`false`) and message contents (`true`) put back where
/// their placeholders are; None if a placeholder is malformed or names no message.
fn fill_skeleton<'a>(
    skeleton: &'a str,
    messages: &'a [ChatMessage],
    trim: bool,
) -> Option<Vec<(bool, &'a str)>> {
    let mut parts = Vec::new();
    let mut rest = skeleton;
    while let Some(start) = rest.find(OPEN) {
        parts.push((false, &rest[..start]));
        let after = &rest[start + OPEN.len_utf8()..];
        let end = after.find(CLOSE)?;
        let content = &messages.get(after[..end].parse::<usize>().ok()?)?.content;
        parts.push((true, if trim { content.trim() } else { content }));
        rest = &after[end + CLOSE.len_utf8()..];
    }
    parts.push((false, rest));
    parts.retain(|(_, t)| !t.is_empty());
    Some(parts)
}

/// The `default` entry of a named-template list (HF's multi-template form).
fn default_of(list: &[serde_json::Value]) -> Result<String> {
    list.iter()
        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
        .and_then(|t| t.get("template"))
        .and_then(|t| t.as_str())
        .map(String::from)
        .ok_or_else(|| {
            Error::invalid(
                OP,
                "tokenizer_config.json field `chat_template`",
                "a template named `default` in the list",
                format!("{} template(s), none named `default`", list.len()),
            )
        })
}

/// minijinja's message, with the template line when it knows one.
fn describe(e: &minijinja::Error) -> String {
    let mut s = match e.detail() {
        Some(detail) => detail.to_string(),
        None => e.to_string(),
    };
    if let Some(line) = e.line() {
        s.push_str(&format!(" (template line {line})"));
    }
    s
}

/// HF's `raise_exception(message)`: the template refuses its input.
fn raise_exception(message: String) -> std::result::Result<minijinja::Value, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        message,
    ))
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`:
/// Python's `json.dumps`, which neither HTML-escapes (minijinja's built-in does) nor drops
/// the space after `,` and `:`, and keeps a dict's keys in insertion order (minijinja's
/// `preserve_order`).
fn tojson(
    value: minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let bad = |e: serde_json::Error| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
    };
    let mut out = Vec::new();
    match indent {
        Some(n) => {
            let pad = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            serde::Serialize::serialize(&value, &mut ser).map_err(bad)?;
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonJson);
            serde::Serialize::serialize(&value, &mut ser).map_err(bad)?;
        }
    }
    kwargs.assert_all_used()?;
    Ok(minijinja::Value::from_safe_string(
        String::from_utf8(out).expect("serde_json writes UTF-8"),
    ))
}

/// `json.dumps`' default separators: `", "` and `": "`.
struct PythonJson;

/// `", "` before every item but the first.
fn separate<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for PythonJson {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separate(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separate(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
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
