//! Harness cases: one step (append of `rows` new rows + attention) on a cache that already
//! holds `start` positions, against the f64 reference over the logical K/V history.

use super::*;
use crate::gpu::DType;
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// f32 online softmax vs f64 reference: outputs are convex combinations of V in [-1, 1], and
/// a score's f32 rounding grows with the score (an error d in a score moves its weight by
/// ~d), so the bounds grow with the scores' spread (`score_std`, from the case's q and k).
/// Measured on lavapipe: max_abs 4e-6, nmse 2e-12 at scores of std 7.5 (D 512, unit q) and
/// max_abs 2.4e-5 at std 45 (q x 6): ~5e-7 per unit of std. The bound is 2e-5 up to std
/// 7.5 and grows in proportion beyond (nmse with its square): ~5x what was measured, and
/// far below what a wrong mask, tile or rescale gives (errors of the order of the outputs).
pub fn attention_check(score_std: f64) -> Check {
    let growth = (score_std / 7.5).max(1.0);
    Check::Close {
        max_abs: (2e-5 * growth) as f32,
        nmse: 1e-10 * growth * growth,
    }
}

/// The spread of a case's scores q.k (independent values: the product of the root mean
/// squares of q and k times the square root of the head dim; scores are not scaled).
fn score_std(q: &[f32], k: &[f32], head_dim: usize) -> f64 {
    let rms = |x: &[f32]| {
        (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len().max(1) as f64).sqrt()
    };
    rms(q) * rms(k) * (head_dim as f64).sqrt()
}

/// The tiled route on the tensor cores (`attention_tiled_coop.wgsl`): Q, K, V and P rounded
/// to f16 (2^-11 relative each), so scores move by ~|s| 2^-11 and outputs by ~1e-3 at unit
/// scores; bounded for the large-score cases (scores of std ~30, where a 1e-2 score error
/// shifts weights by 1%): f16-level bounds, still far below what a wrong mask, tile or
/// rescale gives (errors of the order of the outputs, ~0.3). On an H200 the route's errors
/// are max_abs <= 3.9e-3, nmse <= 7e-7 at unit scale; 1.75e-2, 3.0e-6 at q x 6.
pub const ATTENTION_COOP_CHECK: Check = Check::Close {
    max_abs: 4e-2,
    nmse: 2e-4,
};

/// One attention step.
#[derive(Debug, Clone)]
pub struct AttentionCase {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Sliding window (None: full attention).
    pub window: Option<usize>,
    /// Rows of this step (M).
    pub rows: usize,
    /// Positions already in the cache.
    pub start: usize,
    /// Ring sizing (sliding): the most rows of one forward (>= rows).
    pub max_rows: usize,
    /// Full cache capacity (>= start + rows).
    pub max_len: usize,
    pub k_eq_v: bool,
    /// Chunk threshold (None: the device's binding limit).
    pub chunk_bytes: Option<u64>,
    /// Scale of q (large values stress the softmax).
    pub q_scale: f32,
    /// Forced splits per chunk (None: planned).
    pub splits: Option<u32>,
    /// Forced route (None: [`Attention::plan`]'s choice; forced splits alone mean split_k).
    pub route: Option<AttentionRoute>,
    /// Caches to rotate through (benchmarks: keep small caches out of L2).
    pub copies: usize,
    /// q is raw: the decode route applies q_norm and RoPE itself ([`FoldQ`]).
    pub fold_q: bool,
    /// Which decode-route kernels run the step.
    pub decode_kernels: DecodeKernelChoice,
}

/// The decode route's kernel sets an [`AttentionCase`] can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeKernelChoice {
    /// What the model runs by default: the latency-shaped kernels where built, else the
    /// classic partial + combine.
    Model,
    /// The classic partial + combine ([`Attention::disable_latency_decode`]).
    Classic,
}

