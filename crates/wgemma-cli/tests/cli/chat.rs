//! `wgemma chat` driven through standard input: multi-turn in the model's chat format,
//! replies streamed to stdout, `/clear` and `/exit`, and the warning for a model without a
//! chat template (the shipped pair is not chat-tuned).

use crate::common;
use std::process::Output;

const PAIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/kjv-pair.wgemma");

fn chat(args: &[&str], stdin: &str) -> Output {
    let mut all = vec!["chat", "-m", PAIR, "-n", "6", "--greedy", "--stats"];
    all.extend_from_slice(args);
    common::wgemma_with(&all, stdin, &[])
}

/// The prompt token counts of each reply's stats line.
fn prompt_tokens(stderr: &str) -> Vec<usize> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("[prompt "))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn chat_holds_a_conversation_through_stdin() {
    let out = chat(
        &[],
        "And Jesus said unto them,\n\nAnd the LORD spake\n/exit\nnever read\n",
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("no chat template"), "{stderr}");
    // Two replies (the empty line is skipped, nothing after /exit is read), streamed to
    // stdout.
    let turns = prompt_tokens(&stderr);
    assert_eq!(turns.len(), 2, "{stderr}");
    // The second turn's prompt holds the first exchange.
    assert!(turns[1] > turns[0] + 6, "{turns:?}");
    assert!(stdout.split_whitespace().count() >= 2, "{stdout:?}");
}

#[test]
fn clear_starts_over_and_end_of_input_ends() {
    let out = chat(
        &[],
        "And Jesus said unto them,\n/clear\nAnd Jesus said unto them,\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("conversation cleared"), "{stderr}");
    // After /clear the same message makes the same prompt.
    let turns = prompt_tokens(&stderr);
    assert_eq!(turns.len(), 2, "{stderr}");
    assert_eq!(turns[0], turns[1]);
    // An unknown command is answered, not sent to the model.
    let out = chat(&[], "/help\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("unknown command /help"),
        "{stderr}"
    );
    assert!(prompt_tokens(&stderr).is_empty(), "{stderr}");
}
