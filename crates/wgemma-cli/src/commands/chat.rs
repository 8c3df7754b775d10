//! `wgemma chat`: an interactive, multi-turn conversation in the model's chat template,
//! each reply streamed as it is generated. Lines come from standard input (a terminal or a
//! pipe); `/exit` (or end of input) ends it, `/clear` starts over, and Ctrl-C stops the
//! reply being written (at the prompt it ends the program).

use super::generate::{load_session, warn_without_chat_template};
use crate::args::{check_budget, no_penalty_when_drafting, DraftArgs, ModelArgs, SamplingArgs};
use crate::signals::StopReplyOnInterrupt;
use anyhow::{bail, Result};
use clap::Args;
use std::io::{BufRead, IsTerminal as _, Read as _, Write as _};
use wgemma::session::{ChatMessage, GenerateRequest, Session, TokenEvent};

#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A system prompt at the start of the conversation.
    #[arg(long)]
    system: Option<String>,
    /// Tokens per reply at most.
    #[arg(
        short = 'n',
        long,
        visible_alias = "n-predict",
        default_value_t = 512,
        value_name = "N"
    )]
    max_new_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    draft: DraftArgs,
    /// Print each reply's stats (tokens, speed) on standard error.
    #[arg(long)]
    stats: bool,
}

/// What a line typed at the prompt asks for.
#[derive(Debug, PartialEq)]
enum Line<'a> {
    Exit,
    Clear,
    Empty,
    Unknown(&'a str),
    Say(&'a str),
}

fn parse_line(line: &str) -> Line<'_> {
    let t = line.trim();
    match t {
        "/exit" | "/quit" | "/bye" => Line::Exit,
        "/clear" => Line::Clear,
        "" => Line::Empty,
        _ if t.starts_with('/') && !t.contains(char::is_whitespace) => Line::Unknown(t),
        _ => Line::Say(t),
    }
}

pub fn run(args: ChatArgs) -> Result<()> {
    args.model.request()?;
    args.draft.check()?;
    let mut sampling = args.sampling.resolve(true)?;
    if args.draft.assistant.is_some() {
        no_penalty_when_drafting(&mut sampling, &args.sampling);
    }
    // A message is at least one token.
    check_budget(1, args.max_new_tokens, args.model.context)?;
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("loading {} ...", args.model.model.display());
    }
    let (mut session, load_ms) = load_session(&args.model, &args.draft)?;
    if session.tokenizer().is_none() {
        bail!(
            "{}: expected a model with a tokenizer to chat with, found none",
            args.model.model.display()
        );
    }
    warn_without_chat_template(&session)?;
    // The model's context: --context, or the model's positions when it asked for more.
    let context = session.model_info()?.context;
    check_budget(1, args.max_new_tokens, context)?;
    let interrupt = StopReplyOnInterrupt::install()?;
    if interactive {
        eprintln!(
            "loaded in {:.1} s. Type a message and press Enter; Ctrl-C stops a reply, /clear \
             starts over, /exit or Ctrl-D (Ctrl-C at the prompt) quits.",
            load_ms / 1e3
        );
    }
    let start: Vec<ChatMessage> = args
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s))
        .collect();
    let mut messages = start.clone();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut turn = 0u64;
    loop {
        if interactive {
            print!("> ");
            std::io::stdout().flush()?;
        }
        let line = match next_line(&mut input)? {
            None => break,
            Some(Ok(line)) => line,
            // One bad line is that line's error; the conversation goes on.
            Some(Err(why)) => {
                eprintln!("error: {why}");
                continue;
            }
        };
        match parse_line(&line) {
            Line::Exit => break,
            Line::Clear => {
                messages.clone_from(&start);
                eprintln!("(conversation cleared)");
                continue;
            }
            Line::Empty => continue,
            Line::Unknown(cmd) => {
                eprintln!("unknown command {cmd}: /clear starts over, /exit quits");
                continue;
            }
            Line::Say(text) => messages.push(ChatMessage::new("user", text)),
        }
        if let Err(e) = fit_history(&session, &mut messages, start.len(), &args, context) {
            eprintln!("error: {e:#}");
            messages.pop();
            continue;
        }
        let p = sampling.params;
        let request = GenerateRequest {
            messages: Some(messages.clone()),
            max_new_tokens: args.max_new_tokens,
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            // Each turn its own draws, the whole conversation repeatable from one seed.
            seed: p.seed.wrapping_add(turn),
            repeat_penalty: p.repeat_penalty,
            speculative: args.draft.assistant.is_some(),
            draft_tokens: args.draft.draft_tokens,
            adaptive_draft: !args.draft.fixed_draft,
            ..GenerateRequest::default()
        };
        let mut on_token = |t: &TokenEvent| {
            if let Some(piece) = &t.text {
                print!("{piece}");
                let _ = std::io::stdout().flush();
            }
            !interrupt.stop_requested()
        };
        interrupt.start_reply();
        let out = pollster::block_on(session.generate(&request, &mut on_token));
        interrupt.end_reply();
        let out = out?;
        println!("{}", out.unstreamed_text);
        if out.stopped_early {
            eprintln!(
                "(reply stopped by Ctrl-C; the conversation goes on: /exit, Ctrl-D or Ctrl-C \
                 at the prompt quits)"
            );
        }
        // A stopped reply stays as far as it was shown.
        let reply = out.text.unwrap_or_default();
        messages.push(ChatMessage::new("assistant", reply.trim()));
        if args.stats {
            eprintln!("[{}]", out.loop_stats.summary());
        }
        turn += 1;
    }
    Ok(())
}