impl AttentionCase {
    /// A case with defaults: full attention, max_len = start + rows, no chunking.
    pub fn new(heads: usize, kv_heads: usize, head_dim: usize, rows: usize, start: usize) -> Self {
        AttentionCase {
            heads,
            kv_heads,
            head_dim,
            window: None,
            rows,
            start,
            max_rows: rows,
            max_len: start + rows,
            k_eq_v: false,
            chunk_bytes: None,
            q_scale: 1.0,
            splits: None,
            route: None,
            copies: 1,
            fold_q: false,
            decode_kernels: DecodeKernelChoice::Model,
        }
    }

    pub fn sliding(mut self, window: usize, max_rows: usize) -> Self {
        self.window = Some(window);
        self.max_rows = max_rows.max(self.rows);
        self
    }

    fn layout(&self) -> KvLayout {
        match self.window {
            Some(window) => KvLayout::Sliding {
                window,
                max_rows: self.max_rows,
            },
            None => KvLayout::Full {
                max_len: self.max_len.max(self.start + self.rows),
            },
        }
    }

    /// With `fold_q` the kernel gets q raw and the reference q_norm + RoPE'd (the layer's
    /// own rope: proportional on full layers, default on sliding ones): (that rope, the
    /// random q_norm weight, the reference's q). Without, q itself.
    fn fold_q_reference(&self, rng: &mut Rng, q: &[f32]) -> (RopeConfig, Vec<f32>, Vec<f32>) {
        let (h, d) = (self.heads, self.head_dim);
        let q_rope = match self.window {
            Some(_) => RopeConfig::gemma4_sliding(d),
            None => RopeConfig::gemma4_full(d),
        };
        if !self.fold_q {
            return (q_rope, Vec::new(), q.to_vec());
        }
        let q_norm_weight: Vec<f32> = (0..d).map(|_| rng.random_range(0.5..1.5)).collect();
        let normed: Vec<f32> = q.chunks(d).flat_map(rms_normed).collect();
        let q_ref = keys_from_values(&normed, self.start, h, &q_norm_weight, &q_rope);
        (q_rope, q_norm_weight, q_ref)
    }

    /// Restricts `attention` to the case's decode kernels, then plans its step: the forced
    /// route, the forced split count, or the op's own choice.
    fn choose_kernels_and_plan(
        &self,
        attention: &mut Attention,
        m: usize,
        kv_len: usize,
    ) -> Result<AttentionPlan> {
        if self.decode_kernels != DecodeKernelChoice::Model {
            attention.disable_latency_decode();
        }
        match (self.route, self.splits) {
            (Some(route), splits) => attention.plan_route(route, m, kv_len, splits),
            (None, Some(s)) => plan::plan_with_splits(attention.geometry(), m, kv_len, s),
            (None, None) => attention.plan(m, kv_len),
        }
    }

    fn kv_len(&self) -> usize {
        self.start + self.rows
    }

    /// Keys the step must read (the union of the rows' windows).
    fn visible_keys(&self) -> usize {
        match self.window {
            Some(w) => self.kv_len().min(w + self.rows - 1),
            None => self.kv_len(),
        }
    }
}

/// The RMSNorm epsilon of the fold_q cases (Gemma 4's).
const FOLD_Q_EPS: f32 = 1e-6;

/// `x / sqrt(mean(x^2) + eps)` in f64 (the reference of q_norm before its weight).
fn rms_normed(x: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + FOLD_Q_EPS as f64).sqrt();
    x.iter().map(|&v| (v as f64 * inv) as f32).collect()
}

fn uniform(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0..1.0) * scale)
        .collect()
}

