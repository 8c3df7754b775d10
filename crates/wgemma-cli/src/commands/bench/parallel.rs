//! `wgemma bench --parallel N`: the aggregate decode throughput of N streams decoding
//! together, plainly (one forward of N rows per step, `Session::step_streams`) and
//! speculatively (each stream drafting k tokens, every stream's verify rows in one forward
//! per step, `Session::step_rounds`), as `wgemma serve --parallel N [--assistant]` runs
//! them. Each stream has its own prompt and KV slot.
//!
//! The speculative runs' drafts are an oracle's while the assistant's draft steps run (its
//! full cost paid), as the oracle rows of the single-stream bench do it (`--acceptance p`: each of the stream's own plain
//! tokens kept with probability p, else a token the target rejects), so acceptance is what
//! was asked whatever the weights; the drafter's full cost is paid. Every speculative run's
//! tokens are checked against the plain run's (`matches_plain`).

use super::table::{print_table, timed, TestRow};
use anyhow::{bail, Context as _, Result};
use std::time::Instant;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::model::assistant::Assistant;
use wgemma::model::target::Model;
use wgemma::session::bench::suite::random_assistant;
use wgemma::session::bench::timing::{compare, Samples};
use wgemma::session::bench::{assistant_shape, FixedRateDrafts};
use wgemma::session::{
    AssistantFrom, DraftSource, GenerateRequest, LoadHooks, OracleDrafts, Session, Stream,
};

/// What a parallel bench runs.
pub struct ParallelBench<'a> {
    pub streams: usize,
    pub prompt_len: usize,
    pub gen: usize,
    pub repetitions: usize,
    pub draft_tokens: usize,
    pub acceptance: &'a [f64],
    pub seed: u64,
    pub model_name: String,
    pub dtype: String,
    pub json: bool,
}

/// The assistant a synthetic target gets: the published assistant's shape with random
/// weights (E2B, E4B), or the demo's echo drafter (tiny).
pub fn synthetic_assistant(session: &Session, seed: u64) -> Result<Option<Assistant>> {
    let state = session.kv_state()?;
    let model = state.model();
    let ctx = session.ctx();
    if let Some(shape) = assistant_shape(model) {
        return Ok(Some(random_assistant(ctx, state, shape, seed)?));
    }
    let tiny = SyntheticShape::Tiny.spec().config;
    let c = &model.spec.config;
    if (tiny.hidden_size, tiny.num_hidden_layers, tiny.vocab_size)
        != (c.hidden_size, c.num_hidden_layers, c.vocab_size)
    {
        return Ok(None);
    }
    let from = AssistantFrom::Synthetic {
        target_seed: seed,
        seed: seed.wrapping_add(1),
    };
    Ok(Some(wgemma::session::load_assistant(
        ctx,
        state,
        from,
        LoadHooks::default(),
    )?))
}

/// Stream i's prompt: `len` token ids from the seed and i.
fn prompt(model: &Model, seed: u64, i: usize, len: usize) -> Vec<u32> {
    let vocab = model.spec.config.vocab_size as u64;
    (0..len as u64)
        .map(|j| ((j.wrapping_mul(2654435761) ^ seed ^ (i as u64 * 7919)) % vocab) as u32)
        .collect()
}

/// One run of every stream to its end: tokens/s of the tokens after each stream's first
/// (decode only: the prefills run before the clock starts), each stream's tokens, and the
/// drafts proposed and accepted.
struct Run {
    tokens_per_s: f64,
    tokens: Vec<Vec<u32>>,
    drafted: usize,
    accepted: usize,
}

