//! The f16 prefill GEMM routes: route choice with and without f16 and cooperative matrices,
//! the GEMM ceiling, and the f16 GEMM against its CPU reference on the test adapter
//! (lavapipe offers shader-f16; the cooperative-matrix route is checked on the H200 with
//! `wgemma ops check --filter q4_gemm_coop`, BENCHMARKS.md "Prefill, session 5").

use super::super::cases::prefill_cases;
use super::super::*;
use crate::gpu::{ContextOptions, GemmCeiling};
use crate::harness::{assert_cases_pass, assert_folded_case_passes, rng, test_context};

fn caps(shader_f16: bool, coop: bool, subgroup: u32) -> DeviceCaps {
    DeviceCaps {
        max_invocations_per_workgroup: 1024,
        max_workgroup_size_x: 1024,
        max_workgroup_storage: 49152,
        subgroups: true,
        min_subgroup_size: subgroup,
        max_subgroup_size: subgroup,
        shader_f16,
        coop_16x16_f16: coop,
        int8_activations: false,
        gemm_int8: true,
    }
}

fn choose(m: usize, k: usize, caps: &DeviceCaps) -> Result<LinearRoute> {
    choose_q4_route(Q4Shape { m, k, group: 32 }, caps, true, None, String::new)
}

#[test]
fn prefill_rows_take_the_fastest_gemm_the_device_has() {
    use LinearRoute::*;
    let all = caps(true, true, 32);
    assert_eq!(
        choose(PREFILL_GEMM_MIN_ROWS, 1536, &all).unwrap(),
        Q4GemmCoop
    );
    assert_eq!(choose(4096, 6144, &all).unwrap(), Q4GemmCoop);
    // Below the threshold the f32 GEMM (M >= 5) stays.
    assert_eq!(
        choose(PREFILL_GEMM_MIN_ROWS - 1, 1536, &all).unwrap(),
        Q4Gemm
    );
    // No cooperative matrices, or subgroups of another width: the f16 vector GEMM.
    assert_eq!(choose(64, 1536, &caps(true, false, 32)).unwrap(), Q4GemmF16);
    assert_eq!(choose(64, 1536, &caps(true, true, 64)).unwrap(), Q4GemmF16);
    // The f16 route applies one scale per 32-k step: groups of 16 go to the f32 GEMM.
    let group16 = Q4Shape {
        m: 64,
        k: 1536,
        group: 16,
    };
    let f16_only = caps(true, false, 32);
    assert_eq!(
        choose_q4_route(group16, &f16_only, true, None, String::new).unwrap(),
        Q4Gemm
    );
    // No f16 at all: the f32 GEMM.
    assert_eq!(choose(64, 1536, &caps(false, false, 32)).unwrap(), Q4Gemm);
    // The tensor-core kernel's 48 KiB of workgroup memory.
    let small = DeviceCaps {
        max_workgroup_storage: 32768,
        ..all
    };
    assert_eq!(choose(64, 1536, &small).unwrap(), Q4GemmF16);
}

