//! The persistent tail against the four kernels it replaces (bit for bit, several grids,
//! twice per kernel: the counters must be back at zero), the CPU reference, and refusals.

use super::cases::{random_cases, PersistentTailCase, TailData, TailGpu};
use super::q4_persistent_tail;
use crate::gpu::{read_tensor_f32, run_kernels};
use crate::harness::{assert_cases_pass, rng, test_context, OpCase};

fn case(workgroups: u32) -> PersistentTailCase {
    PersistentTailCase {
        hidden: 96,
        inter: 160,
        ple: 64,
        group: 32,
        workgroups,
        portable: true,
    }
}

fn read_outputs(gpu: &TailGpu) -> Vec<Vec<f32>> {
    let ctx = test_context();
    gpu.outputs()
        .iter()
        .map(|(_, t)| pollster::block_on(read_tensor_f32(ctx, t)).unwrap())
        .collect()
}

#[test]
fn tail_writes_what_the_four_kernels_write() {
    let ctx = test_context();
    let data = TailData::random(&case(1), &mut rng(7)).unwrap();
    let separate = data.upload(ctx, true).unwrap();
    run_kernels(ctx, &separate.kernels);
    let expected = read_outputs(&separate);
    // One workgroup, fewer than the smallest phase's units, and more than any phase has
    // (a CPU adapter runs every grid as one workgroup: q4_persistent_tail).
    for workgroups in [1, 2, 5, 64] {
        let gpu = data.upload(ctx, true).unwrap();
        let [a, b, c, d] = &gpu.kernels;
        let tail = q4_persistent_tail(ctx, [a, b, c, d], workgroups).unwrap();
        for run in 0..2 {
            // The second run starts again from the inputs: the tail overwrote h and o.
            let fresh = data.upload(ctx, true).unwrap();
            for (src, dst) in [(&fresh.h, &gpu.h), (&fresh.o, &gpu.o)] {
                let mut step = crate::gpu::Step::new(ctx);
                step.encoder().copy_buffer_to_buffer(
                    src.buffer(),
                    0,
                    dst.buffer(),
                    0,
                    src.byte_size(),
                );
                step.submit();
            }
            run_kernels(ctx, std::slice::from_ref(&tail));
            let got = read_outputs(&gpu);
            for (((name, _), got), want) in gpu.outputs().iter().zip(&got).zip(&expected) {
                assert_eq!(got, want, "{name}, grid {workgroups}, run {run}");
            }
        }
    }
}

#[test]
fn tail_matches_the_cpu_reference() {
    let mut r = rng(5);
    let mut cases: Vec<Box<dyn OpCase>> = vec![Box::new(case(1)), Box::new(case(7))];
    cases.extend(random_cases(&mut r));
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn tail_refuses_kernels_out_of_order_and_an_empty_grid() {
    let ctx = test_context();
    let data = TailData::random(&case(4), &mut rng(3)).unwrap();
    let gpu = data.upload(ctx, true).unwrap();
    let [a, b, c, d] = &gpu.kernels;
    let err = q4_persistent_tail(ctx, [b, a, c, d], 4)
        .unwrap_err()
        .to_string();
    assert!(err.contains("q4_matvec_norm expected"), "{err}");
    let err = q4_persistent_tail(ctx, [a, b, c, d], 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("workgroups"), "{err}");
}

/// The registry's tail shaders are `tail_source.rs` applied to today's matvec variants, the
/// phase driver and the entry (build.rs generates them; the registry's own staleness test
/// covers only `.wgsl` files).
#[test]
fn the_registry_holds_the_tail_freshly_generated() {
    use super::tail_source::{tail_source, TAIL_PHASES, TAIL_SHADERS};
    use crate::gpu::registry::shader;
    use crate::gpu::shader_meta;
    use crate::ops::linear::matvec_variants::{matvec_variant, MatvecFamily};
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ops");
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).unwrap();
    let driver = read(src.join("persistent_tail/q4_tail_phase.wgsli"));
    let entry = read(src.join("persistent_tail/q4_tail_entry.wgsli"));
    for (name, subgroup) in TAIL_SHADERS {
        let phases: Vec<String> = TAIL_PHASES
            .iter()
            .map(|&(_, norm)| {
                let variant = matvec_variant(MatvecFamily::Decode, norm, subgroup);
                shader_meta::expand_includes(&variant.entry_source(), &mut |inc| {
                    std::fs::read_to_string(src.join("linear").join(inc))
                        .map_err(|e| shader_meta::MetaError(e.to_string()))
                })
                .unwrap()
            })
            .collect();
        let registered = shader(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(
            registered.source,
            tail_source(&phases, &driver, &entry),
            "{name}: registry source is stale"
        );
        // Every phase's bindings moved to its own slots, activations coherent.
        assert_eq!(
            registered
                .source
                .matches("@coherent var<storage, read_write>")
                .count(),
            16,
            "{name}"
        );
        assert!(registered.source.contains("@binding(31)"), "{name}");
    }
}
