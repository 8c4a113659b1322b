//! The audit as the terminal shows it: one row per finding (severity, rule,
//! node, what was seen), and under each that is not ok, the reason and the
//! command that shows it. Pure.

use super::rules::{Finding, Severity};

/// The table, worst first, then a line counting each severity.
pub fn render(title: &str, findings: &[Finding], code: u8, json: Option<&str>) -> String {
    let nodes: Vec<String> = findings.iter().map(|f| f.nodes.join(",")).collect();
    let width = |column: &dyn Fn(usize) -> usize, head: &str| {
        (0..findings.len())
            .map(column)
            .max()
            .unwrap_or(0)
            .max(head.len())
    };
    let rule_w = width(&|i| findings[i].rule.len(), "rule");
    let node_w = width(&|i| nodes[i].len(), "node");
    let mut out = format!("{title}\n\n");
    let row = |sev: &str, rule: &str, node: &str, what: &str| {
        format!("{sev:<8} {rule:<rule_w$}  {node:<node_w$}  {what}\n")
    };
    out.push_str(&row("severity", "rule", "node", "what"));
    let indent = " ".repeat(9);
    for (f, node) in findings.iter().zip(&nodes) {
        let sev = match f.severity {
            Severity::Ok => "ok".to_string(),
            s => s.name().to_uppercase(),
        };
        out.push_str(&row(&sev, f.rule, node, &f.what));
        if f.severity == Severity::Ok {
            continue;
        }
        out.push_str(&format!("{indent}why: \"{}\"\n", f.reason));
        match &f.demonstrate {
            Some(command) => out.push_str(&format!("{indent}see: {command}\n")),
            None => {
                let instead = super::rules::rule(f.rule).map_or("", |r| r.no_command);
                if !instead.is_empty() {
                    out.push_str(&format!("{indent}see: {instead}\n"));
                }
            }
        }
    }
    out.push_str(&format!(
        "\n{}: exit {code}\n",
        super::rules::summary(findings)
    ));
    match json {
        Some(path) => out.push_str(&format!("audit.json: {path}\n")),
        None => out.push_str("nothing was read, so no audit.json was written\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::rules::EVICTION;

    #[test]
    fn a_risk_shows_its_reason_and_command_an_ok_row_does_not() {
        let finding = |severity, demonstrate: Option<&str>| Finding {
            rule: EVICTION.name,
            nodes: vec!["127.0.0.1:7000".into()],
            severity,
            what: "maxmemory-policy allkeys-lru".into(),
            reason: EVICTION.reason,
            demonstrate: demonstrate.map(String::from),
        };
        let text = render(
            "audit",
            &[finding(Severity::Risk, None), finding(Severity::Ok, None)],
            1,
            Some("r/audit.json"),
        );
        assert!(
            text.contains("RISK     eviction  127.0.0.1:7000  maxmemory-policy allkeys-lru"),
            "{text}"
        );
        assert_eq!(text.matches("why: ").count(), 1, "{text}");
        assert!(
            text.contains("see: none yet: lockstorm has no eviction fault"),
            "{text}"
        );
        assert!(
            text.contains("1 at risk (eviction), 0 unknown, 0 warning(s), 1 ok: exit 1"),
            "{text}"
        );
        assert!(text.ends_with("audit.json: r/audit.json\n"), "{text}");
    }
}
