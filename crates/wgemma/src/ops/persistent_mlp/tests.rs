//! The persistent MLP on the test adapter: where it passes the device guards (a native GPU)
//! every check case runs against the CPU reference; where it does not (lavapipe: a CPU
//! adapter with 8-lane subgroups) the op must refuse with those reasons, not hang.
//! The shader's naga validation is `registry::every_shader_validates_with_naga`.

use super::*;
use crate::harness::{assert_cases_pass, test_context};
use crate::ops::linear::{quantize_q4, NormPrologueMode};

fn weight(ctx: &GpuContext, n: usize, k: usize) -> Q4Weight {
    let w: Vec<f32> = (0..n * k).map(|i| ((i % 13) as f32 - 6.0) * 0.01).collect();
    Q4Weight::upload(ctx, &quantize_q4(&w, n, k, 32).unwrap()).unwrap()
}

fn f32s(ctx: &GpuContext, label: &str, shape: &[usize]) -> Tensor {
    Tensor::zeros(ctx, label, shape, DType::F32).unwrap()
}

fn failed_guards(e: Error) -> Vec<String> {
    match e {
        Error::NoRoute { failed, .. } => failed,
        other => panic!("expected NoRoute, found {other}"),
    }
}

#[test]
fn runs_where_the_device_allows_and_refuses_with_reasons_elsewhere() {
    let ctx = test_context();
    let device = device_guards(ctx);
    if device.is_empty() {
        assert_cases_pass(&check_cases(ctx), 0..2);
        return;
    }
    assert!(
        check_cases(ctx).is_empty(),
        "cases offered on a refused device"
    );
    let (h, i) = (256, 512);
    let (gate_up, down) = (weight(ctx, 2 * i, h), weight(ctx, h, i));
    let (resid, w_in) = (f32s(ctx, "resid", &[1, h]), f32s(ctx, "w_in", &[h]));
    let (act, out) = (f32s(ctx, "act", &[1, i]), f32s(ctx, "out", &[1, h]));
    let prologue = NormPrologue {
        mode: NormPrologueMode::Norm,
        resid: &resid,
        branch: None,
        w_in: Some(&w_in),
        eps: 1e-6,
        out_scale: 1.0,
        resid_out: None,
    };
    let err = q4_mlp_persistent(ctx, &prologue, &gate_up, &down, &act, &out, 64).unwrap_err();
    let failed = failed_guards(err);
    for reason in &device {
        assert!(
            failed.contains(reason),
            "{reason:?} missing from {failed:?}"
        );
    }
    if ctx.info.device_type == wgpu::DeviceType::Cpu {
        assert!(
            failed.iter().any(|f| f.contains("a CPU adapter")),
            "{failed:?}"
        );
    }
}

#[test]
fn shape_guards_name_what_is_wrong() {
    let ctx = test_context();
    let (h, i) = (256, 512);
    let gate_up = weight(ctx, 2 * i, h);
    let failed = persistent_mlp_guards(ctx, 3, &gate_up, &weight(ctx, h, i));
    assert!(
        failed
            .iter()
            .any(|f| f.contains("one activation row (found 3)")),
        "{failed:?}"
    );
    let failed = persistent_mlp_guards(ctx, 1, &gate_up, &weight(ctx, h, 2 * i));
    assert!(
        failed
            .iter()
            .any(|f| f.contains("gate_up [2I, H] and down [H, I]")),
        "{failed:?}"
    );
    // A down projection too long for two vec4 words of act per lane.
    let long = weight(ctx, 64, 32 * 1024);
    assert!(down_split(&long).is_err());
}