/// Drops the oldest turns (never the system prompt) until the conversation and a full
/// reply fit the KV cache.
fn fit_history(
    session: &Session,
    messages: &mut Vec<ChatMessage>,
    keep: usize,
    args: &ChatArgs,
    context: usize,
) -> Result<()> {
    loop {
        let request = GenerateRequest {
            messages: Some(messages.clone()),
            ..GenerateRequest::default()
        };
        let len = session.prompt_ids(&request)?.len();
        if len + args.max_new_tokens <= context {
            return Ok(());
        }
        // The last message is the user's new one: keep at least that.
        if messages.len() <= keep + 1 {
            bail!(
                "the message: expected at most {} tokens (--context {context} less \
                 --max-new-tokens {}), found {len}",
                context.saturating_sub(args.max_new_tokens),
                args.max_new_tokens
            );
        }
        messages.remove(keep);
        eprintln!("(the conversation outgrew --context: its oldest message is dropped)");
    }
}

/// Bytes one chat line may hold (a line of /dev/zero ends here).
const MAX_LINE_BYTES: usize = 1 << 20;

/// The next line of `input` without its line end: None at the end of input, an error
/// message for a line that is not UTF-8 or passes [`MAX_LINE_BYTES`] (its bytes are
/// skipped to the next line end).
fn next_line(input: &mut impl BufRead) -> std::io::Result<Option<Result<String, String>>> {
    let mut bytes = Vec::new();
    let n = input
        .by_ref()
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut bytes)?;
    if n == 0 {
        return Ok(None);
    }
    if bytes.len() > MAX_LINE_BYTES && !bytes.ends_with(b"\n") {
        // The rest of the long line, read in bounded pieces and dropped.
        loop {
            let mut rest = Vec::new();
            let m = input.by_ref().take(1 << 16).read_until(b'\n', &mut rest)?;
            if m == 0 || rest.ends_with(b"\n") {
                break;
            }
        }
        return Ok(Some(Err(format!(
            "expected a line of at most {MAX_LINE_BYTES} bytes, found a longer one (skipped)"
        ))));
    }
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(Some(String::from_utf8(bytes).map_err(|e| {
        format!(
            "expected a line of UTF-8 text, found invalid bytes at byte {} (skipped)",
            e.utf8_error().valid_up_to()
        )
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_commands() {
        assert_eq!(parse_line("/exit\n"), Line::Exit);
        assert_eq!(parse_line("  /quit "), Line::Exit);
        assert_eq!(parse_line("/clear"), Line::Clear);
        assert_eq!(parse_line("   "), Line::Empty);
        assert_eq!(parse_line("/help"), Line::Unknown("/help"));
        // A message may start with a slash.
        assert_eq!(
            parse_line("/etc/hosts is a file"),
            Line::Say("/etc/hosts is a file")
        );
        assert_eq!(parse_line(" hello \n"), Line::Say("hello"));
    }

    #[test]
    fn a_bad_line_is_that_lines_error_and_the_next_one_reads() {
        // Hostile input round 4: one non-UTF-8 line ended the chat session.
        let mut long = vec![b'a'; MAX_LINE_BYTES + 10];
        long.push(b'\n');
        let mut input: Vec<u8> = b"hi\r\n\xff\xfe oops\n".to_vec();
        input.extend(long);
        input.extend(b"last");
        let mut r = std::io::Cursor::new(input);
        assert_eq!(next_line(&mut r).unwrap(), Some(Ok("hi".into())));
        let bad = next_line(&mut r).unwrap().unwrap().unwrap_err();
        assert!(bad.contains("UTF-8") && bad.contains("byte 0"), "{bad}");
        let long = next_line(&mut r).unwrap().unwrap().unwrap_err();
        assert!(long.contains("at most"), "{long}");
        assert_eq!(next_line(&mut r).unwrap(), Some(Ok("last".into())));
        assert_eq!(next_line(&mut r).unwrap(), None);
    }
}
