use super::cases::{encode, words};
use super::*;
use crate::gpu::{read_tensor_bytes, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, rng, test_context, OpCase};

fn case(rows: usize, k: usize, group: usize, dtype: SourceDtype) -> Box<dyn OpCase> {
    Box::new(QuantizeCase {
        rows,
        k,
        group,
        dtype,
        offsets: (0, 0, 0),
    })
}

#[test]
fn matches_cpu_quantiser_bit_for_bit() {
    let mut cases = Vec::new();
    for dtype in [SourceDtype::F32, SourceDtype::F16, SourceDtype::BF16] {
        // Odd group counts (a zero high half in the last scale word), several words per
        // group, and offsets into every buffer.
        cases.push(case(3, 40, 8, dtype));
        cases.push(case(64, 256, 32, dtype));
        cases.push(case(17, 384, 128, dtype));
        cases.push(Box::new(QuantizeCase {
            rows: 5,
            k: 64,
            group: 64,
            dtype,
            offsets: (3, 7, 2),
        }) as Box<dyn OpCase>);
    }
    assert_cases_pass(&cases, 0..4);
    let mut r = rng(19);
    let random: Vec<_> = (0..4).flat_map(|_| random_cases(&mut r)).collect();
    assert_cases_pass(&random, 0..2);
}

/// Every finite bf16 value, quantised against a spread of scales: each group holds its
/// scale-setting maximum and 31 swept values, so every rounding of `w / s` the format can
/// meet at these scales is compared with the CPU.
#[test]
fn every_bf16_value_against_many_scales() {
    let ctx = test_context();
    let group = 32;
    let sweep: Vec<f32> = (0..0x7f80u32)
        .map(|b| half::bf16::from_bits(b as u16).to_f32())
        .collect();
    for max in [7.0f32, 1.0, 0.011, 3.0e-4, 6.0e-8, 250.0] {
        let mut values = Vec::new();
        for (i, chunk) in sweep.chunks(group - 1).enumerate() {
            values.push(if i % 2 == 0 { max } else { -max });
            values.extend(
                chunk
                    .iter()
                    .map(|&v| v.min(max) * if i % 3 == 0 { -1.0 } else { 1.0 }),
            );
            values.resize(values.len().next_multiple_of(group), 0.0);
        }
        let rows = values.len() / group;
        let bytes = encode(&values, SourceDtype::BF16);
        let expected = q4_quantize_ref(&bytes, SourceDtype::BF16, rows, group, group).unwrap();
        let src = Tensor::from_u32(ctx, "src", &[bytes.len() / 4], &words(&bytes)).unwrap();
        let packed = Tensor::zeros(ctx, "packed", &[expected.packed.len()], DType::U32).unwrap();
        let scales = Tensor::zeros(ctx, "scales", &[expected.scales.len()], DType::U32).unwrap();
        let dst = Q4Dest {
            packed: &packed,
            packed_offset: 0,
            scales: &scales,
            scale_offset: 0,
        };
        let kernel = q4_quantize(ctx, &src, SourceDtype::BF16, 0, rows, group, dst).unwrap();
        run_kernels(ctx, &[kernel]);
        let got_packed: Vec<u32> = bytemuck::pod_collect_to_vec(
            &pollster::block_on(read_tensor_bytes(ctx, &packed)).unwrap(),
        );
        let got_scales: Vec<u32> = bytemuck::pod_collect_to_vec(
            &pollster::block_on(read_tensor_bytes(ctx, &scales)).unwrap(),
        );
        assert_eq!(got_scales, expected.scales, "scales, max {max}");
        let first_bad = got_packed
            .iter()
            .zip(&expected.packed)
            .position(|(a, b)| a != b);
        assert_eq!(first_bad, None, "packed words, max {max}");
    }
}

#[test]
fn host_check_names_non_finite_weights_and_oversized_scales() {
    let mut v = vec![0.5f32; 64];
    v[37] = f32::NAN;
    let bf = encode(&v, SourceDtype::BF16);
    let err = check_q4_source(&bf, SourceDtype::BF16, 32, 32, 10, "`w`")
        .unwrap_err()
        .to_string();
    // Element 10 * 32 + 37 of the tensor.
    assert!(
        err.contains("element 357") && err.contains("`w`") && err.contains("finite"),
        "{err}"
    );
    let err = check_finite_source(&bf, SourceDtype::BF16, 5, "`w`")
        .unwrap_err()
        .to_string();
    assert!(err.contains("element 42"), "{err}");
    v[37] = 1.0e6;
    check_finite_source(&encode(&v, SourceDtype::F32), SourceDtype::F32, 0, "`w`").unwrap();
    let err = check_q4_source(
        &encode(&v, SourceDtype::F32),
        SourceDtype::F32,
        32,
        32,
        0,
        "`w`",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("row 1 group 0") && err.contains("f16"),
        "{err}"
    );
    v[37] = f32::INFINITY;
    let h = encode(&v, SourceDtype::F16);
    assert!(check_q4_source(&h, SourceDtype::F16, 32, 32, 0, "`w`").is_err());
    v[37] = -65504.0;
    check_q4_source(
        &encode(&v, SourceDtype::F16),
        SourceDtype::F16,
        32,
        32,
        0,
        "`w`",
    )
    .unwrap();
}

#[test]
fn rejects_bad_plans() {
    let ctx = test_context();
    // 256 bf16 weights: 8 groups of 32; the destinations hold 4 groups.
    let src = Tensor::zeros(ctx, "src", &[128], DType::U32).unwrap();
    let packed = Tensor::zeros(ctx, "packed", &[16], DType::U32).unwrap();
    let scales = Tensor::zeros(ctx, "scales", &[2], DType::U32).unwrap();
    let dst = Q4Dest {
        packed: &packed,
        packed_offset: 0,
        scales: &scales,
        scale_offset: 0,
    };
    let invalid = |r: Result<Kernel>, what: &str| match r {
        Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
        other => panic!("expected Invalid({what}), got {other:?}"),
    };
    let q = |groups, group, src_offset, dst| {
        q4_quantize(ctx, &src, SourceDtype::BF16, src_offset, groups, group, dst)
    };
    q(4, 32, 0, dst).unwrap();
    invalid(q(4, 12, 0, dst), "group size");
    invalid(q(0, 32, 0, dst), "groups");
    invalid(q(4, 32, 129, dst), "source read");
    invalid(q(5, 32, 0, dst), "packed words");
    invalid(
        q(
            4,
            32,
            0,
            Q4Dest {
                scale_offset: 1,
                ..dst
            },
        ),
        "scale words",
    );
    invalid(
        q(
            4,
            32,
            0,
            Q4Dest {
                scales: &packed,
                ..dst
            },
        ),
        "buffers of src",
    );
    let f = Tensor::zeros(ctx, "f", &[64], DType::F32).unwrap();
    invalid(
        q4_quantize(ctx, &f, SourceDtype::F32, 0, 1, 32, dst),
        "dtype of src",
    );
}

#[test]
fn folded_grid_covers_every_group() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(3),
        ..Default::default()
    })
    .unwrap();
    // 40 rows x 8 groups = 320 groups -> 160 invocations -> 3 workgroups of 64 -> 2 x 2.
    let case = QuantizeCase {
        rows: 40,
        k: 256,
        group: 32,
        dtype: SourceDtype::BF16,
        offsets: (0, 0, 0),
    };
    let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
    assert!(report.pass(), "{report}");
}
