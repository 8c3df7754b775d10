//! The rows of the target's K/V a draft round sees: HF's view, which the attention kernels
//! express as "the rows ending at E".

use crate::error::{Error, Result};

use super::config::OP;

/// The rows of the target's K/V one draft round sees, as HF's assistant sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftView {
    /// P: the RoPE position of every draft step of the round (the seed token's position).
    pub position: usize,
    /// Full layers see rows `0..=full_end`.
    pub full_end: usize,
    /// Sliding layers see rows `sliding_end - W ..= sliding_end` (clamped at 0).
    pub sliding_end: usize,
}

impl DraftView {
    /// HF's view (transformers 5.24, checked against HF by `tools/golden/generate.py`'s
    /// `reference_spec_decode`) when drafting at position `p` after a target forward of
    /// `m` rows whose last row was `r` (prefill of L tokens: r = L - 1, m = L; verify of
    /// [seed, d1..dk] at p0: r = p0 + k, m = k + 1), with the target's sliding window
    /// `w_target` and the assistant's `w_assistant`:
    ///
    /// - the target's sliding store layer returns rows `t0..=r`, `t0 = max(0, r + 1 - (W - 1
    ///   + m))` (`DynamicSlidingWindowLayer.update` with past recording on), full layers
    ///   `0..=r`; the candidate generator cuts both to their first `p + 1` entries;
    /// - full layers see all of what is left: `0..=min(r, p)`;
    /// - sliding layers see the last `W + 1` entries of what is left (bidirectional window
    ///   `|q - kv| <= W`, flipped): rows `max(t0, E - W)..=E`, `E = min(r, t0 + p)`.
    ///
    /// Errors when `t0 > E - W` (only after a one-row forward past the window, or with
    /// windows that differ): the kernels express a range as "the W + 1 rows ending at E".
    pub fn hf(
        p: usize,
        r: usize,
        m: usize,
        w_target: usize,
        w_assistant: usize,
    ) -> Result<DraftView> {
        let t0 = (r + 1).saturating_sub(w_target.saturating_sub(1).saturating_add(m));
        let sliding_end = r.min(t0 + p);
        // An assistant without sliding layers (w_assistant = MAX) never reads this view.
        if w_assistant != usize::MAX && t0 > sliding_end.saturating_sub(w_assistant) {
            return Err(Error::invalid(
                OP,
                format!(
                    "HF's sliding view at position {p} after a forward of {m} rows ending at {r}"
                ),
                format!(
                    "rows starting at max(0, E - {w_assistant}) with E = {sliding_end} \
                     (the assistant's window)"
                ),
                format!("rows starting at {t0} (the target's window {w_target})"),
            ));
        }
        Ok(DraftView {
            position: p,
            full_end: r.min(p),
            sliding_end,
        })
    }
}

impl DraftView {
    /// The view when drafting at `p = r + 1` after a one-row (plain) forward of row `r`:
    /// full layers see rows `0..=r`, sliding layers the `W + 1` rows ending at `r`. HF has no
    /// such round (its assisted rounds always draft, so no one-row forward precedes one past
    /// the window) and its cut would leave `W` rows, which the kernels cannot express; the
    /// drafts only steer speculation, so the output stays the target's either way.
    pub fn after_plain_step(p: usize, r: usize) -> DraftView {
        DraftView {
            position: p,
            full_end: r.min(p),
            sliding_end: r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::spec_commit::{
        spec_commit_ref, CommitParams, MAX_ROUND_ROWS, STATE_LEN, STATE_POSITION,
    };

    #[test]
    fn hf_view_matches_the_golden_generators_rule() {
        // tools/golden/generate.py `visible_rows(mode="hf")` for M >= 2: full rows
        // 0..=min(R, P); sliding: E = R if R + 1 > W - 1 + M else min(R, P), rows E-W..=E.
        let w = 8;
        for r in 0..60usize {
            for m in 2..=9usize {
                if m > r + 1 {
                    continue;
                }
                // P after accepting n of the m - 1 drafts: the previous P was r - (m - 1).
                for n in 0..m {
                    let p = r - (m - 1) + n + 1;
                    let v = DraftView::hf(p, r, m, w, w).unwrap();
                    let t0 = (r + 1).saturating_sub(w - 1 + m);
                    let e = if t0 > 0 { r } else { r.min(p) };
                    // The generator's rule assumes the [:P+1] cut keeps all of T when t0 > 0,
                    // which holds for k <= 2 (its fixtures); the general rule is min(r, t0 + p).
                    if m <= 3 {
                        assert_eq!(v.sliding_end, e, "r {r} m {m} p {p}");
                    }
                    assert_eq!(v.sliding_end, r.min(t0 + p));
                    assert_eq!(v.full_end, r.min(p));
                    assert_eq!(v.position, p);
                }
            }
        }
        // Prefill of L rows: R = L - 1, M = L, P = L.
        let v = DraftView::hf(21, 20, 21, 8, 8).unwrap();
        assert_eq!((v.full_end, v.sliding_end), (20, 20));
        // A one-row forward past the window leaves rows the kernels cannot express.
        assert!(DraftView::hf(31, 30, 1, 8, 8).is_err());
    }

    /// The view `spec_commit` writes on the GPU (its reference here) is HF's for every
    /// accepted count. Here rather than in the op's folder: ops sit below the model.
    #[test]
    fn the_view_is_hf_s() {
        let h = 4;
        for w in [8usize, 512, usize::MAX] {
            for p in [0u32, 3, 7, 20, 600] {
                for k in 1..MAX_ROUND_ROWS - 1 {
                    for n in 0..=k {
                        let next: Vec<u32> = (0..=k as u32).collect();
                        let mut ids = vec![0u32];
                        ids.extend((0..k as u32).map(|i| if (i as usize) < n { i } else { 99 }));
                        let mut state = vec![0u32; STATE_LEN];
                        state[STATE_POSITION] = p;
                        let out = spec_commit_ref(
                            CommitParams::new(k, h, 0, w, 0),
                            &next,
                            &ids,
                            &vec![0.0; (k + 1) * h],
                            &state,
                            &[0.0; 4],
                        );
                        let (p, r) = (p as usize, (p as usize) + k);
                        let want = DraftView::hf(p + n + 1, r, k + 1, w, usize::MAX).unwrap();
                        assert_eq!(out.rope_position[0] as usize, want.position);
                        assert_eq!(out.full_end[0] as usize, want.full_end);
                        assert_eq!(
                            out.sliding_end[0] as usize, want.sliding_end,
                            "w {w} p {p} k {k} n {n}"
                        );
                    }
                }
            }
        }
    }
}
