//! Pipelined greedy rounds: round r + 1 is recorded and submitted before the host reads
//! round r, as plain decoding pipelines its steps ([`KvState::decode_greedy`]).
//!
//! What round r + 1 needs from round r is computed on the GPU by the `spec_commit` kernel
//! ([`crate::ops::spec_commit`]), recorded after round r's verify forward: the accepted
//! count n, the bonus token (the next seed), the seed's position P, the positions of the
//! next verify's rows, the assistant's view (RoPE position and view ends, HF's rule) and
//! its seed hidden state (row n of the verify's hidden states). Round r + 1 starts with
//! buffer copies out of that state (the seed into the verify's token ids and the
//! assistant's token, the positions into the verify plan's positions), so nothing it
//! needs goes through the host.
//!
//! The route, and why: every kernel already reads positions and view ends from GPU buffers
//! (RoPE, the KV append, the attention's per-row key span), and only the attention GRIDS
//! come from host lengths; a grid planned for more keys than a row has only costs speed
//! (`ops::attention::plan`). So the verify is recorded with its positions copied on the GPU
//! ([`KvState::record_forward_at_gpu_positions`]) and grids sized for the most keys round r's
//! outcome allows; the assistant's grids likewise from the largest view
//! ([`Assistant::begin_round_on_gpu`]). No kernel changed. The host's own bookkeeping (the
//! committed tokens, the KV cursor: [`KvState::account_rows`]) is brought up to date when it
//! reads round r's record, one round late; that read is the only wait, and it overlaps
//! round r + 1's execution.
//!
//! A round is pipelined only when whatever round r accepts cannot change it: its k fits
//! the budget for every outcome (so HF's k sequence is kept), the context and the sliding
//! rings hold its rows for every outcome, and HF's view is expressible for every outcome.
//! Otherwise, and for HF's heuristic schedule (whose k follows n), the host reads round r
//! first and records round r + 1 exactly ("drains"). The adaptive schedule decides k from
//! the stats of the rounds read so far (one round late). A round recorded after a prefill,
//! a plain chunk or a drain is seeded by the host (state, view and seed hidden row written
//! from what it knows); the commit kernel runs after every round either way.
//!
//! When round r ends the generation (a stop token, the caller's stop, the budget), round
//! r + 1 has run ahead: its rows are accounted and rolled back, as plain decoding rolls
//! back its step run ahead, so the target ends exactly where rounds one at a time leave it.

use super::oracle::{DraftSource, OracleRound};
use super::rounds::Session;
use super::schedule::{DraftSchedule, NextRound};
use super::{LastForward, Phase, MAX_DRAFT_TOKENS, OP};
use crate::error::{Error, Result};
use crate::gpu::{DType, Kernel, Readback, Step, Tensor};
use crate::model::assistant::DraftView;
use crate::model::forward::LogitRows;
use crate::ops::spec_commit::{
    spec_commit, CommitBuffers, CommitParams, MAX_ROUND_ROWS, RECORD_DRAFTS, RECORD_TOKENS,
    STATE_LEN, STATE_POSITION, STATE_POSITIONS, STATE_RECORD, STATE_SEED,
};
use std::collections::HashMap;
use web_time::Instant;

const _: () = assert!(MAX_DRAFT_TOKENS + 1 == MAX_ROUND_ROWS);

/// A round submitted and not yet read.
struct Flight {
    kk: usize,
    m: usize,
    submission: wgpu::SubmissionIndex,
    /// Which of the two readbacks holds its record.
    readback: usize,
    /// It was recorded behind another round and did not build its verify plan: the
    /// interval between its read and the one before is what a round costs in steady state.
    /// A round recorded alone also pays the submit and wait the pipeline hides; timing it
    /// would make the adaptive schedule's first sample of a k too dear.
    timed: bool,
    /// The drafts an oracle round's target accepts, where the oracle knows it (all its
    /// drafts within its reference).
    oracle_accepted: Option<usize>,
}

/// How a round learns its seed, positions, view and seed hidden state.
enum Seed {
    /// From the host, which knows them (nothing in flight).
    Host,
    /// From the previous round's commit kernel; `bound` is the largest view it can have
    /// and `max_start` the furthest its first row can be.
    Gpu { bound: DraftView, max_start: usize },
}

