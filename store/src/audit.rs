//! `audit.json` as its readers see it: the target and each finding's rule
//! and severity. The writer (the harness's audit, from the deployment
//! crate's findings) stores more (each node's facts, the reasons); this is
//! the part a reader may rely on, and the severities' one home.

use crate::layout::{read_json, AUDIT};
use crate::ReadError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How bad a finding is, worst first (the table's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Risk,
    Unknown,
    Warning,
    Ok,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Risk => "risk",
            Severity::Unknown => "unknown",
            Severity::Warning => "warning",
            Severity::Ok => "ok",
        }
    }
}

/// A stored audit: what was audited and what each rule found.
#[derive(Clone, Debug, Deserialize)]
pub struct AuditRecord {
    /// The target as the user named it (never its password).
    pub target: String,
    pub findings: Vec<AuditFinding>,
}

/// One finding, as a reader needs it.
#[derive(Clone, Debug, Deserialize)]
pub struct AuditFinding {
    pub rule: String,
    pub severity: Severity,
}

impl AuditRecord {
    /// The `audit.json` of a folder (a `--target` run's, or `lockstorm audit`'s).
    pub fn read(dir: &Path) -> Result<AuditRecord, ReadError> {
        read_json(&dir.join(AUDIT))
    }

    /// Each rule that found `severity`, once, in the order found.
    pub fn rules_with(&self, severity: Severity) -> Vec<&str> {
        let mut rules: Vec<&str> = Vec::new();
        for f in self.findings.iter().filter(|f| f.severity == severity) {
            if !rules.contains(&f.rule.as_str()) {
                rules.push(&f.rule);
            }
        }
        rules
    }
}
