//! Operator availability scoped per model instance. A plain-model session holds
//! [`OpSet::plain`]; an MTP session (target + assistant drafter) holds [`OpSet::with_mtp`].
//! The MTP-only routes (TopK, the certified parallel scatter) take `&OpSet` and fail closed
//! with [`Error::NoRoute`] naming the op set when it lacks them, so a plain session can
//! never reach a kernel that only the drafter's centroid head needs.

use crate::error::{Error, Result};

/// An operator (or route) that only some sessions may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatedOp {
    /// TopK (both routes): the assistant's centroid head.
    TopK,
    /// The parallel unique-index scatter route (indices certified unique).
    CertifiedScatter,
}

impl GatedOp {
    pub const ALL: [GatedOp; 2] = [GatedOp::TopK, GatedOp::CertifiedScatter];

    pub fn name(self) -> &'static str {
        match self {
            GatedOp::TopK => "topk",
            GatedOp::CertifiedScatter => "certified scatter",
        }
    }

    fn bit(self) -> u32 {
        match self {
            GatedOp::TopK => 1,
            GatedOp::CertifiedScatter => 2,
        }
    }
}

/// The gated operators one model instance may use. Ungated ops (argmax, gather, the
/// duplicate-safe scatter, ...) are available to every session and do not consult it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSet {
    name: &'static str,
    ops: u32,
}

impl OpSet {
    /// A plain target-model session: no MTP-only operators.
    pub fn plain() -> OpSet {
        OpSet {
            name: "plain",
            ops: 0,
        }
    }

    /// An MTP session (target + assistant drafter): TopK and the certified scatter.
    pub fn with_mtp() -> OpSet {
        OpSet {
            name: "mtp",
            ops: GatedOp::ALL.iter().fold(0, |acc, op| acc | op.bit()),
        }
    }

    /// `plain` or `mtp`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn contains(&self, op: GatedOp) -> bool {
        self.ops & op.bit() != 0
    }

    /// The guard text when `op` is missing, for [`Error::NoRoute`]'s `failed` list.
    pub fn missing(&self, op: GatedOp) -> Option<String> {
        (!self.contains(op)).then(|| {
            format!(
                "op set `{}` lacks `{}` (an MTP-only operator: build the session with \
                 OpSet::with_mtp())",
                self.name,
                op.name()
            )
        })
    }

    /// Ok when `op` is in the set, else [`Error::NoRoute`] for `op_name` on `shapes`.
    pub fn require(&self, op: GatedOp, op_name: &'static str, shapes: &str) -> Result<()> {
        match self.missing(op) {
            None => Ok(()),
            Some(guard) => Err(Error::NoRoute {
                op: op_name,
                shapes: shapes.to_string(),
                failed: vec![guard],
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lacks_every_gated_op_and_mtp_has_them() {
        let (plain, mtp) = (OpSet::plain(), OpSet::with_mtp());
        for op in GatedOp::ALL {
            assert!(!plain.contains(op), "{op:?}");
            assert!(mtp.contains(op), "{op:?}");
            assert!(mtp.require(op, "x", "[1]").is_ok());
            match plain.require(op, "x", "[1]") {
                Err(Error::NoRoute {
                    op: "x", failed, ..
                }) => {
                    assert_eq!(failed.len(), 1);
                    assert!(failed[0].contains("`plain`"), "{}", failed[0]);
                    assert!(failed[0].contains(op.name()), "{}", failed[0]);
                }
                other => panic!("expected NoRoute, got {other:?}"),
            }
        }
        assert_eq!(plain.name(), "plain");
        assert_eq!(mtp.name(), "mtp");
        assert_ne!(plain, mtp);
    }
}
