//! `wgemma bench`'s tests as llama-bench runs and prints them: a warm-up and N timed runs
//! per test, one table line each (mean ± standard deviation).

use anyhow::Result;
use wgemma::session::bench::suite::{finished, started};
pub use wgemma::session::bench::timing::TestRow;
use wgemma::session::bench::timing::{Samples, TimedRuns};

/// Runs `once` (tokens/s of one run) as [`TimedRuns`] says (a warm-up of at least
/// `WARM_UP`, then `repetitions` timed runs), with a progress line on stderr before and
/// after.
pub fn timed(
    test: &str,
    repetitions: usize,
    mut once: impl FnMut() -> Result<f64>,
) -> Result<Samples> {
    eprintln!("{}", started(test, repetitions));
    let mut runs = TimedRuns::new(repetitions);
    while runs.wanted() {
        runs.record(once()?);
    }
    let samples = runs.samples();
    eprintln!("{}", finished(test, &samples));
    Ok(samples)
}

/// llama-bench's table: one line per test, mean ± standard deviation.
pub fn print_table<'a>(
    model: &str,
    dtype: &str,
    rows: impl IntoIterator<Item = &'a TestRow>,
    tg: &str,
) {
    let head = ["model", "dtype", "test", "t/s", &format!("vs {tg}")];
    let cells: Vec<[String; 5]> = rows
        .into_iter()
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