fn run_streams(
    session: &mut Session,
    requests: &[GenerateRequest],
    replace: Option<(f64, &[Vec<u32>])>,
) -> Result<Run> {
    let mut streams: Vec<Stream> = Vec::with_capacity(requests.len());
    let mut tokens = Vec::with_capacity(requests.len());
    let vocab = session.model()?.spec.config.vocab_size;
    for (i, r) in requests.iter().enumerate() {
        let (mut stream, first) = pollster::block_on(session.start_stream(r))?;
        if let Some((acceptance, reference)) = replace {
            let mut oracle = FixedRateDrafts::new(acceptance, vocab);
            stream.set_draft_source(DraftSource::Oracle(OracleDrafts {
                reference: reference[i].clone(),
                keep: Box::new(move |k| oracle.keep(k)),
                drafter: true,
            }))?;
        }
        tokens.push(vec![first.id]);
        streams.push(stream);
    }
    let speculative = replace.is_some();
    let start = Instant::now();
    loop {
        let mut live: Vec<(usize, &mut Stream)> = streams
            .iter_mut()
            .enumerate()
            .filter(|(_, s)| s.finish_reason().is_none())
            .collect();
        if live.is_empty() {
            break;
        }
        let mut refs: Vec<&mut Stream> = live.iter_mut().map(|(_, s)| &mut **s).collect();
        let rounds = if speculative {
            pollster::block_on(session.step_rounds(&mut refs))?
        } else {
            pollster::block_on(session.step_streams(&mut refs))?
                .into_iter()
                .map(|e| vec![e])
                .collect()
        };
        for ((i, _), round) in live.iter().zip(rounds) {
            tokens[*i].extend(round.iter().map(|e| e.id));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let decoded: usize = tokens.iter().map(|t| t.len() - 1).sum();
    let (drafted, accepted) = streams
        .iter()
        .filter_map(Stream::draft_counts)
        .fold((0, 0), |(d, a), (dd, aa)| (d + dd, a + aa));
    Ok(Run {
        tokens_per_s: if seconds > 0.0 {
            decoded as f64 / seconds
        } else {
            0.0
        },
        tokens,
        drafted,
        accepted,
    })
}

/// Runs the bench on `session` (its target loaded with N + 1 KV slots, its assistant
/// installed) and prints the table or the JSON report.
pub fn run(session: &mut Session, bench: &ParallelBench) -> Result<()> {
    let n = bench.streams;
    if !session.has_assistant() {
        bail!(
            "--parallel: expected a target with an assistant (--synthetic tiny, e2b or e4b, or \
             a --model artifact holding one), found none"
        );
    }
    let model = session.model()?;
    let plain: Vec<GenerateRequest> = (0..n)
        .map(|i| GenerateRequest {
            prompt_ids: Some(prompt(model, bench.seed, i, bench.prompt_len)),
            max_new_tokens: bench.gen,
            ..GenerateRequest::default()
        })
        .collect();
    let speculative: Vec<GenerateRequest> = plain
        .iter()
        .map(|r| GenerateRequest {
            speculative: true,
            draft_tokens: bench.draft_tokens,
            adaptive_draft: false,
            ..r.clone()
        })
        .collect();
    let plain_name = format!("tg{} x{n} batched", bench.gen);
    let mut reference = Vec::new();
    let batched = timed(&plain_name, bench.repetitions, || {
        let run = run_streams(session, &plain, None)?;
        reference = run.tokens;
        Ok(run.tokens_per_s)
    })?;
    let mut rows = vec![TestRow {
        test: plain_name.clone(),
        n_prompt: bench.prompt_len,
        n_gen: bench.gen,
        tokens_per_s: batched.clone(),
        vs_tg: None,
    }];
    let mut reports = Vec::new();
    for &p in bench.acceptance {
        let name = format!("spec x{n} k={} p={p:.2} (drafter)", bench.draft_tokens);
        let mut last = None;
        let samples: Samples = timed(&name, bench.repetitions, || {
            let run = run_streams(session, &speculative, Some((p, &reference)))?;
            let tps = run.tokens_per_s;
            last = Some(run);
            Ok(tps)
        })?;
        let run = last.context("a timed run")?;
        let vs = compare(&batched, &samples);
        reports.push(serde_json::json!({
            "acceptance": p,
            "draft_tokens": bench.draft_tokens,
            "tokens_per_s": samples.json(),
            "acceptance_rate": run.accepted as f64 / run.drafted.max(1) as f64,
            "drafted": run.drafted,
            "accepted": run.accepted,
            "matches_plain": run.tokens == reference,
            "speedup": vs.ratio,
            "measurable": vs.measurable,
        }));
        if run.tokens != reference {
            eprintln!("bench: {name}: the tokens differ from the plain streams'");
        }
        rows.push(TestRow {
            test: name,
            n_prompt: bench.prompt_len,
            n_gen: bench.gen,
            tokens_per_s: samples,
            vs_tg: Some(vs),
        });
    }
    if bench.json {
        let report = serde_json::json!({
            "model": bench.model_name,
            "dtype": bench.dtype,
            "device": session.ctx().describe(),
            "parallel": n,
            "n_prompt": bench.prompt_len,
            "n_gen": bench.gen,
            "repetitions": bench.repetitions,
            "tests": rows.iter().map(TestRow::json).collect::<Vec<_>>(),
            "batched_tokens_per_s": batched.json(),
            "speculative": reports,
        });
        println!("{report}");
    } else {
        println!("device: {}", session.ctx().describe());
        print_table(&bench.model_name, &bench.dtype, &rows, &plain_name);
    }
    Ok(())
}
