//! Comparison of GPU outputs with CPU references.

/// Output values of a case, by element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    U32(Vec<u32>),
    I32(Vec<i32>),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::U32(v) => v.len(),
            Values::I32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes `numel` elements of the same kind as `self` from little-endian bytes.
    pub fn same_kind_from_bytes(&self, bytes: &[u8], numel: usize) -> Values {
        let bytes = &bytes[..numel * 4];
        match self {
            Values::F32(_) => Values::F32(bytemuck::pod_collect_to_vec(bytes)),
            Values::U32(_) => Values::U32(bytemuck::pod_collect_to_vec(bytes)),
            Values::I32(_) => Values::I32(bytemuck::pod_collect_to_vec(bytes)),
        }
    }
}

/// How an output must match its reference.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Check {
    /// Floats: max |gpu - ref| <= max_abs AND normalised MSE <= nmse. NaN must meet NaN.
    Close { max_abs: f32, nmse: f64 },
    /// Bit-identical (floats compared by bits, so -0 != +0; NaN payloads ignored).
    Exact,
    /// Same multiset of values, order ignored (e.g. TopK indices under ties).
    SetEqual,
}

/// What a comparison measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Comparison {
    pub max_abs: f64,
    pub nmse: f64,
    /// Elements that differ (Exact), or misplaced NaNs (Close), or set mismatches.
    pub mismatches: usize,
    pub len_mismatch: bool,
}

impl Comparison {
    pub fn passes(&self, check: Check) -> bool {
        if self.len_mismatch || self.mismatches > 0 {
            return false;
        }
        match check {
            Check::Close { max_abs, nmse } => self.max_abs <= max_abs as f64 && self.nmse <= nmse,
            Check::Exact | Check::SetEqual => true,
        }
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max_abs={:.3e} nmse={:.3e} mismatches={}{}",
            self.max_abs,
            self.nmse,
            self.mismatches,
            if self.len_mismatch {
                " LENGTH MISMATCH"
            } else {
                ""
            }
        )
    }
}

fn as_f64(v: &Values) -> Vec<f64> {
    match v {
        Values::F32(x) => x.iter().map(|&a| a as f64).collect(),
        Values::U32(x) => x.iter().map(|&a| a as f64).collect(),
        Values::I32(x) => x.iter().map(|&a| a as f64).collect(),
    }
}

fn bits(v: &Values) -> Vec<u64> {
    match v {
        Values::F32(x) => x
            .iter()
            .map(|a| {
                if a.is_nan() {
                    u64::MAX
                } else {
                    a.to_bits() as u64
                }
            })
            .collect(),
        Values::U32(x) => x.iter().map(|&a| a as u64).collect(),
        Values::I32(x) => x.iter().map(|&a| a as u32 as u64).collect(),
    }
}

/// Compares `got` with `reference` under `check`.
pub fn compare(got: &Values, reference: &Values, check: Check) -> Comparison {
    let mut c = Comparison {
        max_abs: 0.0,
        nmse: 0.0,
        mismatches: 0,
        len_mismatch: got.len() != reference.len()
            || std::mem::discriminant(got) != std::mem::discriminant(reference),
    };
    if c.len_mismatch {
        return c;
    }
    let (g, r) = (as_f64(got), as_f64(reference));
    let (mut err, mut energy) = (0.0f64, 0.0f64);
    for (&a, &b) in g.iter().zip(&r) {
        if a.is_nan() || b.is_nan() {
            c.mismatches += (a.is_nan() != b.is_nan()) as usize;
            continue;
        }
        if a.is_infinite() || b.is_infinite() {
            c.mismatches += (a != b) as usize;
            continue;
        }
        let d = (a - b).abs();
        c.max_abs = c.max_abs.max(d);
        err += d * d;
        energy += b * b;
    }
    c.nmse = if energy > 0.0 { err / energy } else { err };
    match check {
        Check::Close { .. } => {}
        Check::Exact => {
            c.mismatches = bits(got)
                .iter()
                .zip(bits(reference))
                .filter(|(a, b)| **a != *b)
                .count();
        }
        Check::SetEqual => {
            let (mut a, mut b) = (bits(got), bits(reference));
            a.sort_unstable();
            b.sort_unstable();
            c.mismatches = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSE: Check = Check::Close {
        max_abs: 1e-3,
        nmse: 1e-6,
    };

    #[test]
    fn close_detects_error_and_nan_placement() {
        let r = Values::F32(vec![1.0, 2.0, f32::NAN]);
        assert!(compare(&Values::F32(vec![1.0, 2.0005, f32::NAN]), &r, CLOSE).passes(CLOSE));
        assert!(!compare(&Values::F32(vec![1.0, 2.1, f32::NAN]), &r, CLOSE).passes(CLOSE));
        assert!(!compare(&Values::F32(vec![1.0, 2.0, 0.0]), &r, CLOSE).passes(CLOSE));
        assert!(!compare(&Values::F32(vec![1.0, 2.0]), &r, CLOSE).passes(CLOSE));
    }

    #[test]
    fn exact_and_set_equal() {
        let r = Values::U32(vec![3, 1, 2]);
        assert!(compare(&Values::U32(vec![3, 1, 2]), &r, Check::Exact).passes(Check::Exact));
        assert!(!compare(&Values::U32(vec![1, 3, 2]), &r, Check::Exact).passes(Check::Exact));
        assert!(compare(&Values::U32(vec![1, 3, 2]), &r, Check::SetEqual).passes(Check::SetEqual));
        assert!(!compare(&Values::U32(vec![1, 3, 3]), &r, Check::SetEqual).passes(Check::SetEqual));
        let z = Values::F32(vec![0.0]);
        assert!(!compare(&Values::F32(vec![-0.0]), &z, Check::Exact).passes(Check::Exact));
    }
}
