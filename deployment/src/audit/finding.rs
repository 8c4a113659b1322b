//! One audit rule and what it finds: the types every rule module shares
//! (the general rules and a cluster's), kept apart so each imports them
//! and neither the other.

use super::facts::Node;
use serde::Serialize;

/// How bad a finding is: stored in `audit.json`, so its home is the store.
pub use store::audit::Severity;

/// A rule: its name, the worst it can find, and why it matters.
#[derive(Debug)]
pub struct Rule {
    pub name: &'static str,
    /// `Risk` for a rule whose `unknown` could hide a risk (so it makes
    /// the audit unknown, exit 2); `Warning` for one that never finds worse.
    pub at_worst: Severity,
    pub reason: &'static str,
    /// What the table says in place of a command for a finding that has
    /// none.
    pub no_command: &'static str,
}

/// What one rule found about one or more nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub nodes: Vec<String>,
    pub severity: Severity,
    /// The observed value(s), and what they mean when that is not plain.
    pub what: String,
    pub reason: &'static str,
    /// The lockstorm command that shows the failure on a local copy; `None`
    /// when lockstorm has no fault for it.
    pub demonstrate: Option<String>,
}

impl Rule {
    pub(super) fn found(
        &'static self,
        nodes: &[&str],
        severity: Severity,
        what: String,
    ) -> Finding {
        Finding {
            rule: self.name,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            severity,
            what,
            reason: self.reason,
            demonstrate: None,
        }
    }
}

impl Finding {
    pub(super) fn shown_by(mut self, command: impl Into<String>) -> Finding {
        // An ok finding has nothing to show.
        if self.severity != Severity::Ok {
            self.demonstrate = Some(command.into());
        }
        self
    }
}

pub(super) fn config_unknown(rule: &'static Rule, node: &Node, missing: &str) -> Finding {
    let what = match node.config {
        None => "CONFIG refused: cannot see".to_string(),
        Some(_) => "CONFIG GET gave no".to_string(),
    };
    rule.found(
        &[&node.addr],
        Severity::Unknown,
        format!("{what} {missing}"),
    )
}
