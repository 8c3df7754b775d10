//! Geometry of the Q4 matvec kernels (`q4_matvec*.wgsl`): rows per quad, lanes per quad
//! and the K split, chosen per shape from a table keyed by the adapter, or forced
//! (benchmarks, tests).

use super::Epilogue;
use crate::gpu::workgroups_for;

/// Invocations of a matvec workgroup.
const WG: u32 = 256;

/// How a matvec kernel spreads a weight over its lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct MatvecTuning {
    /// Rows of a quad (1, 2 or 4): each x load serves them all.
    pub rows: u32,
    /// Lanes sharing one quad (32, 16 or 8): each lane reads every `lanes * ksplit`-th vec4
    /// word of the quad's rows.
    pub lanes: u32,
    /// Slots of `lanes` lanes sharing one quad, each over a strided part of K (1, 2, 4, 8).
    pub ksplit: u32,
    /// K fixed when the kernel is built (`K_WORDS`), so each lane's step count is a
    /// constant the driver can unroll.
    pub unroll: bool,
}

impl MatvecTuning {
    /// The geometry of the matvec before this table existed (32 lanes, no split).
    pub const BASE: MatvecTuning = MatvecTuning {
        rows: 4,
        lanes: 32,
        ksplit: 1,
        unroll: false,
    };

    /// Rows one workgroup covers.
    pub fn rows_per_workgroup(self) -> u32 {
        self.rows * (WG / self.lanes) / self.ksplit
    }

    /// vec4s of the subgroup finish's parking array for `m` activation rows (the pairs
    /// epilogue and K splits park each slot's row totals; else one unused vec4).
    pub(crate) fn park_vec4s(self, m: usize, pairs: bool) -> u32 {
        if pairs || self.ksplit > 1 {
            (WG / self.lanes) * self.rows * parts(m)
        } else {
            1
        }
    }

    /// Why this tuning cannot build for `m` rows (None when it can): rows 1/2/4, lanes
    /// 8/16/32, a split of 1/2/4/8 that leaves at least one quad per workgroup, none with
    /// the pairs epilogue, whose parked totals (portable reduction) must fit the 256-entry
    /// tree array and which needs two quads per workgroup.
    pub fn invalid(self, m: usize, pairs: bool) -> Option<String> {
        let ok_rows = matches!(self.rows, 1 | 2 | 4);
        let ok_lanes = matches!(self.lanes, 8 | 16 | 32);
        let ok_split = matches!(self.ksplit, 1 | 2 | 4 | 8) && WG / self.lanes >= self.ksplit;
        if !ok_rows || !ok_lanes || !ok_split {
            return Some(format!(
                "rows 1, 2 or 4, lanes 8, 16 or 32 and K split 1..=8 with a quad per workgroup \
                 (found rows {}, lanes {}, split {})",
                self.rows, self.lanes, self.ksplit
            ));
        }
        if pairs && (self.ksplit != 1 || self.rows_per_workgroup() * parts(m) > WG) {
            return Some(format!(
                "GeGLU pairs: no K split and at most {WG} parked totals (found split {}, {} \
                 rows x {} vectors)",
                self.ksplit,
                self.rows_per_workgroup(),
                parts(m)
            ));
        }
        None
    }
}

/// Accumulator vectors per row for `m` activation rows (4 rows each).
pub(crate) fn parts(m: usize) -> u32 {
    m.div_ceil(4) as u32
}

/// The tuning table's row for an adapter: what a grid needs to keep the device busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdapterProfile {
    /// Halve the rows per quad, then split K, while the grid has fewer workgroups than this.
    pub min_workgroups: u64,
    /// Fewest rows per quad (4: never fewer).
    pub min_rows: u32,
    /// Choose the lanes per quad by the row length (else always 32).
    pub fit_lanes: bool,
    /// Fix K at build time.
    pub unroll: bool,
}

impl AdapterProfile {
    /// The table, keyed by PCI vendor and the subgroup reduction in use.
    pub fn of(vendor: u32, subgroup32: bool) -> AdapterProfile {
        const NVIDIA: u32 = 0x10de;
        match (vendor, subgroup32) {
            // H200 (132 SMs), measured in BENCHMARKS.md "Q4 linear kernels, session 5".
            (NVIDIA, true) => AdapterProfile {
                min_workgroups: 512,
                min_rows: 1,
                fit_lanes: true,
                unroll: true,
            },
            // Elsewhere (lavapipe, Apple, AMD, Intel, browsers): the geometry measured
            // before the table, which no other adapter has been measured against.
            _ => AdapterProfile {
                min_workgroups: 256,
                min_rows: 4,
                fit_lanes: false,
                unroll: false,
            },
        }
    }
}

/// The tuning for a chunk of `rows` rows of length `k` with `m` activation rows.
pub fn choose_tuning(
    profile: AdapterProfile,
    rows: usize,
    k: usize,
    m: usize,
    epilogue: Epilogue,
) -> MatvecTuning {
    let words = k / 32;
    let pairs = matches!(epilogue, Epilogue::GegluPairs);
    // The lane count that leaves the fewest lanes idle in a row's last step (ties: more
    // lanes, so each x load serves a longer stretch of K).
    let lanes = if profile.fit_lanes {
        [32u32, 16, 8]
            .into_iter()
            .min_by_key(|&l| words.div_ceil(l as usize) * l as usize - words)
            .unwrap_or(32)
    } else {
        32
    };
    let mut t = MatvecTuning {
        rows: 4,
        lanes,
        ksplit: 1,
        unroll: profile.unroll,
    };
    let grid = |t: MatvecTuning| {
        let r = if pairs { rows / 2 } else { rows };
        let per = if pairs {
            t.rows_per_workgroup() / 2
        } else {
            t.rows_per_workgroup()
        };
        workgroups_for(r as u64, per)
    };
    // Shorter chains per lane where the grid is small: fewer rows per quad first (each
    // lane still reads whole words of a row).
    while t.rows > profile.min_rows && grid(t) < profile.min_workgroups {
        t.rows /= 2;
    }
    if pairs {
        // The pairs epilogue maps quads to gate/up rows: never split; fewer lanes if the
        // parked totals would not fit.
        while t.invalid(m, true).is_some() && t.lanes < 32 {
            t.lanes *= 2;
        }
        return t;
    }
    // Split while the grid is small and each slot keeps at least 16 words (32 lanes,
    // before the table) or one step per lane.
    let min_words = |t: MatvecTuning| {
        if profile.fit_lanes {
            t.lanes as usize * t.ksplit as usize
        } else {
            16 * t.ksplit as usize
        }
    };
    while t.ksplit < 8 && grid(t) < profile.min_workgroups && words >= 2 * min_words(t) {
        t.ksplit *= 2;
    }
    t
}
