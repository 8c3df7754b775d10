//! [`Planner`]: builds the forward plans of one set of KV caches and keeps them, least
//! recently used first out, apart from the sequences the plans run on. A plan comes back
//! as an `Arc`: the caller holds it while it records on the state's sequences (a decode
//! loop fetches its plan once, not once a step), and a plan dropped from the cache stays
//! valid for whoever still holds it.

use super::forward::{ForwardPlan, LogitRows, PlanShape};
use super::plan_options::PlanOptions;
use super::target::Model;
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::ops::attention::KvCache;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Plans kept at most: a server's batches take every row count from 1 to `--parallel`,
/// prefill chunks end at any length, and each plan holds its activations.
const MAX_PLANS: usize = 16;

/// Numbers the planners of a process: a plan records only on the state whose caches it
/// binds.
static NEXT_PLANNER: AtomicU64 = AtomicU64::new(1);

/// The forward plans built so far over one state's caches, keyed by (rows, logit rows), at
/// most [`MAX_PLANS`], and the options new plans are built with.
pub(super) struct Planner {
    id: u64,
    plans: HashMap<(usize, LogitRows), (Arc<ForwardPlan>, u64)>,
    /// Counts plan requests: the "last used" stamp.
    clock: u64,
    options: PlanOptions,
}

impl Planner {
    pub(super) fn new() -> Planner {
        Planner {
            id: NEXT_PLANNER.fetch_add(1, Ordering::Relaxed),
            plans: HashMap::new(),
            clock: 0,
            options: PlanOptions::default(),
        }
    }

    /// The plan of `m` rows with `rows` logits over `caches`, built on first use (the
    /// least recently used plan goes when [`MAX_PLANS`] are held).
    pub(super) fn plan(
        &mut self,
        ctx: &GpuContext,
        model: &Model,
        caches: &[Option<KvCache>],
        m: usize,
        rows: LogitRows,
    ) -> Result<Arc<ForwardPlan>> {
        let key = (m, rows);
        self.clock += 1;
        let now = self.clock;
        if let Some((plan, used)) = self.plans.get_mut(&key) {
            *used = now;
            return Ok(plan.clone());
        }
        let mut plan = ForwardPlan::new(
            ctx,
            &model.spec,
            model.weights(),
            caches,
            model.shared(),
            PlanShape {
                m,
                logit_rows: rows,
                options: self.options,
            },
        )?;
        plan.planner = self.id;
        let plan = Arc::new(plan);
        if self.plans.len() >= MAX_PLANS {
            if let Some(oldest) = self
                .plans
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
            {
                self.plans.remove(&oldest);
            }
        }
        self.plans.insert(key, (plan.clone(), now));
        Ok(plan)
    }

    /// A plan already built, if it is still held.
    pub(super) fn built(&self, m: usize, rows: LogitRows) -> Option<&ForwardPlan> {
        self.plans.get(&(m, rows)).map(|(plan, _)| &**plan)
    }

    /// Refuses a plan this planner did not build (it binds another state's caches).
    pub(super) fn check_own(&self, plan: &ForwardPlan) -> Result<()> {
        if plan.planner == self.id {
            Ok(())
        } else {
            Err(Error::invalid(
                "model",
                format!("plan of {} rows to record", plan.m),
                "one built by this KvState's plan",
                "a plan over other caches",
            ))
        }
    }

    pub(super) fn options(&self) -> PlanOptions {
        self.options
    }

    /// Plans from now on are built with `options`; drops the plans built so far when they
    /// change.
    pub(super) fn set_options(&mut self, options: PlanOptions) {
        if self.options != options {
            self.options = options;
            self.plans.clear();
        }
    }

    pub(super) fn len(&self) -> usize {
        self.plans.len()
    }
}