/// The buffers and kernels of pipelined rounds.
struct GpuRounds {
    state: Tensor,
    readbacks: [Readback; 2],
    next_readback: usize,
    /// Commit kernels per (verify rows, ids buffer): a plan rebuilt after its eviction has
    /// new buffers, hence a new kernel.
    commits: HashMap<(usize, usize), Kernel>,
    source: DraftSource,
    /// Tokens committed before the next round recorded behind another one (an oracle's
    /// drafts depend on it): the round before it accepts its kept drafts and the bonus.
    oracle_next: usize,
    last_read: Option<Instant>,
    /// Rounds submitted so far (the index of the next one in [`super::PhaseSpan`]).
    submitted: usize,
}

impl GpuRounds {
    fn new(s: &Session<'_>, mut source: DraftSource) -> Result<Self> {
        let ctx = s.ctx;
        if let Some(oracle) = source.oracle() {
            oracle.check(s.target.model().spec.config.vocab_size)?;
        }
        let bytes = (STATE_LEN * 4) as u64;
        Ok(GpuRounds {
            state: Tensor::zeros(ctx, "speculative.state", &[STATE_LEN], DType::U32)?,
            readbacks: [
                Readback::new(ctx, "speculative.record.0", bytes),
                Readback::new(ctx, "speculative.record.1", bytes),
            ],
            next_readback: 0,
            commits: HashMap::new(),
            source,
            oracle_next: 0,
            last_read: None,
            submitted: 0,
        })
    }

    /// Records and submits a round of `kk` drafts.
    fn submit(&mut self, s: &mut Session<'_>, kk: usize, seed: Seed) -> Result<Flight> {
        let ctx = s.ctx;
        let m = kk + 1;
        let timed =
            matches!(seed, Seed::Gpu { .. }) && s.target.built_plan(m, LogitRows::All).is_some();
        // Before the verify plan is built: building may evict the last forward's plan.
        let last_hidden = match seed {
            Seed::Host if kk > 0 => Some(s.seed_hidden()?),
            _ => None,
        };
        let plan = s.target.plan(ctx, m, LogitRows::All)?;
        let head = plan.head_for("every verify row")?;
        let (ids, next, hidden) = (plan.ids.clone(), head.next.clone(), head.hidden.clone());
        let round = self.submitted;
        self.submitted += 1;
        // Whatever ran since the last round (the prefill, plain steps) is the target's.
        s.mark(Phase::Target, round, kk);
        let drafter = self.source.runs_drafter();
        let mut step = Step::new(ctx);
        let max_start = match seed {
            Seed::Host => {
                let p = s.seed_position();
                let mut state = vec![0u32; STATE_LEN];
                state[STATE_SEED] = *s.tokens.last().expect("one token at least");
                state[STATE_POSITION] = p as u32;
                for (i, slot) in state[STATE_POSITIONS..STATE_POSITIONS + MAX_ROUND_ROWS]
                    .iter_mut()
                    .enumerate()
                {
                    *slot = (p + i) as u32;
                }
                self.state.write_bytes(ctx, bytemuck::cast_slice(&state));
                if let Some(last_hidden) = last_hidden {
                    let view = s.host_view()?;
                    let slot = s.target.sequence_slot();
                    s.assistant.begin_round(ctx, view, slot);
                    s.assistant
                        .record_seed_hidden(&mut step, &last_hidden, s.last.row)?;
                }
                p
            }
            Seed::Gpu { bound, max_start } => {
                if kk > 0 {
                    s.assistant.begin_round_on_gpu(bound);
                }
                max_start
            }
        };
        let committed = match seed {
            Seed::Host => s.tokens.len(),
            Seed::Gpu { .. } => self.oracle_next,
        };
        let oracle = self.write_oracle_drafts(s, kk, committed, &ids)?;
        let commit = self.commit_kernel(s, m, &ids, &next, &hidden)?;
        // The seed, from the state, into the verify's first row and the first draft step.
        step.encoder()
            .copy_buffer_to_buffer(self.state.buffer(), 0, ids.buffer(), 0, 4);
        if kk > 0 {
            let token = s.assistant.gpu_round_buffers().token.buffer().clone();
            step.encoder()
                .copy_buffer_to_buffer(self.state.buffer(), 0, &token, 0, 4);
        }
        if drafter {
            for i in 0..kk {
                s.assistant.record_step(&mut step)?;
                if oracle.is_none() {
                    s.assistant.record_token_copy(&mut step, &ids, i + 1)?;
                }
            }
        }
        s.mark(Phase::Drafter, round, kk);
        s.target.record_forward_at_gpu_positions(
            ctx,
            &mut step,
            &plan,
            (&self.state, STATE_POSITIONS),
            max_start,
        )?;
        s.mark(Phase::Verify, round, kk);
        step.pass(|pass| pass.dispatch(&commit));
        s.mark(Phase::Commit, round, kk);
        let readback = self.next_readback;
        self.next_readback ^= 1;
        step.copy_to_readback(&self.state, &self.readbacks[readback])?;
        let submission = step.submit();
        Ok(Flight {
            kk,
            m,
            submission,
            readback,
            timed,
            oracle_accepted: oracle.and_then(|o| o.within_reference.then_some(o.accepted)),
        })
    }

