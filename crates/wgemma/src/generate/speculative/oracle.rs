//! Where a round's drafts come from ([`DraftSource`]): the assistant, or benchmarks' oracle
//! ([`OracleDrafts`]). The oracle's drafts stand for the target's own greedy continuation,
//! each kept or made wrong as its caller says, so acceptance is the caller's choice and the
//! output stays the target's. The host writes them into the verify's token ids: it knows
//! where every round starts, because a round accepts exactly its drafts up to the first one
//! made wrong, then the target's bonus token.

use super::OP;
use crate::error::{Error, Result};

/// Where the drafts of speculative rounds come from.
pub enum DraftSource {
    /// The assistant drafts (decoding).
    Assistant,
    /// Benchmarks: drafts chosen from the target's own greedy continuation.
    Oracle(OracleDrafts),
}

impl DraftSource {
    /// The oracle, when the drafts are its.
    pub(crate) fn oracle(&mut self) -> Option<&mut OracleDrafts> {
        match self {
            DraftSource::Assistant => None,
            DraftSource::Oracle(o) => Some(o),
        }
    }

    /// Whether the assistant's draft steps run (their drafts used or, for an oracle
    /// with `drafter`, only their cost paid).
    pub(crate) fn runs_drafter(&self) -> bool {
        match self {
            DraftSource::Assistant => true,
            DraftSource::Oracle(o) => o.drafter,
        }
    }
}

/// Benchmarks' drafts: draft i of a round after `c` committed tokens is `reference[c + i]`
/// where `keep` says so, else `(reference[c + i] + 1) % vocab`, a token that a target whose
/// greedy continuation is `reference` rejects.
pub struct OracleDrafts {
    /// The tokens the drafts stand for (index 0: the first generated token).
    pub reference: Vec<u32>,
    /// Called once per round of k drafts: which of them keep their reference token.
    pub keep: Box<dyn FnMut(usize) -> Vec<bool> + Send>,
    /// Run the assistant's draft steps anyway (their cost is paid, their drafts unused).
    /// False: the verify reads the oracle's drafts alone, so that a round costs what it
    /// costs without the drafter (benchmarks' `drafter_ms_per_round` is the difference).
    pub drafter: bool,
}

/// One round's oracle drafts.
pub(crate) struct OracleRound {
    pub drafts: Vec<u32>,
    /// The drafts the target accepts: those before the first one not kept.
    pub accepted: usize,
    /// Every draft stands for a reference token (else `accepted` is only a guess).
    pub within_reference: bool,
}

impl OracleDrafts {
    /// Refuses a reference token outside the vocabulary.
    pub(crate) fn check(&self, vocab: usize) -> Result<()> {
        match self.reference.iter().find(|&&t| t as usize >= vocab) {
            Some(t) => Err(Error::invalid(
                OP,
                "reference token of oracle drafts",
                format!("< vocab {vocab}"),
                t,
            )),
            None => Ok(()),
        }
    }

    /// The `k` drafts of a round after `committed` tokens. A draft past the reference (only
    /// in a round the budget ends) is token 0.
    pub(crate) fn round(
        &mut self,
        committed: usize,
        k: usize,
        vocab: usize,
    ) -> Result<OracleRound> {
        let keep = (self.keep)(k);
        if keep.len() != k {
            return Err(Error::invalid(OP, "kept flags of a round", k, keep.len()));
        }
        let drafts = keep
            .iter()
            .enumerate()
            .map(|(i, &kept)| {
                let t = self.reference.get(committed + i).copied().unwrap_or(0);
                if kept {
                    t
                } else {
                    (t + 1) % vocab as u32
                }
            })
            .collect();
        let accepted = keep.iter().take_while(|&&kept| kept).count();
        Ok(OracleRound {
            drafts,
            accepted,
            within_reference: committed + k <= self.reference.len(),
        })
    }
}
