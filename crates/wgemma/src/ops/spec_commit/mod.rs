//! The end of a greedy speculative round on the GPU (`spec_commit`), and the benchmarks'
//! draft replacement (`spec_replace_drafts`).
//!
//! Speculative rounds are pipelined like plain decoding: round r + 1 is recorded and
//! submitted before the host reads round r. What round r + 1 needs from round r (the
//! accepted count n, the bonus token, the new committed length) is therefore computed on the
//! GPU, after the verify forward, by `spec_commit`, into a small state buffer
//! ([`STATE_LEN`] u32) that the next round reads through buffer copies (the seed token into
//! the verify's token ids and the assistant's token, the staged positions into the verify's
//! positions), plus the assistant's view buffers and its seed hidden state, written
//! directly. The state ends with the round's record (n, k, p, the verify's argmax rows and
//! the drafts), which the host reads one round late only to stream the tokens and keep its
//! own bookkeeping.
//!
//! State layout (u32 indices): [`STATE_SEED`] the next round's seed token,
//! [`STATE_POSITION`] its position P, [`STATE_POSITIONS`]`..+MAX_ROUND_ROWS` P, P + 1, ...
//! (the next verify's row positions), [`STATE_RECORD`]`..` `[n, k, p, next[0..=k] (9 slots),
//! d1..dk (8 slots)]`.

mod reference;

pub use reference::{accepted_ref, spec_commit_ref, spec_replace_drafts_ref, CommitOutputs};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const OP: &str = "spec_commit";
const WORKGROUP: u32 = 256;

/// Rows of the largest verify forward the kernels handle (k <= 8 drafts + the seed).
pub const MAX_ROUND_ROWS: usize = 9;
pub const STATE_SEED: usize = 0;
pub const STATE_POSITION: usize = 1;
pub const STATE_POSITIONS: usize = 2;
pub const STATE_RECORD: usize = STATE_POSITIONS + MAX_ROUND_ROWS;
/// Where the record's argmax rows and drafts start.
pub const RECORD_TOKENS: usize = STATE_RECORD + 3;
pub const RECORD_DRAFTS: usize = RECORD_TOKENS + MAX_ROUND_ROWS;
pub const STATE_LEN: usize = RECORD_DRAFTS + MAX_ROUND_ROWS - 1;

/// The constants of a round's commit kernel (fixed per verify plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct CommitParams {
    /// k: drafts of the round (the verify has k + 1 rows).
    pub drafts: u32,
    /// H: the target's hidden size.
    pub hidden: u32,
    /// Where row n of the verify's hidden states goes in `seed_hidden`.
    pub hidden_offset: u32,
    /// W_target - 1 + (k + 1), saturated at u32::MAX (the first row the target's sliding
    /// layer returned to HF's assistant is R + 1 - this).
    pub window_rows: u32,
    /// The target sequence's KV slot (written after each view position).
    pub slot: u32,
    pub _pad: [u32; 3],
}

impl CommitParams {
    /// The parameters of a round of `drafts` drafts (`w_target`: usize::MAX without sliding
    /// layers).
    pub fn new(
        drafts: usize,
        hidden: usize,
        hidden_offset: usize,
        w_target: usize,
        slot: usize,
    ) -> Self {
        let window_rows = w_target.saturating_sub(1).saturating_add(drafts + 1);
        CommitParams {
            drafts: drafts as u32,
            hidden: hidden as u32,
            hidden_offset: hidden_offset as u32,
            window_rows: u32::try_from(window_rows).unwrap_or(u32::MAX),
            slot: slot as u32,
            _pad: [0; 3],
        }
    }
}

/// What the commit kernel reads and writes.
pub struct CommitBuffers<'a> {
    /// The verify's argmax per row, u32 `[>= k + 1]`.
    pub next: &'a Tensor,
    /// The verify's token ids (seed, drafts), u32 `[>= k + 1]`.
    pub ids: &'a Tensor,
    /// The verify's final-normed hidden states, f32 `[>= k + 1, H]`.
    pub hidden: &'a Tensor,
    /// The round state, u32 `[STATE_LEN]`.
    pub state: &'a Tensor,
    /// Where row n of `hidden` goes (at `hidden_offset`), f32.
    pub seed_hidden: &'a Tensor,
    /// The assistant's view: RoPE position, full and sliding ends, u32 `[2]` each.
    pub rope_position: &'a Tensor,
    pub full_end: &'a Tensor,
    pub sliding_end: &'a Tensor,
}