    fn commit_kernel(
        &mut self,
        s: &Session<'_>,
        m: usize,
        ids: &Tensor,
        next: &Tensor,
        hidden: &Tensor,
    ) -> Result<Kernel> {
        let key = (m, ids.buffer_key());
        if let Some(k) = self.commits.get(&key) {
            return Ok(k.with_grid(k.grid()));
        }
        let a = s.assistant.gpu_round_buffers();
        let params = CommitParams::new(
            m - 1,
            s.target.model().spec.config.hidden_size,
            a.seed_hidden_offset,
            s.assistant.target_window(),
            s.target.sequence_slot(),
        );
        let kernel = spec_commit(
            s.ctx,
            &CommitBuffers {
                next,
                ids,
                hidden,
                state: &self.state,
                seed_hidden: a.input,
                rope_position: a.rope_position,
                full_end: a.full_end,
                sliding_end: a.sliding_end,
            },
            params,
        )?;
        let copy = kernel.with_grid(kernel.grid());
        self.commits.insert(key, kernel);
        Ok(copy)
    }

    /// An oracle's `kk` drafts of a round after `committed` tokens, written over the verify's
    /// draft ids (a queue write: ordered after the rounds submitted before and before this
    /// one); None when the assistant's drafts are the round's.
    fn write_oracle_drafts(
        &mut self,
        s: &Session<'_>,
        kk: usize,
        committed: usize,
        ids: &Tensor,
    ) -> Result<Option<OracleRound>> {
        let Some(oracle) = self.source.oracle() else {
            return Ok(None);
        };
        let vocab = s.target.model().spec.config.vocab_size;
        let round = oracle.round(committed, kk, vocab)?;
        if kk > 0 {
            s.ctx
                .queue
                .write_buffer(ids.buffer(), 4, bytemuck::cast_slice(&round.drafts));
        }
        self.oracle_next = committed + round.accepted + 1;
        Ok(Some(round))
    }

    /// Reads `f`'s record, brings the host up to date and streams its tokens. Returns
    /// where the GPU put the next round's seed (past the tokens the host cut).
    async fn finish(
        &mut self,
        s: &mut Session<'_>,
        f: Flight,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<usize> {
        let wait = Instant::now();
        let bytes = self.readbacks[f.readback]
            .read_bytes_of(s.ctx, Some(f.submission))
            .await?;
        let read_at = Instant::now();
        s.wait_s += read_at.duration_since(wait).as_secs_f64();
        let state: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes[..STATE_LEN * 4]);
        let record = &state[STATE_RECORD..];
        let (n, kk, p) = (record[0] as usize, record[1] as usize, record[2] as usize);
        if kk != f.kk || p != s.seed_position() || n > kk {
            return Err(Error::invalid(
                OP,
                "record of a GPU round (accepted, drafts, seed position)",
                format!("(<= {}, {}, {})", f.kk, f.kk, s.seed_position()),
                format!("({n}, {kk}, {p})"),
            ));
        }
        if let Some(want) = f.oracle_accepted.filter(|&want| want != n) {
            // The reference is not this target's greedy continuation: a bug, never a figure.
            return Err(Error::invalid(
                OP,
                "drafts an oracle round's target accepts",
                format!("{want} (its kept drafts)"),
                n,
            ));
        }
        let drafts = state[RECORD_DRAFTS..RECORD_DRAFTS + kk].to_vec();
        let mut valid = state[RECORD_TOKENS..=RECORD_TOKENS + n].to_vec();
        // Pipelined, a round costs the interval between two reads.
        let seconds = match (f.timed, self.last_read) {
            (true, Some(before)) => Some(read_at.duration_since(before).as_secs_f64()),
            _ => None,
        };
        self.last_read = Some(read_at);
        s.cut(&mut valid);
        s.target.account_rows(p, f.m, p + valid.len())?;
        s.last = LastForward {
            r: p + kk,
            m: f.m,
            plan: (f.m, LogitRows::All),
            row: n,
        };
        s.book_round(drafts, n, valid, seconds, on_token);
        Ok(p + n + 1)
    }
}

