//! `runBench`: `wgemma bench` in the wasm package, on whatever WebGPU the JS host offers (a
//! browser, or Dawn under Node: `tools/browser/dawn/`). The same tests as the native
//! bench, through the same library suite ([`wgemma::session::bench::suite`]): `ppN`, `tgN @ dD`,
//! speculative rounds with oracle drafts and, for the E2B / E4B shapes, with the
//! published assistant's shape drafting; the result is the native `--json` report's
//! fields (those a page can measure) plus the decode test's greedy tokens.

mod options;

use crate::web::{bytes, js_error, open_context, parse_options, to_js, wgemma_error};
use js_sys::{Function, Promise};
use options::{BenchOptions, Plan};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use wgemma::gpu::{GpuContext, GpuErrors};
use wgemma::model::state::KvState;
use wgemma::session::bench::suite::run_suite;
use wgemma::session::{load_target, LoadHooks, LoadSource};

/// Runs `wgemma bench`'s tests on a synthetic model (`options.synthetic`) or on the model
/// artifact `model` (bytes, a Blob/File or a Response); `onProgress` gets a line per step.
/// Resolves with the report (the native `--json` fields a page can measure, and
/// `greedy_tokens`: the decode test's tokens, for comparison with the native run).
#[wasm_bindgen(js_name = runBench, unchecked_return_type = "Promise<any>")]
pub fn run_bench(
    #[wasm_bindgen(unchecked_param_type = "BenchOptions")] options: JsValue,
    #[wasm_bindgen(unchecked_optional_param_type = "FileSource")] model: JsValue,
    #[wasm_bindgen(unchecked_optional_param_type = "(line: string) => void")] on_progress: Option<
        Function,
    >,
) -> Promise {
    future_to_promise(async move {
        let options: BenchOptions = parse_options(&options, "bench options")?;
        let plan = options.plan().map_err(|m| js_error("WgemmaError", &m))?;
        let artifact =
            match (&plan.shape, model.is_undefined() || model.is_null()) {
                (Some(_), true) => None,
                (None, false) => Some(bytes(&model, "model artifact", false).await?),
                (Some(_), false) => {
                    return Err(js_error(
                        "WgemmaError",
                        "runBench: expected a synthetic shape or a model artifact, found both",
                    ))
                }
                (None, true) => return Err(js_error(
                    "WgemmaError",
                    "runBench: expected options.synthetic (tiny, e2b, e4b) or a model artifact, \
                     found neither",
                )),
            };
        let progress = |line: &str| {
            if let Some(f) = &on_progress {
                // A failing progress callback must not stop the measurement.
                let _ = f.call1(&JsValue::NULL, &line.into());
            }
        };
        let report = bench(&plan, artifact.as_deref(), &progress).await?;
        to_js(&report)
    })
}

/// Opens WebGPU, loads the model and runs the library's suite of tests: the report.
async fn bench(
    plan: &Plan,
    artifact: Option<&[u8]>,
    progress: &dyn Fn(&str),
) -> Result<serde_json::Value, JsValue> {
    let ctx = open_context().await?;
    // In a browser a validation error only reaches the console while the readbacks return
    // stale bytes: any error fails the bench.
    let gpu_errors = GpuErrors::collect(&ctx);
    progress(&format!("bench: loading on {}", ctx.describe()));
    let (mut state, load_ms, model_name) = load(&ctx, plan, artifact)?;
    progress(&format!("bench: loaded in {load_ms:.0} ms"));
    let suite = run_suite(&ctx, &mut state, plan.suite_plan(), progress)
        .await
        .map_err(wgemma_error)?;
    let mut report = suite.report(&ctx, state.model(), load_ms);
    report["model"] = model_name.into();
    report["dtype"] = plan.dtype.clone().into();
    report["webgpu_limits"] = false.into();
    gpu_errors.check().map_err(wgemma_error)?;
    Ok(report)
}

/// The target the tests run on, its load time and the report's `model`.
fn load(
    ctx: &GpuContext,
    plan: &Plan,
    artifact: Option<&[u8]>,
) -> Result<(KvState, f64, String), JsValue> {
    let options = plan
        .model_options()
        .map_err(|m| js_error("WgemmaError", &m))?;
    let (source, model_name) = match (plan.shape, artifact) {
        (Some(shape), _) => (
            LoadSource::Synthetic {
                shape,
                seed: plan.seed,
            },
            plan.synthetic.clone().unwrap_or_default(),
        ),
        (None, Some(file)) => (LoadSource::Artifact(file), "artifact".to_string()),
        (None, None) => unreachable!("run_bench checked for a source"),
    };
    let hooks = LoadHooks {
        format: plan.shape.map(|_| plan.format),
        options,
        ..LoadHooks::default()
    };
    let loaded = load_target(ctx, source, hooks).map_err(wgemma_error)?;
    Ok((loaded.state, loaded.load_ms, model_name))
}
