//! `wgemma`: the command-line front end. Thin: parsing, printing, and blocking on the
//! library's async calls at this edge.

mod args;
mod commands;
mod files;
mod gpu_args;
mod habits;
mod load;
mod output;
mod progress;
mod signals;

use clap::{Parser, Subcommand};
use commands::{
    bench, chat, convert, demo, generate, info, inspect, load as load_cmd, ops, serve, synth,
};

#[derive(Parser)]
#[command(
    name = "wgemma",
    version,
    about = "Gemma 4 on WebGPU",
    after_help = "Start with `wgemma demo`; `wgemma COMMAND --help` lists a command's options."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Precision of the Q4 and Q8_0 matvecs' activations: `int8` quantises each block of 32 and
    /// runs integer dot products (every batch size computes a row the same way; ~0.3%
    /// error per product; Q4 prefill without tensor cores runs the int8 GEMM, which rounds
    /// rows alike and sums them in another order), `f32` keeps them exact, `auto` is int8 on
    /// a GPU with native packed integer dot products (Vulkan 1.3, Chrome), else f32.
    #[arg(
        long,
        global = true,
        default_value = "auto",
        value_name = "auto|f32|int8"
    )]
    activations: wgemma::gpu::ActivationChoice,
}

#[derive(Subcommand)]
enum Command {
    /// Print the adapter, backend, limits, features and the shader registry.
    Info(info::InfoArgs),
    /// Check every operator against its CPU reference on this adapter, or time them.
    Ops(ops::OpsArgs),
    /// Print the logits of a prompt (JSON).
    Logits(generate::LogitsArgs),
    /// Generate text after a prompt, streamed (or tokens after token ids).
    Generate(generate::GenerateArgs),
    /// Talk with a chat-tuned model: multi-turn, in its chat template, streamed; Ctrl-C
    /// stops a reply, /exit (or Ctrl-C at the prompt) quits.
    Chat(chat::ChatArgs),
    /// Prefill, decode and speculative speed, as llama-bench measures them (warm-up, -r
    /// runs, mean ± sd), on a model or a synthetic one of real shapes.
    #[command(after_long_help = bench::LAB_SWITCHES)]
    Bench(bench::BenchArgs),
    /// The trained pair shipped in models/: streamed text, then plain vs MTP speculative
    /// decoding timed warmed up, outputs checked identical (no download).
    Demo(demo::DemoArgs),
    /// Convert a checkpoint directory or a GGUF file (and its assistant) into one artifact
    /// file of GPU-layout weights with a manifest.
    Convert(convert::ConvertArgs),
    /// Print an artifact's manifest, sizes, census and tensors and verify its checksums; or
    /// a GGUF file's architecture, config, tensor types and how each loads.
    Inspect(inspect::InspectArgs),
    /// Load a model (checkpoint directory, GGUF file or artifact) and report load time and
    /// peak memory.
    Load(load_cmd::LoadArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (chat completions, completions,
    /// models, health, Prometheus metrics) on 127.0.0.1.
    Serve(serve::ServeArgs),
    /// Write a synthetic checkpoint directory of a real shape (bf16, HF layout) for load
    /// measurements.
    SynthCheckpoint(synth::SynthArgs),
}

fn main() -> std::process::ExitCode {
    // A closed stdout (`wgemma info | head -1`) ends the program quietly, as it does for
    // every Unix filter: `print!` would panic and `write!` would report an error instead.
    signals::default_sigpipe();
    output_errors_are_errors();
    match run().and_then(|()| {
        // `print!` output still in stdout's buffer would be flushed at exit with any error
        // ignored: a full disk would lose it silently.
        std::io::Write::flush(&mut std::io::stdout())
            .map_err(|e| anyhow::Error::new(e).context("writing to stdout"))
    }) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Where SIGPIPE cannot be restored (not Unix), a broken pipe still ends quietly.
        Err(e) if is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One readable chain ("what failed: why"), never a backtrace: these are the
            // user's errors, and `{e:?}` printed one whenever RUST_BACKTRACE was set.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `println!` and `eprintln!` panic when the write fails (`> /dev/full`): that is an
/// output error, not a bug, so it ends the program with one line and exit code 1 instead of
/// a panic message and 101. Every other panic keeps the previous hook.
fn output_errors_are_errors() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(cause) = message.strip_prefix("failed printing to stdout: ") {
            // stderr may still work; if it does not there is nowhere left to say it.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("error: writing to stdout: {cause}\n").as_bytes(),
            );
            std::process::exit(1);
        }
        if message.starts_with("failed printing to stderr: ") {
            std::process::exit(1);
        }
        previous(info);
    }));
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run() -> anyhow::Result<()> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let words: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into()).collect();
    // A llama.cpp flag that means something else here: what to do instead, not the help.
    if let Some(hint) = habits::hint(&words) {
        anyhow::bail!("{hint}");
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        // `--help`, `--version` and `help` print to stdout: clap's `exit` ignores a failed
        // write (`> /dev/full` exited 0 with nothing written), so their output is checked.
        Err(e) if !e.use_stderr() => {
            return e
                .print()
                .and_then(|()| std::io::Write::flush(&mut std::io::stdout()))
                .map_err(|io| anyhow::Error::new(io).context("writing to stdout"));
        }
        Err(e) => e.exit(),
    };
    // The Vulkan loader prints an error for every instance when this is unset (headless
    // machines, CI); it is harmless, so give it a value rather than alarm the user.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    gpu_args::set_activations(cli.activations);
    match cli.command {
        Command::Info(args) => info::run(args),
        Command::Ops(args) => ops::run(args),
        Command::Logits(args) => generate::run_logits(args),
        Command::Generate(args) => generate::run_generate(args),
        Command::Chat(args) => chat::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Load(args) => load_cmd::run(args),
        Command::Serve(args) => serve::run(args),
        Command::SynthCheckpoint(args) => synth::run(args),
    }
}
