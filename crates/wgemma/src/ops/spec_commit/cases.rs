//! Harness cases of spec_commit: GPU vs its CPU reference.

use super::{
    spec_commit, spec_commit_ref, CommitBuffers, CommitParams, MAX_ROUND_ROWS, STATE_LEN,
    STATE_POSITION,
};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

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

/// Random rounds: every accepted count, windows that cut the view or not.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let drafts = rng.random_range(1..MAX_ROUND_ROWS);
    vec![Box::new(CommitCase {
        drafts,
        accepted: rng.random_range(0..=drafts),
        hidden: rng.random_range(1..2000),
        position: rng.random_range(0..5000),
        w_target: [8, 512, usize::MAX][rng.random_range(0..3)],
    })]
}
