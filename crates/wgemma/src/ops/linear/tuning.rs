//! Geometry of the Q4 matvec kernels (`q4_matvec*`, generated from `matvec_variants.rs`):
//! rows per quad, lanes per quad and the K split, chosen per shape from a table keyed by
//! the adapter, or forced (benchmarks, tests).

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

    /// Whether the decode family of kernels (`q4_matvec[_norm][_sg]`: M <= 4, 4 rows and 32 lanes
    /// per quad, K read at run time, any split) builds this geometry for `m` rows; other
    /// geometries and M = 5..=9 run the wide family (`q4_matvec_wide*`). The decode
    /// family is the faster on the H200 where both fit (BENCHMARKS.md, "Decode, session 7").
    pub fn fits_decode_family(self, m: usize) -> bool {
        m <= 4 && self.rows == 4 && self.lanes == 32 && !self.unroll
    }

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

/// A row of the tuning table: what a grid needs to keep the device busy. The table has one
/// row, [`AdapterProfile::BASE`], for every adapter: on the H200 (NVIDIA, 32-lane subgroups)
/// no other geometry measured beat it (BENCHMARKS.md, "Q4 linear kernels, session 5": 16
/// and 8 lanes per quad, 1 and 2 rows per quad, splits to 512 workgroups, K fixed at build
/// time), and no other adapter has been measured; a measured faster row for an adapter
/// (PCI vendor, subgroup size) belongs beside it, chosen in `build_q4`. Other geometries
/// are built by forcing a [`MatvecTuning`] (`LinearOptions::tuning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdapterProfile {
    /// Split K while the grid has fewer workgroups than this.
    pub min_workgroups: u64,
}

impl AdapterProfile {
    /// 4 rows and 32 lanes per quad, K split until 256 workgroups, K read at run time.
    pub const BASE: AdapterProfile = AdapterProfile {
        min_workgroups: 256,
    };
}

/// The tuning for a chunk of `rows` rows of length `k` with `epilogue`: 4 rows and 32
/// lanes per quad, K split while the grid has fewer than `profile.min_workgroups`
/// workgroups and each slot keeps at least 16 words of a row (never for GeGLU pairs, whose
/// quads map to gate and up rows).
pub fn choose_tuning(
    profile: AdapterProfile,
    rows: usize,
    k: usize,
    epilogue: Epilogue,
) -> MatvecTuning {
    let mut t = MatvecTuning::BASE;
    if matches!(epilogue, Epilogue::GegluPairs) {
        return t;
    }
    let words = k / 32;
    while t.ksplit < 8
        && workgroups_for(rows as u64, t.rows_per_workgroup()) < profile.min_workgroups
        && words >= 32 * t.ksplit as usize
    {
        t.ksplit *= 2;
    }
    t
}