/// Whether the round after `f` (in flight) can be recorded before `f` is read, and with
/// how many drafts; `stash` keeps a schedule's decision for after the drain otherwise.
fn pipelined_drafts(
    s: &mut Session<'_>,
    f: &Flight,
    stash: &mut Option<NextRound>,
) -> Option<(usize, Seed)> {
    if s.spec.schedule == DraftSchedule::Heuristic
        || s.adaptive.as_ref().is_some_and(|a| a.awaits_round())
    {
        return None;
    }
    // Round f commits 1..=f.kk + 1 tokens: the next round's budget is at least this.
    let budget = s
        .options
        .max_new_tokens
        .saturating_sub(s.tokens.len() + f.kk + 1);
    if budget < 2 {
        return None;
    }
    let next = s.next_round(budget);
    let kk = match next {
        NextRound::Draft(k) if k < budget => k,
        _ => {
            // Plain steps (adaptive) run after the drain; a fixed k past the smallest budget
            // is recomputed from the exact one.
            if s.adaptive.is_some() {
                *stash = Some(next);
            }
            return None;
        }
    };
    let p = s.seed_position();
    let r = p + f.kk;
    let max_start = r + 1;
    let (w_t, w_a) = (s.assistant.target_window(), s.assistant.window());
    let views: Result<Vec<DraftView>> = (0..=f.kk)
        .map(|n| DraftView::hf(p + n + 1, r, f.m, w_t, w_a))
        .collect();
    let fits_context = max_start + kk < s.target.model().options.max_context;
    // Rolling back this round after f cut its tokens must stay within the rings' reach.
    let fits_rings = s.target.ring_rows().is_none_or(|rows| f.kk + kk < rows);
    match views {
        Ok(views) if fits_context && fits_rings => Some((
            kk,
            Seed::Gpu {
                bound: *views.last().expect("one view at least"),
                max_start,
            },
        )),
        _ => {
            if s.adaptive.is_some() {
                *stash = Some(next);
            }
            None
        }
    }
}

/// Greedy rounds with drafts chained on the GPU, pipelined (see the module docs).
pub(super) async fn run(
    s: &mut Session<'_>,
    source: DraftSource,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<()> {
    let mut gpu = GpuRounds::new(s, source)?;
    let mut in_flight: Option<Flight> = None;
    let mut stash: Option<NextRound> = None;
    // Where the GPU put the seed of the round after the last one read.
    let mut gpu_start = 0;
    loop {
        if let Some(f) = in_flight.take() {
            if let Some((kk, seed)) = pipelined_drafts(s, &f, &mut stash) {
                in_flight = Some(gpu.submit(s, kk, seed)?);
                s.out.stats.pipelined_rounds += 1;
            }
            gpu_start = gpu.finish(s, f, on_token).await?;
            if s.done || s.budget() == 0 {
                break;
            }
            continue;
        }
        if s.done || s.budget() == 0 {
            break;
        }
        let budget = s.budget();
        let next = stash.take().unwrap_or_else(|| s.next_round(budget));
        let kk = match next {
            NextRound::Plain(n) => {
                s.plain_chunk(n, on_token).await?;
                continue;
            }
            NextRound::Draft(k) => k.min(budget - 1),
        };
        in_flight = Some(gpu.submit(s, kk, Seed::Host)?);
    }
    if let Some(ghost) = in_flight {
        // Ran ahead of the end: its rows are forgotten (the budget never ends a round
        // before a pipelined one: only a stop does).
        let len = s.target.len();
        s.target.account_rows(gpu_start, ghost.m, len)?;
    }
    Ok(())
}