#[test]
fn forced_tensor_core_route_names_its_failed_guards() {
    let forced = choose_q4_route(
        Q4Shape {
            m: 8,
            k: 1536,
            group: 32,
        },
        &caps(true, false, 8),
        true,
        Some(LinearRoute::Q4GemmCoop),
        String::new,
    );
    match forced {
        Err(Error::NoRoute { failed, .. }) => {
            let text = failed.join("\n");
            for want in [
                "q4_gemm_coop: M >= 16 (found 8)",
                "q4_gemm_coop: 16x16x16 f16/f32 cooperative matrices",
                "q4_gemm_coop: subgroup size exactly 32 (found 8..=8)",
            ] {
                assert!(text.contains(want), "missing `{want}` in:\n{text}");
            }
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
}

/// lavapipe: shader-f16 and no cooperative matrices, so 64 rows take the f16 GEMM; a
/// context with the GEMM ceiling at f32 takes the f32 one.
#[test]
fn test_adapter_routes_and_the_gemm_ceiling() {
    let ctx = test_context();
    let caps = DeviceCaps::of(ctx);
    assert!(
        caps.shader_f16,
        "the test adapter (lavapipe) offers shader-f16: {}",
        ctx.describe()
    );
    assert!(!ctx.has_coop_16x16_f16(), "{}", ctx.describe());
    let host = quantize_q4(&vec![0.25; 96 * 64], 96, 64, 32).unwrap();
    let w = Q4Weight::upload(ctx, &host).unwrap();
    let x = Tensor::zeros(ctx, "x", &[64, 64], DType::F32).unwrap();
    let y = Tensor::zeros(ctx, "y", &[64, 96], DType::F32).unwrap();
    let linear = q4_linear(ctx, &x, &w, &y).unwrap();
    assert_eq!(linear.route(), LinearRoute::Q4GemmF16);

    let f32_only = GpuContext::new_blocking(ContextOptions {
        gemm: GemmCeiling::F32,
        ..Default::default()
    })
    .unwrap();
    let w = Q4Weight::upload(&f32_only, &host).unwrap();
    let x = Tensor::zeros(&f32_only, "x", &[64, 64], DType::F32).unwrap();
    let y = Tensor::zeros(&f32_only, "y", &[64, 96], DType::F32).unwrap();
    let linear = q4_linear(&f32_only, &x, &w, &y).unwrap();
    assert_eq!(linear.route(), LinearRoute::Q4Gemm);
}

#[test]
fn f16_gemm_matches_the_reference() {
    let ctx = test_context();
    for seed in 0..2 {
        let cases = prefill_cases(&DeviceCaps::of(ctx), &mut rng(7000 + seed));
        assert!(!cases.is_empty(), "no f16 GEMM cases on {}", ctx.describe());
        assert_cases_pass(&cases, seed..seed + 1);
    }
}

/// More n-tiles than the folded context's 8 workgroups per dimension: the 2-D grid's flat
/// index and its bound check.
#[test]
fn f16_gemm_on_a_folded_grid() {
    let mut case = Q4LinearCase::new(40, 128 * 9 + 3, 96, 32, LinearRoute::Q4GemmF16);
    case.force = true;
    assert_folded_case_passes(&case, 0..1);
}

/// The tensor-core route needs exactly 16x16x16 with f16 inputs and an f32 accumulator,
/// and shader-f16 beside the cooperative-matrix feature.
#[test]
fn coop_configuration_is_matched_exactly() {
    use crate::gpu::offers_coop_16x16_f16;
    use wgpu::{CooperativeMatrixProperties as P, CooperativeScalarType as T, Features as F};
    let config = |m, n, k, ab, cr| P {
        m_size: m,
        n_size: n,
        k_size: k,
        ab_type: ab,
        cr_type: cr,
        saturating_accumulation: false,
    };
    let both = F::EXPERIMENTAL_COOPERATIVE_MATRIX | F::SHADER_F16;
    let h200 = [
        config(16, 16, 16, T::F16, T::F16),
        config(16, 8, 16, T::F16, T::F32),
        config(16, 16, 16, T::F16, T::F32),
    ];
    assert!(offers_coop_16x16_f16(both, &h200));
    assert!(!offers_coop_16x16_f16(
        F::EXPERIMENTAL_COOPERATIVE_MATRIX,
        &h200
    ));
    assert!(!offers_coop_16x16_f16(both, &h200[..2]));
    assert!(!offers_coop_16x16_f16(
        both,
        &[config(8, 8, 8, T::F32, T::F32)]
    ));
}

/// The split planner on the shapes E2B prefill runs (M = 512 and 4096): the 128 x 128
/// grids below [`gemm::FILL_WORKGROUPS`] split K, the ones that fill the GPU do not, every
/// split has at least [`gemm::MIN_SPLIT_STEPS`] steps and none is empty.
#[test]
fn small_tensor_core_grids_split_k() {
    use gemm::{plan, FILL_WORKGROUPS, MIN_SPLIT_STEPS};
    let coop = LinearRoute::Q4GemmCoop;
    // (M, N, K) -> splits: o_proj / down (N = 1536, 48 tiles), the N = 256 projections
    // (8 tiles), the per-layer projection's K = 256 (8 steps), gate_up (N = 12288).
    for (m, n, k, want) in [
        (512, 1536, 2048, 6),
        (512, 1536, 6144, 6),
        (512, 256, 1536, 12),
        (512, 1536, 256, 2),
        (512, 12288, 1536, 1),
        (4096, 1536, 6144, 1),
        (4096, 256, 1536, 4),
    ] {
        let p = plan(coop, m, n, k, true);
        assert_eq!(p.splits, want, "M {m} N {n} K {k}: {p:?}");
        assert_eq!(
            p.shader,
            if want > 1 {
                "q4_gemm_coop_split"
            } else {
                "q4_gemm_coop"
            }
        );
        let steps = k.div_ceil(32);
        let per = steps.div_ceil(p.splits);
        if p.splits > 1 {
            assert!(per >= MIN_SPLIT_STEPS, "{p:?}");
            assert!((p.splits - 1) * per < steps, "an empty split: {p:?}");
            assert!(p.tiles < FILL_WORKGROUPS as u64);
        }
        // With splits off (the default until checked on the H200) the unsplit kernel runs.
        let closed = plan(coop, m, n, k, false);
        assert_eq!((closed.shader, closed.splits), ("q4_gemm_coop", 1));
    }
    // The vector GEMMs never split.
    for route in [LinearRoute::Q4GemmF16, LinearRoute::Q4Gemm] {
        assert_eq!(plan(route, 512, 256, 1536, true).splits, 1);
    }
    // Every split count the planner can give leaves no split empty.
    for tiles in 1..FILL_WORKGROUPS as u64 {
        for k in (8..=4096).step_by(88) {
            let s = gemm::coop_splits(tiles, k);
            let steps = k.div_ceil(32);
            assert!(
                s >= 1 && (s - 1) * steps.div_ceil(s) < steps,
                "{tiles} {k} {s}"
            );
        }
    }
}

/// The split GEMM's combine (`q4_gemm_split_combine.wgsl`, portable: runs on lavapipe; the
/// split kernel itself is checked on the H200): partial blocks of 3 splits over a 200 x 300
/// result (partial tiles in both directions) summed in split order into a strided y at an
/// offset, bit for bit, and nothing outside the result written.
#[test]
fn split_combine_sums_the_partial_blocks_in_order() {
    let ctx = test_context();
    let (m, n, splits, stride, offset) = (200usize, 300usize, 3usize, 310usize, 5usize);
    let plan = gemm::GemmPlan {
        shader: "q4_gemm_coop_split",
        tile: [128, 128],
        splits,
        tiles: gemm::tiles(m, n, [128, 128]),
    };
    use rand::Rng as _;
    let mut r = rng(7100);
    let partials: Vec<f32> = (0..plan.partial_len())
        .map(|_| r.random_range(-1.0f32..1.0))
        .collect();
    let sentinel = -7.0f32;
    let y_init = vec![sentinel; m * stride];
    let params = Q4Params {
        m: m as u32,
        n: n as u32,
        k: 0,
        groups: 0,
        y_stride: stride as u32,
        y_offset: offset as u32,
        aux0: 0,
        aux1: 0,
        eps: 0.0,
        out_scale: 1.0,
        write_resid: 0,
        _pad: 0,
    };
    let tp = Tensor::from_f32(ctx, "partials", &[partials.len()], &partials).unwrap();
    let ty = Tensor::from_f32(ctx, "y", &[m, stride], &y_init).unwrap();
    let kernel = gemm::combine_kernel(ctx, plan, &params, &tp, &ty).unwrap();
    crate::gpu::run_kernels(ctx, &[kernel]);
    let got = pollster::block_on(crate::gpu::read_tensor_f32(ctx, &ty)).unwrap();
    let n_tiles = n.div_ceil(128);
    for row in 0..m {
        for col in 0..stride {
            let want = if (offset..offset + n).contains(&col) {
                let c = col - offset;
                let tile = (row / 128) * n_tiles + c / 128;
                let e = (row % 128) * 128 + c % 128;
                let mut sum = 0.0f32;
                for j in 0..splits {
                    sum += partials[(tile * splits + j) * 128 * 128 + e];
                }
                sum
            } else {
                sentinel
            };
            let g = got[row * stride + col];
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "y[{row}, {col}]: {g} vs {want}"
            );
        }
    }
}
