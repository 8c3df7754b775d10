use super::*;
use crate::harness::{assert_cases_pass, test_context, OpCase};

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
}
