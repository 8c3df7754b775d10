//! Progress on stderr: indicatif bars on a terminal, a plain line per phase otherwise, and
//! the display of a model load driven by the front door's [`LoadEvent`]s.

use std::cell::OnceCell;
use std::io::IsTerminal;
use std::time::Instant;
use wgemma::session::{LoadEvent, Opened};

pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// A progress bar over bytes.
pub fn bytes_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Progress of one load, in bytes of its source: a bar on a terminal, else one line per
/// phase on stderr.
pub struct LoadProgress {
    bar: Option<indicatif::ProgressBar>,
    what: String,
    start: Instant,
}

impl LoadProgress {
    pub fn new(what: &str, total_bytes: u64) -> LoadProgress {
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| bytes_bar(total_bytes, what));
        LoadProgress {
            bar,
            what: what.to_string(),
            start: Instant::now(),
        }
    }

    /// `bytes` more of the source are done.
    pub fn add(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// A phase finished: a line when no bar is drawn.
    pub fn phase(&self, line: &str) {
        if self.bar.is_none() {
            eprintln!(
                "{}: {line} ({:.1} s)",
                self.what,
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    pub fn finish(&self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.phase(line);
    }
}

pub fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

/// What a model load shows, from the moment its source is opened (nothing before: a
/// source refused while parsing draws no bar).
enum Shown {
    /// Bytes of a file or directory, with a line per phase off a terminal.
    Bytes(LoadProgress),
    /// Load steps of a synthetic model ("building").
    Steps(indicatif::ProgressBar),
}

/// The display of one model load from `path`.
pub struct LoadDisplay {
    path: String,
    shown: OnceCell<Shown>,
}

impl LoadDisplay {
    pub fn new(path: String) -> LoadDisplay {
        LoadDisplay {
            path,
            shown: OnceCell::new(),
        }
    }

    pub fn event(&self, event: LoadEvent) {
        match event {
            LoadEvent::Opened(opened) => self.opened(opened),
            LoadEvent::Steps { done, total } => {
                if let Some(Shown::Steps(bar)) = self.shown.get() {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                }
            }
            LoadEvent::IgnoredTensors(unread) => {
                eprintln!("warning: --allow-extra-tensors: ignoring {unread}");
            }
            LoadEvent::Converted(line) => eprintln!("{line}"),
            LoadEvent::ContextClamped { asked, positions } => eprintln!(
                "warning: --context {asked} is past the model's {positions} positions \
                 (max_position_embeddings): using --context {positions}"
            ),
        }
    }

    fn opened(&self, opened: Opened) {
        let path = &self.path;
        let (total, line) = match opened {
            Opened::Synthetic { layers } => {
                let _ = self
                    .shown
                    .set(Shown::Steps(progress_bar(layers as u64 + 2, "building")));
                return;
            }
            Opened::Checkpoint { shards, bytes } => (
                bytes,
                format!("opened {path} ({shards} shard(s), {:.2} GB)", gb(bytes)),
            ),
            Opened::Gguf {
                version,
                tensors,
                bytes,
            } => (
                bytes,
                format!(
                    "opened {path} (GGUF v{version}, {tensors} tensors, {:.2} GB)",
                    gb(bytes)
                ),
            ),
            Opened::Artifact { bytes, quant, .. } => (
                bytes,
                format!("opened {path} ({:.2} GB, {quant})", gb(bytes)),
            ),
        };
        let progress = LoadProgress::new("loading", total);
        progress.phase(&line);
        let _ = self.shown.set(Shown::Bytes(progress));
    }

    /// `bytes` more of the source are uploaded.
    pub fn released(&self, bytes: u64) {
        if let Some(Shown::Bytes(progress)) = self.shown.get() {
            progress.add(bytes);
        }
    }

    /// The load is done: `line` says what it left on the GPU (a synthetic build's bar
    /// is cleared without one).
    pub fn finish(&self, line: impl FnOnce() -> String) {
        match self.shown.get() {
            Some(Shown::Bytes(progress)) => progress.finish(&line()),
            Some(Shown::Steps(bar)) => bar.finish_and_clear(),
            None => {}
        }
    }
}

/// The host's memory in bytes (Linux `MemTotal`; None elsewhere), for the size checks
/// that run before a load allocates.
pub fn host_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident set size of this process so far, in MiB (Linux `VmHWM`; None elsewhere).
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
