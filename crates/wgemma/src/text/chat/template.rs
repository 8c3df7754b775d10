//! A checkpoint's Jinja chat template ([`ChatTemplate`]) rendered with minijinja as HF's
//! `apply_chat_template` renders it, on a budget scaled to the conversation
//! ([`RenderBudget`]).

use super::hf_jinja::{raise_exception, tojson};
use super::{check_messages, ChatMessage, OP};
use crate::error::{Error, Result};
use crate::text::tokenizer::{json_kind, BOS};
use crate::text::tools::{render_declaration, ToolDeclaration};
use serde_json::Map;

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
    /// [`crate::text::tokenizer::Tokenizer::mark_format_tokens`]).
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