impl OpCase for AttentionCase {
    fn name(&self) -> String {
        format!(
            "attention {} m={} start={} heads={} kv_heads={} d={}{}{}{}{}{}{}{}{}",
            match self.window {
                Some(w) => format!("sliding w={w} max_rows={}", self.max_rows),
                None => "full".to_string(),
            },
            self.rows,
            self.start,
            self.heads,
            self.kv_heads,
            self.head_dim,
            if self.k_eq_v { " k=v" } else { "" },
            self.chunk_bytes
                .map_or(String::new(), |b| format!(" chunk_bytes={b}")),
            if self.q_scale != 1.0 {
                format!(" q_scale={}", self.q_scale)
            } else {
                String::new()
            },
            self.splits
                .map_or(String::new(), |s| format!(" splits={s}")),
            if self.copies > 1 {
                format!(" copies={}", self.copies)
            } else {
                String::new()
            },
            match self.route {
                Some(AttentionRoute::Decode) => " route=decode",
                Some(AttentionRoute::SplitK) => " route=split_k",
                Some(AttentionRoute::Tiled) => " route=tiled",
                None => "",
            },
            if self.fold_q { " fold_q" } else { "" },
            match self.decode_kernels {
                DecodeKernelChoice::Model => "",
                DecodeKernelChoice::Classic => " classic",
            },
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (h, kvh, d, m) = (self.heads, self.kv_heads, self.head_dim, self.rows);
        let kv_len = self.kv_len();
        // Only keys some row can see matter: older history is never generated.
        let first = self
            .window
            .map_or(0, |w| (self.start + 1).saturating_sub(w));
        let n_hist = kv_len - first;
        let row = kvh * d;
        let q = uniform(rng, m * h * d, self.q_scale);
        let v_hist = uniform(rng, n_hist * row, 1.0);
        let rope = RopeConfig::gemma4_full(d);
        let k_norm_weight: Vec<f32> = (0..d).map(|_| rng.random_range(0.5..1.5)).collect();
        let (k_hist, k_ref) = if self.k_eq_v {
            (
                None,
                keys_from_values(&v_hist, first, kvh, &k_norm_weight, &rope),
            )
        } else {
            let k = uniform(rng, n_hist * row, 1.0);
            (Some(k.clone()), k)
        };
        let (q_rope, q_norm_weight, q_ref) = self.fold_q_reference(rng, &q);
        let split = (self.start - first) * row;
        let positions: Vec<u32> = (self.start..kv_len).map(|p| p as u32).collect();
        let tq = Tensor::from_f32(ctx, "q", &[m, h, d], &q)?;
        let tpos = Tensor::from_u32(ctx, "positions", &[m], &positions)?;
        let tout = Tensor::zeros(ctx, "out", &[m, h, d], DType::F32)?;
        let tv = Tensor::from_f32(ctx, "v_new", &[m, kvh, d], &v_hist[split..])?;
        let tk = match &k_hist {
            Some(k) => Some(Tensor::from_f32(ctx, "k_new", &[m, kvh, d], &k[split..])?),
            None => None,
        };
        let scratch = AttentionScratch::for_head_dim(ctx, d)?;
        let config = KvCacheConfig {
            kv_heads: kvh,
            head_dim: d,
            layout: self.layout(),
            k_eq_v: self.k_eq_v,
            max_binding_bytes: self.chunk_bytes,
            sequences: 1,
        };
        let mut kernels = Vec::new();
        let mut tensor_cores = false;
        for copy in 0..self.copies.max(1) {
            let mut cache = KvCache::new(ctx, &format!("kv{copy}"), config)?;
            cache.load_rows(
                ctx,
                first,
                k_hist.as_ref().map(|k| &k[..split]),
                &v_hist[..split],
            )?;
            let claimed = cache.advance(m)?;
            debug_assert_eq!(claimed, self.start..kv_len);
            let append = cache.append_kernel(ctx, tk.as_ref(), &tv, &tpos)?;
            let mut attention = Attention::new(
                ctx,
                AttentionInputs {
                    fold_q: self.fold_q.then_some(FoldQ {
                        norm_weight: &q_norm_weight,
                        rope: q_rope,
                        eps: FOLD_Q_EPS,
                    }),
                    q: &tq,
                    positions: &tpos,
                    cache: &cache,
                    out: &tout,
                    key_from_v: self.k_eq_v.then_some(KeyFromValue {
                        k_norm_weight: &k_norm_weight,
                        rope,
                    }),
                },
                &scratch,
            )?;
            let plan = self.choose_kernels_and_plan(&mut attention, m, kv_len)?;
            tensor_cores |=
                plan.route == AttentionRoute::Tiled && attention.tiled_on_tensor_cores();
            kernels.extend(append.kernels_for(m)?);
            kernels.extend(attention.kernels_for_plan(&plan));
        }
        let reference = attention_ref(
            &q_ref,
            &positions,
            h,
            kvh,
            d,
            self.window,
            &KvHistory {
                first,
                k: &k_ref,
                v: &v_hist,
            },
        );
        let kv_tensors = if self.k_eq_v { 1 } else { 2 };
        let per_copy = (self.visible_keys() * row * 4 * kv_tensors) as u64 // cache reads
            + (2 * m * h * d * 4) as u64 // q in, out
            + (2 * m * row * 4 * kv_tensors) as u64; // appended rows in and out
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "out",
                tensor: tout,
                reference: Values::F32(reference),
                check: if tensor_cores {
                    ATTENTION_COOP_CHECK
                } else {
                    attention_check(score_std(&q_ref, &k_ref, d))
                },
            }],
            bytes_moved: per_copy * self.copies.max(1) as u64,
        })
    }
}

