//! The MoE case lists: random small shapes for the test suite, the 26B-A4B shapes for
//! benchmarks.

use super::block::{BlockDown, MoeBlockCase, MoeDownCombineCase};
use super::{MoeCombineCase, MoeLinearCase, MoeRouteCase};
use crate::harness::{OpCase, Rng};
use crate::ops::moe::down_combine::MoeCombineRoute;
use crate::ops::moe::linear::{MoeEpilogue, MoeLinearRoute};
use crate::ops::moe::weight::ExpertFormat;
use rand::Rng as _;

fn boxed<C: OpCase + 'static>(c: C) -> Box<dyn OpCase> {
    Box::new(c)
}

fn random_format(rng: &mut Rng) -> ExpertFormat {
    match rng.random_range(0..5) {
        0 => ExpertFormat::F32,
        1 => ExpertFormat::F16,
        2 => ExpertFormat::Q4 { group: 64 },
        3 => ExpertFormat::Q4 { group: 128 },
        _ => ExpertFormat::Q4 { group: 32 },
    }
}

/// The Q4 group, or 32 (the unit of H and I in random shapes) for dense formats.
fn group_of(format: ExpertFormat) -> usize {
    match format {
        ExpertFormat::Q4 { group } => group,
        _ => 32,
    }
}

fn route_for(format: ExpertFormat) -> MoeLinearRoute {
    match format {
        ExpertFormat::F32 => MoeLinearRoute::DenseF32,
        ExpertFormat::F16 => MoeLinearRoute::DenseF16,
        ExpertFormat::Q4 { .. } => MoeLinearRoute::Q4Grouped,
    }
}

/// Random small shapes (E 4..16, top_k 1..4, M 1..5, H and I multiples of 32 up to 256):
/// the router (random and tied scores), the linear in all three formats with and without
/// the GeGLU epilogue and with x per token or per slot, the generic Q4 route (auto with
/// K % 32 != 0 and forced), a forced expert-chunk split, an out-of-range id, the combine and
/// the whole block.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for ties in [false, true] {
        let experts = random_expert_count(rng);
        cases.push(boxed(MoeRouteCase {
            m: rng.random_range(1..=5),
            experts,
            top_k: rng.random_range(1..=4.min(experts)),
            ties,
        }));
    }
    cases.extend(linear_cases(rng));
    cases.extend(combine_and_block_cases(rng));
    cases
}

/// An expert count of the random cases.
fn random_expert_count(rng: &mut Rng) -> usize {
    rng.random_range(4..=16)
}

/// A Q4 expert format of the model's group sizes.
fn random_q4(rng: &mut Rng) -> ExpertFormat {
    ExpertFormat::Q4 {
        group: [32, 64, 128][rng.random_range(0..3)],
    }
}

/// The expert linear in all three formats (GeGLU epilogue or not, x per token or per
/// slot, a slot pool or not), the generic Q4 route auto and forced, and a forced
/// expert-chunk split.
fn linear_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for format in [
        ExpertFormat::F32,
        ExpertFormat::F16,
        random_q4(rng),
        random_q4(rng),
    ] {
        let group = group_of(format);
        let mut c = MoeLinearCase::new(
            rng.random_range(1..=5),
            rng.random_range(1..=4),
            random_expert_count(rng),
            2 * rng.random_range(1..=64),
            group * rng.random_range(1..=256 / group),
            format,
            route_for(format),
        );
        c.epilogue = if rng.random_bool(0.5) {
            MoeEpilogue::Geglu
        } else {
            MoeEpilogue::None
        };
        c.x_per_slot = rng.random_bool(0.5);
        if rng.random_bool(0.5) {
            c.pool = Some(c.top_k.max(rng.random_range(1..=4)));
        }
        cases.push(boxed(c));
    }
    // K % 32 != 0: only the generic Q4 route is eligible.
    let mut c = MoeLinearCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4),
        random_expert_count(rng),
        rng.random_range(1..=40),
        8 * (2 * rng.random_range(0..12) + 1),
        ExpertFormat::Q4 { group: 8 },
        MoeLinearRoute::Q4Generic,
    );
    c.invalid_slot = true;
    cases.push(boxed(c));
    // The generic route forced on a grouped-eligible shape, with the epilogue.
    let format = random_q4(rng);
    let mut c = MoeLinearCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4),
        random_expert_count(rng),
        2 * rng.random_range(1..=40),
        group_of(format) * rng.random_range(1..=256 / group_of(format)),
        format,
        MoeLinearRoute::Q4Generic,
    );
    c.force = true;
    c.epilogue = MoeEpilogue::Geglu;
    cases.push(boxed(c));
    // A forced split into chunks of a few experts, any format.
    let format = random_format(rng);
    let (n, k) = (2 * rng.random_range(1..=32), 128);
    let mut c = MoeLinearCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4),
        random_expert_count(rng),
        n,
        k,
        format,
        route_for(format),
    );
    c.split = Some(rng.random_range(1..=3));
    c.invalid_slot = rng.random_bool(0.5);
    c.epilogue = if rng.random_bool(0.5) {
        MoeEpilogue::Geglu
    } else {
        MoeEpilogue::None
    };
    cases.push(boxed(c));
    cases
}

