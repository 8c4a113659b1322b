//! What a check is asked to hold a history to: the [`Promise`] the lock
//! made, and what the history itself cannot tell ([`Settings`]).

use crate::meaning::Dialect;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use strum::VariantNames;

/// What a lock configuration claims. Its name is the variant's in
/// kebab-case, alike for [`Promise::as_str`], `Display`, `FromStr` and
/// serde. Which anomalies break it is the registry's to say, so
/// [`Promise::counts`] is the verdict's (verdict.rs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantNames)]
#[strum(serialize_all = "kebab-case", parse_err_ty = UnknownPromise, parse_err_fn = unknown)]
pub enum Promise {
    /// Never two holders at once (unfenced configs).
    #[default]
    MutualExclusion,
    /// Overlaps may happen, but the storage refuses the stale holder (fenced configs).
    DataSafety,
}

impl Promise {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `FromStr`'s error: the name given, which is no promise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown promise `{0}`: use {names}", names = Promise::VARIANTS.join(" or "))]
pub struct UnknownPromise(pub String);

fn unknown(name: &str) -> UnknownPromise {
    UnknownPromise(name.to_owned())
}

/// The promise to judge by, and what the history cannot say about the run
/// that made it. `Settings::from(promise)` checks everything the history
/// alone decides; `deadlock` is then reported as not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub promise: Promise,
    /// How long acquires may go ungranted with no fault active before the
    /// lock counts as stuck (`deadlock`). The history does not record the
    /// lock's TTL, so this comes from the run (lockstorm uses TTL + acquire
    /// timeout + 1 s); `None` leaves `deadlock` unchecked.
    pub deadlock_after: Option<Duration>,
    /// Whether a client write takes effect only when its holder's release
    /// completes: the lock is a transaction (`pg-row-lock`: acquire is
    /// `BEGIN; SELECT … FOR UPDATE`, release the `COMMIT`), so a write's `ok`
    /// says only that it ran inside it. Its release `ok` acknowledges it, a
    /// release `fail` means it never applied, and a release `info`, its
    /// holder's `crash` or no release at all leave it possible (rolled back
    /// or not). The history does not say which kind of lock made it, so this
    /// comes from the run. Counted at the write's `ok` otherwise (false).
    pub writes_commit_with_release: bool,
    /// Who wrote the history, and so how its refused releases read
    /// (`meaning`'s table): lockstorm's own, with leases, or Jepsen's EDN,
    /// where every `fail` did not happen, as Knossos reads it.
    pub dialect: Dialect,
}

impl Settings {
    pub fn new(promise: Promise) -> Self {
        Settings {
            promise,
            deadlock_after: None,
            writes_commit_with_release: false,
            dialect: Dialect::Lockstorm,
        }
    }

    /// The same settings, with `deadlock` checked at `threshold`.
    pub fn deadlock_after(self, threshold: Duration) -> Self {
        Settings {
            deadlock_after: Some(threshold),
            ..self
        }
    }

    /// The same settings, with client writes committed by their holder's
    /// release (`yes`) or applied at their own `ok`.
    pub fn writes_commit_with_release(self, yes: bool) -> Self {
        Settings {
            writes_commit_with_release: yes,
            ..self
        }
    }
}

impl Settings {
    /// The same settings, reading every `fail` as Knossos does.
    pub fn knossos_fail(self) -> Self {
        Settings {
            dialect: Dialect::Jepsen,
            ..self
        }
    }
}

impl From<Promise> for Settings {
    fn from(promise: Promise) -> Self {
        Settings::new(promise)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn promise_names_parse_print_and_serialise_alike() {
        for p in [Promise::MutualExclusion, Promise::DataSafety] {
            assert_eq!(p.to_string().parse::<Promise>().unwrap(), p);
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                json!(p.to_string()),
                "serde and Display disagree"
            );
        }
        assert_eq!(Promise::DataSafety.to_string(), "data-safety");
        let err = "fenced".parse::<Promise>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown promise `fenced`: use mutual-exclusion or data-safety"
        );
    }
}
