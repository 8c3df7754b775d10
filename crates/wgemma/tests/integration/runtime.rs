//! Runtime tests on the real adapter (lavapipe in CI): context, folded dispatch, readback.

use wgemma::gpu::test_context;
use wgemma::gpu::{read_tensor_f32, run_kernels, ContextOptions, DType, GpuContext, Tensor};
use wgemma::ops::softcap::{softcap, softcap_ref};

/// The folded-grid tests run softcap (a one-dispatch elementwise op, 256 per workgroup);
/// a cap above the inputs keeps the outputs distinct (0..1000 map to 0..~999).
const CAP: f32 = 4096.0;

/// Elements of `got` that differ from softcap of `a` (beyond f32 rounding of tanh).
fn mismatches(a: &[f32], got: &[f32]) -> usize {
    let want = softcap_ref(a, CAP);
    got.iter()
        .zip(&want)
        .filter(|(g, w)| (**g - **w).abs() > 1e-3 * w.abs().max(1.0))
        .count()
}

/// A kernel whose grid had to fold to 2-D (device limit lowered to 16 workgroups per
/// dimension) still touches every element exactly once and nothing past the end.
#[test]
fn folded_grid_kernel_covers_every_element() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(16),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(ctx.limits.max_compute_workgroups_per_dimension, 16);
    // 70 workgroups of 256 -> folds to 9 x 8; the last row is partial.
    let n = 70 * 256 - 13;
    let a: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ta = Tensor::from_f32(&ctx, "a", &[n], &a).unwrap();
    // A mismatched output is refused, not silently truncated.
    let longer = Tensor::zeros(&ctx, "longer", &[n + 1], DType::F32).unwrap();
    assert!(softcap(&ctx, &ta, &longer, CAP).is_err());
    let out = Tensor::from_f32(&ctx, "out", &[n], &vec![-1.0; n]).unwrap();
    let kernel = softcap(&ctx, &ta, &out, CAP).unwrap();
    let g = kernel.grid();
    assert!(g.y > 1, "expected a folded grid, got {g:?}");
    run_kernels(&ctx, &[kernel]);
    let got = pollster::block_on(read_tensor_f32(&ctx, &out)).unwrap();
    // The output started at -1: an element no workgroup reached stays there.
    assert_eq!(mismatches(&a, &got), 0);
}

/// At the real device limit: 65536 workgroups (one more than 65535) fold and run.
#[test]
fn folded_grid_at_real_limit() {
    let ctx = test_context();
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let n = (max + 1) * 256;
    let a: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ta = Tensor::from_f32(ctx, "a", &[n], &a).unwrap();
    let out = Tensor::zeros(ctx, "out", &[n], DType::F32).unwrap();
    let kernel = softcap(ctx, &ta, &out, CAP).unwrap();
    assert!(kernel.grid().y > 1);
    run_kernels(ctx, &[kernel]);
    let got = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
    assert_eq!(mismatches(&a, &got), 0);
}

#[test]
fn context_requests_adapter_limits() {
    let ctx = test_context();
    let adapter_limits = ctx.adapter.limits();
    assert_eq!(
        ctx.limits.max_storage_buffer_binding_size,
        adapter_limits.max_storage_buffer_binding_size
    );
    assert_eq!(
        ctx.device.limits().max_buffer_size,
        adapter_limits.max_buffer_size
    );
    // Optional features are a subset of what the adapter offers.
    assert!(ctx.adapter.features().contains(ctx.features));
}

#[test]
fn portable_context_has_no_optional_features() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        portable: true,
        ..Default::default()
    })
    .unwrap();
    assert!(ctx.features.is_empty());
}

#[test]
fn missing_backend_is_a_clear_error() {
    // No adapter on an empty backend set: the error names the fix.
    let err = match GpuContext::new_blocking(ContextOptions {
        backends: Some(wgpu::Backends::empty()),
        ..Default::default()
    }) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("an empty backend set produced an adapter"),
    };
    assert!(err.contains("mesa-vulkan-drivers"), "{err}");
}