fn check(t: &Tensor, what: &str, dtype: DType, at_least: usize) -> Result<()> {
    if t.dtype() != dtype || t.numel() < at_least {
        return Err(Error::invalid(
            OP,
            what.to_string(),
            format!("{dtype:?} with >= {at_least} elements"),
            format!("{:?} {:?}", t.dtype(), t.shape()),
        ));
    }
    Ok(())
}

/// Plans the commit of a round (see the module docs).
pub fn spec_commit(
    ctx: &GpuContext,
    b: &CommitBuffers<'_>,
    params: CommitParams,
) -> Result<Kernel> {
    let (k, h) = (params.drafts as usize, params.hidden as usize);
    if k + 1 > MAX_ROUND_ROWS || h == 0 {
        return Err(Error::invalid(
            OP,
            "drafts and hidden size",
            format!("drafts <= {} and hidden >= 1", MAX_ROUND_ROWS - 1),
            format!("{k} and {h}"),
        ));
    }
    check(b.next, "verify argmax rows", DType::U32, k + 1)?;
    check(b.ids, "verify token ids", DType::U32, k + 1)?;
    check(b.hidden, "verify hidden states", DType::F32, (k + 1) * h)?;
    check(b.state, "round state", DType::U32, STATE_LEN)?;
    check(
        b.seed_hidden,
        "seed hidden",
        DType::F32,
        params.hidden_offset as usize + h,
    )?;
    for (t, what) in [
        (b.rope_position, "rope position"),
        (b.full_end, "full view end"),
        (b.sliding_end, "sliding view end"),
    ] {
        check(t, what, DType::U32, 2)?;
    }
    KernelBuilder::new(ctx, OP)
        .uniform(&params)
        .tensor(b.next)
        .tensor(b.ids)
        .tensor(b.hidden)
        .tensor(b.state)
        .tensor(b.seed_hidden)
        .tensor(b.rope_position)
        .tensor(b.full_end)
        .tensor(b.sliding_end)
        .build_1d(workgroups_for(h as u64, WORKGROUP))
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReplaceParams {
    drafts: u32,
    prompt_len: u32,
    vocab: u32,
    reference_len: u32,
}

/// What the draft replacement kernel reads and writes.
pub struct ReplaceBuffers<'a> {
    /// The round state, u32 `[STATE_LEN]`.
    pub state: &'a Tensor,
    /// The tokens the drafts stand for, u32 `[>= 1]`.
    pub reference: &'a Tensor,
    /// Which drafts keep their reference token, u32 0/1 `[>= drafts]` (written per round).
    pub keep: &'a Tensor,
    /// The verify's token ids (seed, drafts), u32 `[>= drafts + 1]`.
    pub ids: &'a Tensor,
}

/// Plans the replacement of a round's `drafts` drafts in `ids` by `reference` tokens kept
/// where `keep` says so, else replaced by a token the target rejects (see
/// spec_replace_drafts.wgsl).
pub fn spec_replace_drafts(
    ctx: &GpuContext,
    b: &ReplaceBuffers<'_>,
    drafts: usize,
    prompt_len: usize,
    vocab: usize,
) -> Result<Kernel> {
    let ReplaceBuffers {
        state,
        reference,
        keep,
        ids,
    } = *b;
    if drafts + 1 > MAX_ROUND_ROWS || prompt_len == 0 {
        return Err(Error::invalid(
            "spec_replace_drafts",
            "drafts and prompt length",
            format!("drafts <= {} and a prompt", MAX_ROUND_ROWS - 1),
            format!("{drafts} and {prompt_len}"),
        ));
    }
    check(state, "round state", DType::U32, STATE_LEN)?;
    check(reference, "reference tokens", DType::U32, 1)?;
    check(keep, "kept drafts", DType::U32, drafts)?;
    check(ids, "verify token ids", DType::U32, drafts + 1)?;
    KernelBuilder::new(ctx, "spec_replace_drafts")
        .uniform(&ReplaceParams {
            drafts: drafts as u32,
            prompt_len: prompt_len as u32,
            vocab: vocab as u32,
            reference_len: reference.numel() as u32,
        })
        .tensor(state)
        .tensor(reference)
        .tensor(keep)
        .tensor(ids)
        .build_1d(1)
}