/// The combine, the whole block, and the down projection + combine routes.
fn combine_and_block_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    cases.push(boxed(MoeCombineCase {
        m: rng.random_range(1..=5),
        top_k: rng.random_range(1..=4),
        h: 32 * rng.random_range(1..=8),
    }));
    let experts = random_expert_count(rng);
    let format = random_format(rng);
    let g = group_of(format);
    let mut c = MoeBlockCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4.min(experts)),
        experts,
        g * rng.random_range(1..=256 / g),
        g * rng.random_range(1..=128 / g),
        format,
    );
    c.fused_geglu = rng.random_bool(0.5);
    if rng.random_bool(0.5) {
        c.down = BlockDown::Separate;
    }
    cases.push(boxed(c));
    // Down projection + combine: fused (Q4, M <= 4; sometimes split into expert chunks,
    // which then accumulate), and the separate route (dense, or M = 5).
    let format = random_q4(rng);
    let mut c = MoeDownCombineCase::new(
        rng.random_range(1..=4),
        rng.random_range(1..=4),
        random_expert_count(rng),
        rng.random_range(1..=80),
        group_of(format) * rng.random_range(1..=256 / group_of(format)),
        format,
        MoeCombineRoute::Q4Fused,
    );
    c.x_per_token = rng.random_bool(0.3);
    c.invalid_slot = rng.random_bool(0.5);
    if rng.random_bool(0.5) {
        c.split = Some(rng.random_range(1..=3));
    }
    cases.push(boxed(c));
    let format = random_format(rng);
    let m = if matches!(format, ExpertFormat::Q4 { .. }) {
        5
    } else {
        rng.random_range(1..=5)
    };
    let c = MoeDownCombineCase::new(
        m,
        rng.random_range(1..=4),
        random_expert_count(rng),
        rng.random_range(1..=80),
        group_of(format) * rng.random_range(1..=256 / group_of(format)),
        format,
        MoeCombineRoute::Separate(route_for(format)),
    );
    cases.push(boxed(c));
    cases
}

/// Gemma 4 26B-A4B: hidden 2816, expert intermediate 704, 128 experts, top-8.
pub const A4B_HIDDEN: usize = 2816;
pub const A4B_INTER: usize = 704;
pub const A4B_EXPERTS: usize = 128;
pub const A4B_TOP_K: usize = 8;

/// Routings per run so that each run reads its experts from memory: disjoint expert sets
/// cover all 128 experts (M = 1: 16 sets of 8; M = 3: 5 sets of 24).
fn a4b_copies(m: usize) -> usize {
    A4B_EXPERTS / (m * A4B_TOP_K)
}

fn a4b_linear(
    m: usize,
    n: usize,
    k: usize,
    epilogue: MoeEpilogue,
    per_slot: bool,
) -> MoeLinearCase {
    let mut c = MoeLinearCase::new(
        m,
        A4B_TOP_K,
        A4B_EXPERTS,
        n,
        k,
        ExpertFormat::Q4 { group: 32 },
        MoeLinearRoute::Q4Grouped,
    );
    c.epilogue = epilogue;
    c.x_per_slot = per_slot;
    c.copies = a4b_copies(m);
    c.pool = Some(m * A4B_TOP_K);
    c.packed = true;
    c
}

/// The 26B-A4B MoE shapes at M = 1 (decode) and 3 (verify), Q4 group 32: the router, the
/// gate_up projection with the GeGLU epilogue and without, the down projection (x per
/// slot), the combine, the fused down + combine, and the whole block both ways (3 and 4
/// dispatches per routing). Us/run covers every routing of a run.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for m in [1, 3] {
        cases.push(boxed(MoeRouteCase {
            m,
            experts: A4B_EXPERTS,
            top_k: A4B_TOP_K,
            ties: false,
        }));
        cases.push(boxed(a4b_linear(
            m,
            2 * A4B_INTER,
            A4B_HIDDEN,
            MoeEpilogue::Geglu,
            false,
        )));
        cases.push(boxed(a4b_linear(
            m,
            2 * A4B_INTER,
            A4B_HIDDEN,
            MoeEpilogue::None,
            false,
        )));
        cases.push(boxed(a4b_linear(
            m,
            A4B_HIDDEN,
            A4B_INTER,
            MoeEpilogue::None,
            true,
        )));
        cases.push(boxed(MoeCombineCase {
            m,
            top_k: A4B_TOP_K,
            h: A4B_HIDDEN,
        }));
        let mut c = MoeDownCombineCase::new(
            m,
            A4B_TOP_K,
            A4B_EXPERTS,
            A4B_HIDDEN,
            A4B_INTER,
            ExpertFormat::Q4 { group: 32 },
            MoeCombineRoute::Q4Fused,
        );
        c.copies = a4b_copies(m);
        c.packed = true;
        cases.push(boxed(c));
        for down in [BlockDown::Combined, BlockDown::Separate] {
            let mut c = MoeBlockCase::new(
                m,
                A4B_TOP_K,
                A4B_EXPERTS,
                A4B_HIDDEN,
                A4B_INTER,
                ExpertFormat::Q4 { group: 32 },
            );
            c.down = down;
            c.copies = a4b_copies(m);
            c.packed = true;
            cases.push(boxed(c));
        }
    }
    cases
}