/// Random shapes: head dims 64/256/512, GQA ratios, M = 1, 3, 17, windows smaller and larger
/// than the context, rings far past their size, K = V, chunked caches, forced splits, and a
/// prefill chunk of 16..80 rows on the tiled route.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let dims = [64, 256, 512];
    let gqa = [(1, 1), (2, 1), (8, 1), (4, 2), (6, 3), (16, 4)];
    let pick = |rng: &mut Rng, m: usize, start_max: usize| {
        let d = dims[rng.random_range(0..dims.len())];
        let (h, kvh) = gqa[rng.random_range(0..gqa.len())];
        let start = rng.random_range(0..start_max);
        AttentionCase::new(h, kvh, d, m, start)
    };
    let mut cases = vec![
        pick(rng, 1, 1500),
        pick(rng, 3, 700).sliding(rng.random_range(4..600), 3),
        pick(rng, 17, 300),
        // A ring far past its size (wrap-around), window smaller than the context.
        {
            let mut c = pick(rng, 3, 50);
            c.start += 20_000;
            c.head_dim = 64;
            c.sliding(rng.random_range(8..200), rng.random_range(3..9))
        },
    ];
    // K = V (keys rebuilt from values with a proportional rope).
    let m = [1, 3][rng.random_range(0..2)];
    let mut kv = pick(rng, m, 400);
    kv.k_eq_v = true;
    cases.push(kv);
    // A full cache split into several chunks, with a forced split count.
    let m = [1, 3][rng.random_range(0..2)];
    let mut chunked = pick(rng, m, 900);
    chunked.max_len = chunked.start + chunked.rows + rng.random_range(0..300);
    chunked.chunk_bytes = Some((chunked.kv_heads * chunked.head_dim * 4 * 128) as u64);
    chunked.splits = Some(rng.random_range(1..6));
    cases.push(chunked);
    // A head_dim that is not a power of two: the generic route.
    let m = [1, 3, 17][rng.random_range(0..3)];
    let mut generic = pick(rng, m, 600);
    generic.head_dim = [24, 48, 40, 200][rng.random_range(0..4)];
    cases.push(generic);
    // A prefill chunk on the tiled route: a partial last tile, sometimes a window shorter
    // than the chunk, sometimes split along keys.
    let m = rng.random_range(16..80);
    let mut tiled = pick(rng, m, 300);
    tiled.head_dim = [256, 512][rng.random_range(0..2)];
    if rng.random_range(0..2) == 1 {
        tiled = tiled.sliding(rng.random_range(8..200), m);
    }
    tiled.route = Some(AttentionRoute::Tiled);
    tiled.splits = [None, Some(2)][rng.random_range(0..2)];
    cases.push(tiled);
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

