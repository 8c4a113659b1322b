//! The keys a run writes, all under one prefix. A run on lockstorm's own
//! nodes uses `lockstorm:`; a run against a deployment it did not start
//! uses `lockstorm:<run id>:`, so that nothing of the owner's is touched,
//! a leftover of another run is told apart, and the run can find and remove
//! everything it wrote (a library may put its own prefix in front: cleanup
//! matches the prefix anywhere in a key's name).

use serde::{Deserialize, Serialize};

/// Where a run's keys live; every key name comes from here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keys {
    pub prefix: String,
    /// How long a key without a lease of its own (a fence counter) lives,
    /// so that a killed run's keys go by themselves; `None`: for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u64>,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            prefix: "lockstorm:".into(),
            expire_ms: None,
        }
    }
}

impl Keys {
    /// The keys of one run against a deployment lockstorm did not start,
    /// each living at most `expire_ms`.
    pub fn for_run(run_id: &str, expire_ms: u64) -> Keys {
        Keys {
            prefix: format!("lockstorm:{run_id}:"),
            expire_ms: Some(expire_ms),
        }
    }

    /// The same keys, every one in one Redis Cluster slot: the prefix as a
    /// hash tag (`{lockstorm:}lock`), which alone decides the slot.
    pub fn in_one_slot(self) -> Keys {
        Keys {
            prefix: format!("{{{}}}", self.prefix),
            ..self
        }
    }

    /// The lock, on every lock node (the built-in clients and the
    /// adapters alike).
    pub fn lock(&self) -> String {
        self.named("lock")
    }

    /// `fenced`'s token counter, beside the lock.
    pub fn fence(&self) -> String {
        self.named("fence")
    }

    /// The shared counter, on the storage.
    pub fn counter(&self) -> String {
        self.named("counter")
    }

    /// The highest fence the storage has accepted.
    pub fn highest_fence(&self) -> String {
        self.named("highest-fence")
    }

    /// A `SCAN … MATCH` pattern for every key of the run, a library's own
    /// prefix in front included. Glob characters in the prefix are escaped.
    pub fn pattern(&self) -> String {
        let mut escaped = String::from("*");
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                escaped.push('\\');
            }
            escaped.push(c);
        }
        escaped.push('*');
        escaped
    }

    fn named(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_keys_share_its_prefix_and_the_default_keeps_the_old_names() {
        let own = Keys::default();
        assert_eq!(own.lock(), "lockstorm:lock");
        assert_eq!(own.counter(), "lockstorm:counter");
        let run = Keys::for_run("20261203T061500-3fa2", 60_000);
        for key in [run.lock(), run.fence(), run.counter(), run.highest_fence()] {
            assert!(key.starts_with("lockstorm:20261203T061500-3fa2:"), "{key}");
        }
        assert_eq!(run.pattern(), "*lockstorm:20261203T061500-3fa2:*");
        let odd = Keys {
            prefix: "a*[b]?".into(),
            expire_ms: None,
        };
        assert_eq!(odd.pattern(), r"*a\*\[b\]\?*");
    }

    #[test]
    fn keys_in_one_slot_share_a_hash_tag() {
        let own = Keys::default().in_one_slot();
        assert_eq!(
            (own.lock(), own.fence()),
            ("{lockstorm:}lock".into(), "{lockstorm:}fence".into())
        );
        let run = Keys::for_run("r:1", 60_000).in_one_slot();
        assert_eq!(run.lock(), "{lockstorm:r:1:}lock");
        assert_eq!(run.expire_ms, Some(60_000));
        assert_eq!(run.pattern(), "*{lockstorm:r:1:}*");
    }
}