/// Harness case: a round of `drafts` drafts of which `accepted` match, hidden size `hidden`,
/// the seed at `position`.
pub struct CommitCase {
    pub drafts: usize,
    pub accepted: usize,
    pub hidden: usize,
    pub position: u32,
    pub w_target: usize,
}

impl OpCase for CommitCase {
    fn name(&self) -> String {
        format!(
            "spec_commit drafts={} accepted={} hidden={} position={} window={}",
            self.drafts, self.accepted, self.hidden, self.position, self.w_target
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (k, h) = (self.drafts, self.hidden);
        let vocab = 1000u32;
        let next: Vec<u32> = (0..=k).map(|_| rng.random_range(0..vocab)).collect();
        let mut ids = vec![rng.random_range(0..vocab)];
        for (i, &t) in next.iter().take(k).enumerate() {
            ids.push(if i < self.accepted {
                t
            } else if i == self.accepted {
                (t + 1 + rng.random_range(0..vocab - 1)) % vocab
            } else {
                rng.random_range(0..vocab)
            });
        }
        let hidden: Vec<f32> = (0..(k + 1) * h)
            .map(|_| rng.random_range(-4.0..4.0))
            .collect();
        // Garbage everywhere the kernel writes, the seed's position in the state.
        let mut state: Vec<u32> = (0..STATE_LEN as u32).map(|i| 7000 + i).collect();
        state[STATE_POSITION] = self.position;
        let seed_hidden: Vec<f32> = (0..2 * h).map(|i| -(i as f32)).collect();
        let params = CommitParams::new(k, h, h, self.w_target, 3);
        let want = spec_commit_ref(params, &next, &ids, &hidden, &state, &seed_hidden);
        let t = |label, v: &[u32]| Tensor::from_u32(ctx, label, &[v.len()], v);
        let next_t = t("next", &next)?;
        let ids_t = t("ids", &ids)?;
        let hidden_t = Tensor::from_f32(ctx, "hidden", &[k + 1, h], &hidden)?;
        let state_t = t("state", &state)?;
        let seed_t = Tensor::from_f32(ctx, "seed_hidden", &[1, 2 * h], &seed_hidden)?;
        let rope = t("rope_position", &[9, 9])?;
        let full = t("full_end", &[9, 9])?;
        let sliding = t("sliding_end", &[9, 9])?;
        let kernel = spec_commit(
            ctx,
            &CommitBuffers {
                next: &next_t,
                ids: &ids_t,
                hidden: &hidden_t,
                state: &state_t,
                seed_hidden: &seed_t,
                rope_position: &rope,
                full_end: &full,
                sliding_end: &sliding,
            },
            params,
        )?;
        let exact_u32 = |name, tensor: Tensor, v: &[u32]| Expected {
            name,
            tensor,
            reference: Values::U32(v.to_vec()),
            check: Check::Exact,
        };
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![
                exact_u32("state", state_t, &want.state),
                Expected {
                    name: "seed_hidden",
                    tensor: seed_t,
                    reference: Values::F32(want.seed_hidden),
                    check: Check::Exact,
                },
                exact_u32("rope_position", rope, &want.rope_position),
                exact_u32("full_end", full, &want.full_end),
                exact_u32("sliding_end", sliding, &want.sliding_end),
            ],
            bytes_moved: 4 * (3 * h + 2 * (k + 1) + 2 * STATE_LEN) as u64,
        })
    }
}

/// Harness case: the replacement of `drafts` drafts at `position` (prompt of `prompt_len`).
pub struct ReplaceCase {
    pub drafts: usize,
    pub prompt_len: usize,
    pub position: u32,
    pub reference_len: usize,
}

