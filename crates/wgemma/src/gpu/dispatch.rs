//! Dispatch planning: 1-D workgroup counts above `maxComputeWorkgroupsPerDimension` fold into
//! a 2-D grid. Shaders rebuild the flat workgroup index as
//! `wid.x + wid.y * num_workgroups.x` and must bound-check it, because `x * y` may exceed
//! the requested count by up to `x - 1` workgroups.

use crate::error::{Error, Result};

/// A workgroup grid for `dispatch_workgroups(x, y, z)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Grid {
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Grid { x, y, z }
    }

    /// Total workgroups launched.
    pub fn count(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }

    /// Plans `workgroups` 1-D workgroups against the per-dimension limit: unchanged when it
    /// fits, else x = min(ceil(sqrt(n)), max), y = ceil(n / x); beyond `max * max` an error.
    pub fn fold_1d(workgroups: u64, max_per_dim: u32) -> Result<Grid> {
        let max = max_per_dim as u64;
        if workgroups <= max {
            return Ok(Grid::new(workgroups as u32, 1, 1));
        }
        let x = ceil_sqrt(workgroups).min(max);
        let y = workgroups.div_ceil(x);
        if y > max {
            return Err(Error::DispatchTooLarge {
                workgroups,
                max_per_dim,
            });
        }
        Ok(Grid::new(x as u32, y as u32, 1))
    }
}

fn ceil_sqrt(n: u64) -> u64 {
    let mut r = (n as f64).sqrt() as u64;
    while r * r < n {
        r += 1;
    }
    while r > 0 && (r - 1) * (r - 1) >= n {
        r -= 1;
    }
    r
}

/// The number of workgroups needed to cover `items` with `per_workgroup` items each.
pub fn workgroups_for(items: u64, per_workgroup: u32) -> u64 {
    items.div_ceil(per_workgroup as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: u32 = 65535;

    #[test]
    fn edges() {
        assert_eq!(Grid::fold_1d(0, MAX).unwrap(), Grid::new(0, 1, 1));
        assert_eq!(Grid::fold_1d(65535, MAX).unwrap(), Grid::new(65535, 1, 1));
        // 65536 no longer fits: ceil(sqrt(65536)) = 256, y = 256.
        assert_eq!(Grid::fold_1d(65536, MAX).unwrap(), Grid::new(256, 256, 1));
        // Needs y > 1 and a partial last row.
        let g = Grid::fold_1d(100_001, MAX).unwrap();
        assert_eq!(g, Grid::new(317, 316, 1));
        assert!(g.count() >= 100_001 && g.count() - 100_001 < g.x as u64);
        // The largest foldable count and one past it.
        let cap = MAX as u64 * MAX as u64;
        assert_eq!(Grid::fold_1d(cap, MAX).unwrap(), Grid::new(MAX, MAX, 1));
        match Grid::fold_1d(cap + 1, MAX) {
            Err(Error::DispatchTooLarge { workgroups, .. }) => assert_eq!(workgroups, cap + 1),
            other => panic!("expected DispatchTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn ceil_sqrt_is_exact() {
        for n in [
            1u64,
            2,
            3,
            4,
            5,
            65536,
            65537,
            (1 << 52) + 1,
            u32::MAX as u64 * 3,
        ] {
            let r = ceil_sqrt(n);
            assert!(r * r >= n && (r - 1) * (r - 1) < n, "{n} -> {r}");
        }
    }

    proptest! {
        #[test]
        fn folded_grid_covers_exactly(n in 1u64..(1u64 << 32), max in 1u32..=65535) {
            match Grid::fold_1d(n, max) {
                Ok(g) => {
                    prop_assert!(g.x <= max && g.y <= max);
                    prop_assert!(g.count() >= n);
                    // No whole spare row of workgroups.
                    prop_assert!(g.count() - n < g.x as u64);
                }
                Err(_) => prop_assert!(n > max as u64 * max as u64),
            }
        }
    }
}
