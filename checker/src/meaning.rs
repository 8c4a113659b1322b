//! What each lock op's outcome says about the lock: the one table that
//! both history formats are read by (lockstorm's JSONL and Jepsen's EDN),
//! printed in docs/formats.md ("What an op means"; a test holds the two
//! the same). The linearizability search asks [`lock_reading`] of every
//! lock op it keeps; nothing else decides what an outcome means.
//!
//! The two dialects differ in one place, refused releases: lockstorm's
//! locks are leases, so a node that answers `not-held` says the releaser's
//! hold (if it had one open) ran out before the refusal, and one that
//! refused for another reason left the key to run out later. Knossos'
//! locks have no lease: a `:fail` release did not happen, and its holder
//! holds on.

use crate::history::{error, f, OpType};

/// Who wrote the history, and so how a refused release reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// lockstorm's own `history.jsonl`: locks with leases.
    #[default]
    Lockstorm,
    /// Jepsen's and Knossos' EDN: every `:fail` did not happen.
    Jepsen,
}

/// What a lock op's outcome says it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// It took effect once, between its invocation and its completion.
    Happened,
    /// It did not take effect.
    NotHappened,
    /// It may have taken effect at any moment after its invocation, or
    /// never; if its process went on under the same id, by that process's
    /// next answered op.
    Maybe,
    /// A release refused `not-held`: when the node ran it, the owner held
    /// nothing. A hold of the owner's that was certainly open ended (its
    /// lease ran out, or the key was taken) between that hold's start and
    /// the refusal; after an acquire whose outcome is unknown, that hold,
    /// if it existed, ended by the refusal; after the owner's hold had
    /// already ended (released, refused, never granted), it says nothing.
    HoldEndedBy,
    /// A release the node never ran (refused for any other reason): the
    /// key stays until its lease runs out, at some moment after the
    /// refusal, as a crashed holder's does.
    LapsesAfter,
}

/// One row of the table: an op and outcome, how each dialect reads it.
pub struct Row {
    pub op: &'static str,
    pub outcome: &'static str,
    pub lockstorm: Reading,
    pub jepsen: Reading,
}

/// The whole table, in docs/formats.md's order. `outcome` is the
/// completion's `type` (`none`: the history ended first), with the error
/// kind for refusals that differ.
pub const TABLE: &[Row] = &[
    row("acquire", "ok", Reading::Happened, Reading::Happened),
    row(
        "acquire",
        "fail",
        Reading::NotHappened,
        Reading::NotHappened,
    ),
    row("acquire", "info", Reading::Maybe, Reading::Maybe),
    row("acquire", "none", Reading::Maybe, Reading::Maybe),
    row("release", "ok", Reading::Happened, Reading::Happened),
    row(
        "release",
        "fail not-held",
        Reading::HoldEndedBy,
        Reading::NotHappened,
    ),
    row(
        "release",
        "fail (other)",
        Reading::LapsesAfter,
        Reading::NotHappened,
    ),
    row("release", "info", Reading::Maybe, Reading::Maybe),
    row("release", "none", Reading::Maybe, Reading::Maybe),
];

const fn row(op: &'static str, outcome: &'static str, lockstorm: Reading, jepsen: Reading) -> Row {
    Row {
        op,
        outcome,
        lockstorm,
        jepsen,
    }
}

/// How `dialect` reads a lock op `f` (acquire or release) that completed
/// as `kind` (`None`: it never completed) with `error`.
pub fn lock_reading(
    dialect: Dialect,
    f: &str,
    kind: Option<OpType>,
    error: Option<&str>,
) -> Reading {
    let outcome = match kind {
        None | Some(OpType::Invoke) => "none",
        Some(OpType::Ok) => "ok",
        Some(OpType::Info) => "info",
        Some(OpType::Fail)
            if f == f::RELEASE && error.map(error::kind) == Some(error::NOT_HELD) =>
        {
            "fail not-held"
        }
        Some(OpType::Fail) if f == f::RELEASE => "fail (other)",
        Some(OpType::Fail) => "fail",
    };
    let found = TABLE.iter().find(|r| r.op == f && r.outcome == outcome);
    let row = found.expect("every lock op and outcome has a row");
    match dialect {
        Dialect::Lockstorm => row.lockstorm,
        Dialect::Jepsen => row.jepsen,
    }
}

impl Reading {
    /// The words docs/formats.md gives this reading.
    pub fn words(self) -> &'static str {
        match self {
            Reading::Happened => "happened, between invocation and completion",
            Reading::NotHappened => "did not happen",
            Reading::Maybe => "may have happened at any time after invocation, or never",
            Reading::HoldEndedBy => "the owner's open hold ended by the refusal; else nothing",
            Reading::LapsesAfter => "the key runs out at some time after the refusal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_reads_by_its_row() {
        let read = |d, f, k, e| lock_reading(d, f, k, e);
        let lockstorm = Dialect::Lockstorm;
        let not_held = Some("not-held: the key is another's");
        assert_eq!(
            read(lockstorm, f::RELEASE, Some(OpType::Fail), not_held),
            Reading::HoldEndedBy
        );
        assert_eq!(
            read(Dialect::Jepsen, f::RELEASE, Some(OpType::Fail), not_held),
            Reading::NotHappened
        );
        let down = Some("ClusterDown: The cluster is down");
        assert_eq!(
            read(lockstorm, f::RELEASE, Some(OpType::Fail), down),
            Reading::LapsesAfter
        );
        assert_eq!(
            read(lockstorm, f::ACQUIRE, Some(OpType::Fail), not_held),
            Reading::NotHappened
        );
        assert_eq!(read(lockstorm, f::ACQUIRE, None, None), Reading::Maybe);
        assert_eq!(
            read(Dialect::Jepsen, f::RELEASE, Some(OpType::Info), None),
            Reading::Maybe
        );
    }

    /// docs/formats.md prints the table: each row there as here.
    #[test]
    fn the_formats_page_prints_the_table() {
        let page = include_str!("../../docs/formats.md");
        for r in TABLE {
            let line = format!(
                "| `{}` | {} | {} | {} |",
                r.op,
                r.outcome,
                r.lockstorm.words(),
                r.jepsen.words()
            );
            assert!(
                page.contains(&line),
                "docs/formats.md lacks the row:\n{line}"
            );
        }
    }
}
