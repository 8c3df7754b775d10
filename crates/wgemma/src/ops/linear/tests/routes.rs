//! Route choice by shape and device limits, the guards a refusal names, and the matvec grid.

use super::*;

#[test]
fn route_choice_by_shape() {
    let c = caps();
    assert_eq!(choose(1, 1536, 32, &c).unwrap(), LinearRoute::Q4Gemv);
    assert_eq!(choose(1, 64, 16, &c).unwrap(), LinearRoute::Q4Gemv);
    assert_eq!(choose(3, 1536, 128, &c).unwrap(), LinearRoute::Q4LinearM3);
    for m in [2, 4, 5, 8, 9] {
        assert_eq!(
            choose(m, 1536, 32, &c).unwrap(),
            LinearRoute::Q4LinearSmallM,
            "M = {m}"
        );
    }
    for m in [10, 17, 128] {
        assert_eq!(
            choose(m, 1536, 32, &c).unwrap(),
            LinearRoute::Q4Gemm,
            "M = {m}"
        );
    }
    // K % 32 != 0 rules out the matvec routes.
    assert_eq!(choose(1, 40, 8, &c).unwrap(), LinearRoute::Q4Generic);
    assert_eq!(choose(3, 40, 8, &c).unwrap(), LinearRoute::Q4Gemm);
}

#[test]
fn route_choice_by_device_limits() {
    // Workgroup storage below the GEMM's 16 KiB: M = 5 falls back to the generic route.
    let small = DeviceCaps {
        max_workgroup_storage: 8192,
        ..caps()
    };
    assert_eq!(choose(5, 256, 32, &small).unwrap(), LinearRoute::Q4Generic);
    // The portable matvec needs 16 KiB too; the subgroup one none.
    assert_eq!(choose(1, 256, 32, &small).unwrap(), LinearRoute::Q4Generic);
    let tiny = DeviceCaps {
        max_workgroup_storage: 4096,
        ..caps()
    };
    assert_eq!(choose(1, 256, 32, &tiny).unwrap(), LinearRoute::Q4Generic);
    let tiny_sg = DeviceCaps {
        subgroups: true,
        ..tiny
    };
    assert_eq!(choose(1, 256, 32, &tiny_sg).unwrap(), LinearRoute::Q4Gemv);
    // 128 invocations: only the generic route (64) remains.
    let narrow = DeviceCaps {
        max_invocations_per_workgroup: 128,
        ..caps()
    };
    assert_eq!(choose(1, 256, 32, &narrow).unwrap(), LinearRoute::Q4Generic);
}

#[test]
fn no_route_names_every_failed_guard() {
    let none = DeviceCaps {
        max_invocations_per_workgroup: 32,
        ..caps()
    };
    match choose(3, 40, 8, &none) {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, "q4_linear");
            let text = failed.join("\n");
            for want in [
                "q4_gemv: M == 1 (found 3)",
                "q4_gemv: K % 32 == 0",
                "q4_linear_m3: K % 32 == 0",
                "q4_gemm: device allows 256 invocations",
                "q4_generic: device allows 64 invocations",
            ] {
                assert!(text.contains(want), "missing `{want}` in:\n{text}");
            }
            assert!(!text.contains("q4_gemm: M >= 2"), "{text}");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    // A forced route reports only its own guards.
    let forced = choose_q4_route(
        Q4Shape {
            m: 3,
            k: 64,
            group: 32,
        },
        &caps(),
        false,
        Some(LinearRoute::Q4Gemv),
        || "shapes".into(),
    );
    match forced {
        Err(Error::NoRoute { failed, shapes, .. }) => {
            assert_eq!(failed, vec!["q4_gemv: M == 1 (found 3)".to_string()]);
            assert_eq!(shapes, "shapes");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    assert!(choose_q4_route(
        Q4Shape {
            m: 1,
            k: 64,
            group: 32
        },
        &caps(),
        false,
        Some(LinearRoute::DenseF32),
        String::new,
    )
    .is_err());
}

#[test]
fn matvec_grid_covers_every_row() {
    // 32 rows per workgroup (8 units x 4 rows): the lm_head needs 8192 workgroups.
    let ctx = test_context();
    let (_, w) = q4_weight(1000, 64, 32, None);
    let (x, y) = io(1, 64, 1000);
    let lin = q4_linear(ctx, &x, &w, &y).unwrap();
    assert_eq!(lin.kernels()[0].grid().count(), 1000u64.div_ceil(32));
}
