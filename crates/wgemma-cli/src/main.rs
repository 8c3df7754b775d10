//! `wgemma`: the command-line front end. Thin: parsing, printing, and blocking on the
//! library's async calls at this edge.

mod artifact_file;
mod bench;
mod bench_spec;
mod convert;
mod demo;
mod generate;
mod info;
mod inspect;
mod inspect_gguf;
mod load;
mod load_cmd;
mod model_dir;
mod ops;
mod serve;
mod serve_answer;
mod serve_api;
mod serve_endpoints;
mod serve_fields;
mod serve_metrics;
mod serve_response;
mod serve_structured;
mod serve_worker;
mod signals;
mod synth;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "wgemma", version, about = "Gemma 4 on WebGPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the adapter, backend, limits, features and the shader registry.
    Info(info::InfoArgs),
    /// Check every operator against its CPU reference on this adapter, or time them.
    Ops(ops::OpsArgs),
    /// Print the logits of a prompt (JSON).
    Logits(generate::LogitsArgs),
    /// Generate text or tokens after a prompt.
    Generate(generate::GenerateArgs),
    /// Prefill and decode speed on a synthetic model of real shapes or a checkpoint.
    Bench(bench::BenchArgs),
    /// MTP speculative decoding on a synthetic target + assistant: plain vs speculative
    /// greedy, checked identical (no download).
    Demo(demo::DemoArgs),
    /// Convert a checkpoint directory or a GGUF file (and its assistant) into one artifact
    /// file of GPU-layout weights with a manifest.
    Convert(convert::ConvertArgs),
    /// Print an artifact's manifest, sizes, census and tensors and verify its checksums; or
    /// a GGUF file's architecture, config, tensor types and how each loads.
    Inspect(inspect::InspectArgs),
    /// Load a model (directory or artifact) and report load time and peak memory.
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
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Where SIGPIPE cannot be restored (not Unix), a broken pipe still ends quietly.
        Err(e) if is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The Vulkan loader prints an error for every instance when this is unset (headless
    // machines, CI); it is harmless, so give it a value rather than alarm the user.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    match cli.command {
        Command::Info(args) => info::run(args),
        Command::Ops(args) => ops::run(args),
        Command::Logits(args) => generate::run_logits(args),
        Command::Generate(args) => generate::run_generate(args),
        Command::Bench(args) => bench::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Load(args) => load_cmd::run(args),
        Command::Serve(args) => serve::run(args),
        Command::SynthCheckpoint(args) => synth::run(args),
    }
}
