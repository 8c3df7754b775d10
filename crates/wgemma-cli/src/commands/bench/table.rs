//! `wgemma bench`'s tests as llama-bench runs and prints them: a warm-up and N timed runs
//! per test, one table line each (mean ± standard deviation).

use crate::timing::{Comparison, Samples};
use anyhow::Result;
use wgemma::gpu::{GemmCeiling, GpuContext};

/// One row of the table: a test and its timed runs.
pub struct TestRow {
    pub test: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub tokens_per_s: Samples,
    /// Against the plain decode test (speculative rows).
    pub vs_tg: Option<Comparison>,
}

impl TestRow {
    pub fn json(&self) -> serde_json::Value {
        let mut v = self.tokens_per_s.json();
        v["test"] = self.test.clone().into();
        v["n_prompt"] = self.n_prompt.into();
        v["n_gen"] = self.n_gen.into();
        if let Some(c) = &self.vs_tg {
            v["speedup"] = c.ratio.into();
            v["measurable"] = c.measurable.into();
        }
        v
    }
}

/// The GEMM family prefill runs on this context: the best the device has under the
/// ceiling (`--gemm`), as the Q4 prefill routes choose it.
pub fn gemm_family(ctx: &GpuContext) -> &'static str {
    if ctx.has_coop_16x16_f16() {
        "tensor-core GEMM (cooperative matrices)"
    } else if ctx.gemm >= GemmCeiling::F16 && ctx.has(wgpu::Features::SHADER_F16) {
        "f16-tile GEMM"
    } else {
        "f32 GEMM"
    }
}

/// The tokens/s `pick` reads from each repetition's runs at acceptance rate `i`.
pub fn samples_at(
    reps: &[Vec<super::spec::RunsAtRate>],
    i: usize,
    pick: impl Fn(&super::spec::RunsAtRate) -> Option<f64>,
) -> Option<Samples> {
    let values: Vec<f64> = reps.iter().filter_map(|r| pick(&r[i])).collect();
    (!values.is_empty()).then_some(Samples { values })
}

/// How long a test's warm-up runs at least. A GPU that idled while the model loaded runs
/// at low clocks until it has been busy for a while: on the H100, pp512 after a single
/// warm-up run measured 9,197 ± 5,249 t/s (one slow run of three) and 11,982 ± 279 when
/// the clocks were already up. Repeating the warm-up for this long makes the first
/// process's figures those of the next ones.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(1500);

/// Runs `once` (tokens/s of one run) as a warm-up, repeated until [`WARM_UP`] has passed,
/// then `repetitions` times, with a progress line on stderr before and after.
pub fn timed(
    test: &str,
    repetitions: usize,
    mut once: impl FnMut() -> Result<f64>,
) -> Result<Samples> {
    eprintln!("bench: {test}: warm-up and {repetitions} timed runs ...");
    let start = std::time::Instant::now();
    once()?;
    while start.elapsed() < WARM_UP {
        once()?;
    }
    let mut samples = Samples::default();
    for _ in 0..repetitions {
        samples.push(once()?);
    }
    eprintln!("bench: {test}: {} t/s", samples.mean_sd());
    Ok(samples)
}

/// llama-bench's table: one line per test, mean ± standard deviation.
pub fn print_table(model: &str, dtype: &str, rows: &[TestRow], tg: &str) {
    let head = ["model", "dtype", "test", "t/s", &format!("vs {tg}")];
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                model.to_string(),
                dtype.to_string(),
                r.test.clone(),
                r.tokens_per_s.mean_sd(),
                r.vs_tg.map_or(String::new(), |c| {
                    if c.single {
                        format!("x{:.2} (1 run)", c.ratio)
                    } else if c.measurable {
                        format!("x{:.2}", c.ratio)
                    } else {
                        format!("x{:.2} (within spread)", c.ratio)
                    }
                }),
            ]
        })
        .collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .chain([head[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..5).map(width).collect();
    // Text left, numbers right, as llama-bench aligns them.
    let line = |c: &[&str]| {
        let mut s = String::from("|");
        for (i, cell) in c.iter().enumerate() {
            if i >= 3 {
                s += &format!(" {cell:>w$} |", w = widths[i]);
            } else {
                s += &format!(" {cell:<w$} |", w = widths[i]);
            }
        }
        s
    };
    println!("{}", line(&head));
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            if i >= 3 {
                format!("{}:", "-".repeat(w + 1))
            } else {
                "-".repeat(w + 2)
            }
        })
        .collect();
    println!("|{}|", rule.join("|"));
    for c in &cells {
        println!(
            "{}",
            line(&c.iter().map(String::as_str).collect::<Vec<_>>())
        );
    }
}