impl OpCase for ReplaceCase {
    fn name(&self) -> String {
        format!(
            "spec_replace_drafts drafts={} prompt={} position={} reference={}",
            self.drafts, self.prompt_len, self.position, self.reference_len
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let vocab = 512u32;
        let reference: Vec<u32> = (0..self.reference_len)
            .map(|_| rng.random_range(0..vocab))
            .collect();
        let keep: Vec<bool> = (0..self.drafts).map(|_| rng.random_bool(0.5)).collect();
        let keep_u32: Vec<u32> = keep.iter().map(|&b| b as u32).collect();
        let ids: Vec<u32> = (0..=self.drafts)
            .map(|_| rng.random_range(0..vocab))
            .collect();
        let mut state = vec![0u32; STATE_LEN];
        state[STATE_POSITION] = self.position;
        let want = spec_replace_drafts_ref(&ids, &state, &reference, &keep, self.prompt_len, vocab);
        let t = |label, v: &[u32]| Tensor::from_u32(ctx, label, &[v.len().max(1)], v);
        let ids_t = t("ids", &ids)?;
        let (state_t, reference_t, keep_t) = (
            t("state", &state)?,
            t("reference", &reference)?,
            t("keep", &keep_u32)?,
        );
        let buffers = ReplaceBuffers {
            state: &state_t,
            reference: &reference_t,
            keep: &keep_t,
            ids: &ids_t,
        };
        let kernel =
            spec_replace_drafts(ctx, &buffers, self.drafts, self.prompt_len, vocab as usize)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "ids",
                tensor: ids_t,
                reference: Values::U32(want),
                check: Check::Exact,
            }],
            bytes_moved: 4 * (3 * self.drafts + 1) as u64,
        })
    }
}

/// Random rounds: every accepted count, windows that cut the view or not.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let drafts = rng.random_range(1..MAX_ROUND_ROWS);
    let mut cases: Vec<Box<dyn OpCase>> = vec![Box::new(CommitCase {
        drafts,
        accepted: rng.random_range(0..=drafts),
        hidden: rng.random_range(1..2000),
        position: rng.random_range(0..5000),
        w_target: [8, 512, usize::MAX][rng.random_range(0..3)],
    })];
    let prompt_len = rng.random_range(1..40);
    cases.push(Box::new(ReplaceCase {
        drafts,
        prompt_len,
        position: (prompt_len + rng.random_range(0..40) - 1) as u32,
        reference_len: rng.random_range(1..60),
    }));
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{assert_cases_pass, test_context};

    #[test]
    fn commit_matches_reference_for_every_accepted_count() {
        let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
        for drafts in [1, 2, 3, 8] {
            for accepted in 0..=drafts {
                for (position, w_target) in [(5u32, 8usize), (300, 8), (40, usize::MAX), (0, 512)] {
                    cases.push(Box::new(CommitCase {
                        drafts,
                        accepted,
                        hidden: [1, 255, 256, 1537][accepted % 4],
                        position,
                        w_target,
                    }));
                }
            }
        }
        assert_cases_pass(&cases, 0..1);
    }

    #[test]
    fn replacement_matches_reference() {
        let cases: Vec<Box<dyn OpCase>> =
            [(1, 3, 2, 10), (8, 5, 9, 30), (8, 5, 30, 30), (2, 1, 0, 3)]
                .into_iter()
                .map(|(drafts, prompt_len, position, reference_len)| {
                    Box::new(ReplaceCase {
                        drafts,
                        prompt_len,
                        position,
                        reference_len,
                    }) as Box<dyn OpCase>
                })
                .collect();
        assert_cases_pass(&cases, 0..3);
    }

    #[test]
    fn rejects_bad_inputs() {
        let ctx = test_context();
        let u = |n| Tensor::zeros(ctx, "u", &[n], DType::U32).unwrap();
        let f = |n| Tensor::zeros(ctx, "f", &[n], DType::F32).unwrap();
        let (next, ids, hidden, state, seed) = (u(3), u(3), f(12), u(STATE_LEN), f(8));
        let (a, b, c) = (u(2), u(2), u(2));
        let short_state = u(4);
        let p = |drafts, offset| CommitParams::new(drafts, 4, offset, 8, 0);
        for (st, params, ok) in [
            (&state, p(2, 4), true),
            (&state, p(3, 4), false),
            (&state, p(2, 5), false),
            (&short_state, p(2, 4), false),
        ] {
            let buffers = CommitBuffers {
                next: &next,
                ids: &ids,
                hidden: &hidden,
                state: st,
                seed_hidden: &seed,
                rope_position: &a,
                full_end: &b,
                sliding_end: &c,
            };
            assert_eq!(spec_commit(ctx, &buffers, params).is_ok(), ok, "{params:?}");
        }
        let (reference, keep) = (u(4), u(1));
        let replace = ReplaceBuffers {
            state: &state,
            reference: &reference,
            keep: &keep,
            ids: &ids,
        };
        assert!(spec_replace_drafts(ctx, &replace, 2, 1, 10).is_err());
    }
}