/// Prefill chunks at E2B shapes for `wgemma ops check` (too slow for lavapipe's test runs):
/// 512-row chunks from position 0 (full D 512, sliding D 256 W 512), chunks after a cache
/// prefix of 4K (a ring past its size), a 16K-position context (sizes keep the f64
/// reference to seconds), large scores
/// (q x 3 and x 6: scores of std ~15-45, rescales mid-span), forced key splits, and GQA
/// groups other than 8. On a device with cooperative matrices they run on the tensor cores.
pub fn prefill_check_cases() -> Vec<Box<dyn OpCase>> {
    let e2b_full = |m: usize, start: usize| AttentionCase::new(8, 1, 512, m, start);
    let e2b_sliding =
        |m: usize, start: usize| AttentionCase::new(8, 1, 256, m, start).sliding(512, m);
    let mut cases = vec![
        e2b_full(512, 0),
        e2b_sliding(512, 0),
        e2b_full(32, 4096),
        e2b_sliding(128, 4096),
        e2b_full(16, 16_000),
        e2b_sliding(77, 16_000),
        AttentionCase::new(6, 3, 256, 70, 40).sliding(100, 70),
        AttentionCase::new(16, 4, 512, 33, 300),
        AttentionCase::new(2, 1, 512, 45, 1000),
    ];
    for q_scale in [3.0, 6.0] {
        let mut full = e2b_full(64, 700);
        full.q_scale = q_scale;
        let mut sliding = e2b_sliding(64, 700);
        sliding.q_scale = q_scale;
        cases.push(full);
        cases.push(sliding);
    }
    for splits in [2, 5] {
        let mut full = e2b_full(40, 600);
        full.splits = Some(splits);
        let mut sliding = e2b_sliding(40, 600);
        sliding.splits = Some(splits);
        cases.push(full);
        cases.push(sliding);
    }
    cases
        .into_iter()
        .map(|mut c| {
            c.route = Some(AttentionRoute::Tiled);
            Box::new(c) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B shapes (8 q heads, 1 kv head): decode at 4K and 32K for sliding (D 256, W 512) and
/// full (D 512) layers, verify M = 3, and a 512-row prefill chunk. Small caches are copied
/// so that the rotation reads >= ~64 MiB (more than a 50 MB L2).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for ctx_len in [4096, 32_768] {
        for rows in [1, 3] {
            let start = ctx_len - rows;
            let mut sliding = AttentionCase::new(8, 1, 256, rows, start).sliding(512, 9);
            sliding.copies = 64;
            let mut full = AttentionCase::new(8, 1, 512, rows, start);
            full.copies = (64 << 20) / (ctx_len * 512 * 8);
            cases.push(sliding);
            cases.push(full);
        }
    }
    // 512-row prefill chunks, full (D 512) and sliding (D 256): the planner's route (tiled)
    // and split_k, the route before it.
    for route in [None, Some(AttentionRoute::SplitK)] {
        let mut full = AttentionCase::new(8, 1, 512, 512, 0);
        full.max_len = 4096;
        full.route = route;
        let mut sliding = AttentionCase::new(8, 1, 256, 512, 0).sliding(512, 512);
        sliding.route = route;
        cases.push(full);
        cases.push(sliding);
    }
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

fn boxed(cases: Vec<AttentionCase>) -> Vec<Box<dyn OpCase>> {
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

/// Random decode-route steps: head dims 64/256/512, GQA ratios (groups 1..=12, uneven head
/// tiles), M in 1..=9, windows smaller and larger than the context, a ring far past its
/// size, K = V, and a chunked full cache with a forced split count.
pub fn decode_random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let dims = [64, 256, 512];
    let gqa = [
        (1, 1),
        (2, 1),
        (8, 1),
        (4, 2),
        (6, 3),
        (16, 4),
        (12, 1),
        (9, 1),
    ];
    let pick = |rng: &mut Rng, m_max: usize, start_max: usize| {
        let d = dims[rng.random_range(0..dims.len())];
        let (h, kvh) = gqa[rng.random_range(0..gqa.len())];
        let m = rng.random_range(1..=m_max);
        let mut c = AttentionCase::new(h, kvh, d, m, rng.random_range(0..start_max));
        c.route = Some(AttentionRoute::Decode);
        c
    };
    let mut cases = vec![pick(rng, DECODE_MAX_ROWS, 1500)];
    let window = rng.random_range(4..700);
    cases.push(pick(rng, DECODE_MAX_ROWS, 900).sliding(window, DECODE_MAX_ROWS));
    // A ring wrapped thousands of times, window smaller than the context.
    let mut ring = pick(rng, 5, 50);
    ring.start += 30_000;
    ring.head_dim = 64;
    let window = rng.random_range(8..200);
    cases.push(ring.sliding(window, 5));
    let mut kv = pick(rng, 3, 400);
    kv.k_eq_v = true;
    cases.push(kv);
    let mut chunked = pick(rng, 3, 900);
    chunked.max_len = chunked.start + chunked.rows + rng.random_range(0..300);
    chunked.chunk_bytes = Some((chunked.kv_heads * chunked.head_dim * 4 * 128) as u64);
    chunked.splits = Some(rng.random_range(1..8));
    cases.push(chunked);
    // q_norm + RoPE folded into the partial (KV-shared layers): a full and a sliding
    // layer, with and without a cache of keys.
    for sliding in [false, true] {
        let mut fold = pick(rng, DECODE_MAX_ROWS, 700);
        if sliding {
            fold = fold.sliding(rng.random_range(4..600), DECODE_MAX_ROWS);
        }
        fold.fold_q = true;
        fold.k_eq_v = !sliding && rng.random_bool(0.5);
        cases.push(fold);
    }
    // The classic kernels stay covered where the latency-shaped ones are built.
    let others: Vec<_> = [0, 3, 4, cases.len() - 1]
        .iter()
        .map(|&i| AttentionCase {
            decode_kernels: DecodeKernelChoice::Classic,
            ..cases[i].clone()
        })
        .collect();
    cases.extend(others);
    boxed(cases)
}

/// The E2B decode shapes of [`super::bench_cases`] (8 q heads, 1 kv head; sliding D 256 with
/// W 512, full D 512; 640 (a decode at depth 512), 4K and 32K context; M = 1 and verify M = 3) on each route, named
/// `route=decode` / `route=split_k`, so the two can be compared, and the decode steps again
/// on the classic kernels (`route=decode ... classic`, the latency-shaped kernels' before).
/// Small caches are copied so that the rotation reads >= ~64 MiB (more than a 50 MB L2).
pub fn decode_bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for route in [AttentionRoute::Decode, AttentionRoute::SplitK] {
        for ctx_len in [640, 4096, 32_768] {
            for rows in [1, 3] {
                let start = ctx_len - rows;
                let mut sliding = AttentionCase::new(8, 1, 256, rows, start).sliding(512, 9);
                sliding.copies = 64;
                sliding.route = Some(route);
                let mut full = AttentionCase::new(8, 1, 512, rows, start);
                full.copies = ((64 << 20) / (ctx_len * 512 * 8)).max(1);
                full.route = Some(route);
                // The same steps with q_norm + RoPE folded in (KV-shared layers).
                let mut folded = [sliding.clone(), full.clone()];
                for case in &mut folded {
                    case.fold_q = route == AttentionRoute::Decode;
                }
                let mut decode = vec![sliding, full];
                if route == AttentionRoute::Decode {
                    decode.extend(folded);
                    // The same steps on the classic kernels (the latency-shaped ones'
                    // before, where a device builds them).
                    let classic: Vec<AttentionCase> = decode
                        .iter()
                        .map(|c| AttentionCase {
                            decode_kernels: DecodeKernelChoice::Classic,
                            ..c.clone()
                        })
                        .collect();
                    decode.extend(classic);
                }
                cases.extend(decode);
            }
        }
    }
    boxed(cases)
}
