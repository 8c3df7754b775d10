//! `wgemma chat` driven through standard input: multi-turn in the model's chat format,
//! replies streamed to stdout, `/clear` and `/exit`, and the warning for a model without a
//! chat template (the shipped pair is not chat-tuned).

use crate::common;
use std::io::Read;
use std::process::Output;
use std::sync::mpsc::Receiver;

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

/// Bytes a pipe of the child sends, one message per read, until it closes.
fn forward(mut pipe: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads `rx` into `seen` until `seen` holds `count` of `needle`; panics with what came
/// when the pipe closes first.
fn wait_for(rx: &Receiver<Vec<u8>>, seen: &mut String, needle: &str, count: usize) {
    while seen.matches(needle).count() < count {
        match rx.recv() {
            Ok(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => panic!("the chat ended before {count} x {needle:?}:\n{seen}"),
        }
    }
}

/// Reads what `pipe` holds now, without waiting for more.
#[cfg(unix)]
fn drain(pipe: &mut std::process::ChildStdout) {
    use std::os::fd::AsRawFd as _;
    let fd = pipe.as_raw_fd();
    let set = |nonblocking: bool| {
        // SAFETY: F_GETFL/F_SETFL on a file descriptor this process owns.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            let flags = match nonblocking {
                true => flags | libc::O_NONBLOCK,
                false => flags & !libc::O_NONBLOCK,
            };
            libc::fcntl(fd, libc::F_SETFL, flags);
        }
    };
    set(true);
    let mut buf = [0u8; 4096];
    while let Ok(1..) = pipe.read(&mut buf) {}
    set(false);
}

fn interrupt(child: &std::process::Child) {
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_reply_and_the_conversation_goes_on() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    // Replies long enough to be mid-stream when Ctrl-C comes (bounded: -n).
    let mut child = Command::new(env!("CARGO_BIN_EXE_wgemma"))
        .args(["chat", "-m", PAIR, "-n", "1000", "--greedy", "--stats"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let stderr = forward(child.stderr.take().unwrap());
    let mut err = String::new();
    for (turn, message) in ["And Jesus said unto them,", "And the LORD spake"]
        .into_iter()
        .enumerate()
    {
        writeln!(stdin, "{message}").unwrap();
        // The reply's first bytes: it is streaming. Interrupt it; it ends with its stats.
        assert!(stdout.read(&mut [0u8; 64]).unwrap() > 0, "{err}");
        interrupt(&child);
        wait_for(&stderr, &mut err, "(reply stopped by Ctrl-C", turn + 1);
        wait_for(&stderr, &mut err, "[prompt ", turn + 1);
        // The reply's text was written before its stats: all of it is in the pipe now.
        drain(&mut stdout);
    }
    // Both replies were cut short, and the second turn's prompt held the first exchange.
    let turns = prompt_tokens(&err);
    assert_eq!(turns.len(), 2, "{err}");
    assert!(turns[1] > turns[0] + 4, "{turns:?}\n{err}");
    // Ctrl-C at the prompt ends the program, with the shell's code for an interrupt.
    interrupt(&child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
}
