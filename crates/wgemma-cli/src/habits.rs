//! llama.cpp's flags that mean something else here, or nothing: clap would read them as
//! clusters of short flags (`-hf` as `-h -f`, answered with the help and exit status 0;
//! `-fa` as `-f a`) or refuse them without a word on why, so they are caught before it
//! parses, with a line naming what to do instead. No flag of wgemma's is among them, and
//! clap takes no value that starts with `-`, so a caught word is never a value.

/// llama.cpp's flags, what they are there, and what to do here.
const HABITS: &[(&[&str], &str)] = &[
    (
        &[
            "-hf",
            "-hfr",
            "--hf-repo",
            "-hff",
            "--hf-file",
            "-hfd",
            "--hf-repo-draft",
        ],
        "llama.cpp's Hugging Face download; wgemma downloads nothing: fetch the model first \
         (`hf download google/gemma-4-e2b-it --local-dir gemma-4-e2b-it`) and pass \
         `-m gemma-4-e2b-it` (README.md, \"Real models\", has the assistant's download too)",
    ),
    (
        &["-ngl", "--n-gpu-layers", "--gpu-layers", "-ngld"],
        "llama.cpp's GPU layer count; every layer runs on the GPU here: drop it",
    ),
    (
        &["-fa", "--flash-attn"],
        "llama.cpp's flash attention switch; attention is always fused here: drop it",
    ),
    (
        &["-cnv", "--conversation", "-i", "--interactive", "-if"],
        "llama.cpp's conversation mode; here it is a command of its own: `wgemma chat -m MODEL`",
    ),
    (
        &["-md", "--model-draft"],
        "llama.cpp's draft model; the drafter here is the model's MTP assistant: \
         `--assistant DIR|FILE`",
    ),
    (
        &["-b", "--batch-size", "-ub", "--ubatch-size"],
        "llama.cpp's batch size; here `--prefill-chunk N` sets the rows of a prefill forward",
    ),
    (
        &["-ctk", "--cache-type-k", "-ctv", "--cache-type-v"],
        "llama.cpp's KV cache type; the KV cache is f32 here: drop it",
    ),
    (
        &["--mlock", "--no-mmap", "--numa"],
        "llama.cpp's memory placement; files are mapped and their pages released as the \
         weights move to the GPU: drop it",
    ),
];

/// The hint for the first llama.cpp flag among `args` (before any `--`), if any: "`FLAG`
/// is ...; what to do".
pub fn hint(args: &[String]) -> Option<String> {
    args.iter().take_while(|a| *a != "--").find_map(|arg| {
        let flag = arg.split('=').next().unwrap_or(arg);
        HABITS
            .iter()
            .find(|(flags, _)| flags.contains(&flag))
            .map(|(_, what)| format!("`{flag}` is {what}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn llama_cpp_flags_get_their_hint() {
        let a = args(&["wgemma", "generate", "-hf", "google/gemma", "-p", "hi"]);
        assert!(hint(&a)
            .unwrap()
            .starts_with("`-hf` is llama.cpp's Hugging Face"));
        let a = args(&["wgemma", "generate", "--n-gpu-layers=99"]);
        assert!(hint(&a).unwrap().contains("drop it"));
        // The help itself, a word after `--` and wgemma's own flags are not habits.
        assert_eq!(hint(&args(&["wgemma", "-h"])), None);
        assert_eq!(hint(&args(&["wgemma", "generate", "--", "-fa"])), None);
        assert_eq!(hint(&args(&["wgemma", "chat", "-m", "x", "-c", "9"])), None);
    }
}
