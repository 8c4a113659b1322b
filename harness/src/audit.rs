//! `lockstorm audit --target URL`, and a `--target` run's audit: the
//! command around the deployment crate's audit (what is gathered, what it
//! means, how it prints), with its flags, its exit code and its
//! `audit.json`.

use crate::error::{Context, Error, Result};
use crate::exit;
use deployment::audit::{facts, gather, rules, table};
use deployment::target::Target;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// The deployment: redis://host:port, sentinel://host:port[,host:port…]/<master>
    /// or redlock://host:port,host:port,host:port; the password comes from
    /// LOCKSTORM_REDIS_PASSWORD. Only read-only commands are sent
    #[arg(long)]
    pub target: String,
    #[arg(long, value_name = "MS", help = crate::help::ttl_audit())]
    pub ttl_ms: Option<u64>,
    /// PINGs per node for the latency rule
    #[arg(long, default_value_t = 50)]
    pub pings: u32,
    /// The folder audit.json is written to [default: results/audit-<kind>-<timestamp>/]
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// The CA certificate (PEM) a rediss:// target's certificate is checked
    /// against [default: the system's roots]
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// What `audit` found, and the exit code it means (0, 1 or 2).
pub struct Audited {
    pub text: String,
    pub code: u8,
}

/// `audit.json`: the target (never its password), what each node said,
/// and the findings.
#[derive(Serialize)]
struct Record<'a> {
    target: String,
    #[serde(flatten)]
    resolved: &'a Target,
    ttl_ms: u64,
    ttl_default: bool,
    pings: u32,
    findings: &'a [rules::Finding],
    exit: u8,
    nodes: &'a [facts::Node],
    sentinels: &'a [facts::Sentinel],
}

pub fn audit(args: &AuditArgs) -> Result<Audited> {
    let target = Target::parse(&args.target).map_err(Error::Usage)?;
    // A TLS target is read through its bridge, which runs on this runtime
    // while the (blocking) gathering goes on.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let (reached, _bridges) =
        runtime.block_on(deployment::tls::bridge(&target, args.tls_ca.as_deref()))?;
    let ttl_ms = args.ttl_ms.unwrap_or(crate::defaults::AUDIT_MS);
    if ttl_ms == 0 || !(1..=10_000).contains(&args.pings) {
        return Err(Error::Usage(
            "--ttl-ms must be above 0 and --pings 1 to 10000".into(),
        ));
    }
    let facts = gather::gather(&reached, ttl_ms, args.pings);
    let findings = rules::audit(&facts);
    let code = exit::of(rules::verdict(&findings));
    let reached = facts.nodes.iter().any(|n| n.unreachable.is_none())
        || facts.sentinels.iter().any(|s| s.unreachable.is_none());
    // A folder only once something was read: a typo'd port leaves none.
    let json = match reached {
        false => None,
        true => {
            let record = Record {
                target: target.to_string(),
                resolved: &target,
                ttl_ms,
                ttl_default: args.ttl_ms.is_none(),
                pings: args.pings,
                findings: &findings,
                exit: code,
                nodes: &facts.nodes,
                sentinels: &facts.sentinels,
            };
            Some(write(args.output.as_deref(), &target, &record)?)
        }
    };
    let ttl = match args.ttl_ms {
        Some(ms) => format!("TTL {ms} ms"),
        None => format!(
            "TTL {} ms, the default: give yours with --ttl-ms",
            crate::defaults::AUDIT_MS
        ),
    };
    let title = format!("lockstorm audit {target} ({}; {ttl})", target.kind_name());
    let json = json.map(|p| p.display().to_string());
    Ok(Audited {
        text: table::render(&title, &findings, code, json.as_deref()),
        code,
    })
}

/// What a `--target` run's audit found, in a line, and each data node's
/// server version.
pub struct ForRun {
    pub summary: String,
    pub servers: std::collections::BTreeMap<String, String>,
}

/// PINGs per node when a run audits its target: enough for the latency
/// rule's median, few enough not to delay the run.
const RUN_PINGS: u32 = 10;

/// A `--target` run's audit, held to the run's TTL, into its folder's
/// `audit.json` (read-only commands only, like `lockstorm audit`).
pub async fn for_run(target: &Target, ttl: std::time::Duration, dir: &Path) -> Result<ForRun> {
    let (target, dir) = (target.clone(), dir.to_path_buf());
    let ttl_ms = ttl.as_millis() as u64;
    let gathered = tokio::task::spawn_blocking(move || {
        let facts = gather::gather(&target, ttl_ms, RUN_PINGS);
        let findings = rules::audit(&facts);
        let code = exit::of(rules::verdict(&findings));
        let record = Record {
            target: target.to_string(),
            resolved: &target,
            ttl_ms,
            ttl_default: false,
            pings: RUN_PINGS,
            findings: &findings,
            exit: code,
            nodes: &facts.nodes,
            sentinels: &facts.sentinels,
        };
        write(Some(&dir), &target, &record)?;
        let servers = facts
            .nodes
            .iter()
            .filter_map(|n| Some((n.addr.clone(), version(&n.server)?)))
            .collect();
        Ok::<_, Error>(ForRun {
            summary: rules::summary(&findings),
            servers,
        })
    });
    gathered.await.map_err(|e| Error::Io {
        context: "auditing the target".into(),
        source: std::io::Error::other(e),
    })?
}

/// `redis 7.2.4` or `valkey 8.0.1`, from `INFO server`.
fn version(server: &std::collections::BTreeMap<String, String>) -> Option<String> {
    match server.get("valkey_version") {
        Some(v) => Some(format!("valkey {v}")),
        None => server.get("redis_version").map(|v| format!("redis {v}")),
    }
}

/// Writes `audit.json` into `--output`, or a fresh
/// `results/audit-<kind>-<timestamp>/` named as a matrix's folder is.
fn write(output: Option<&Path>, target: &Target, record: &Record) -> Result<PathBuf> {
    let dir = match output {
        Some(dir) => {
            std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
            dir.to_path_buf()
        }
        None => store::layout::unique_dir(
            Path::new(crate::options::RESULTS),
            &format!("audit-{}-{}", target.kind_name(), store::layout::stamp()),
        )?,
    };
    let path = dir.join(store::AUDIT);
    let json = serde_json::to_string_pretty(record).expect("an audit always serialises");
    std::fs::write(&path, json + "\n").context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;
    use deployment::audit::samples;
    use store::audit::{AuditRecord, Severity};

    /// What the audit writes is what a stored run's readers read back.
    #[test]
    fn audit_json_reads_back_through_the_stores_type() {
        let target = Target::parse("redis://127.0.0.1:7000").unwrap();
        let node = samples::with(samples::safe("a:1"), "maxmemory-policy", "allkeys-lru");
        let facts = samples::facts(deployment::Kind::Single, vec![node]);
        let findings = rules::audit(&facts);
        let record = Record {
            target: target.to_string(),
            resolved: &target,
            ttl_ms: 10_000,
            ttl_default: true,
            pings: 1,
            findings: &findings,
            exit: exit::of(rules::verdict(&findings)),
            nodes: &facts.nodes,
            sentinels: &facts.sentinels,
        };
        let dir = tempfile::tempdir().unwrap();
        write(Some(dir.path()), &target, &record).unwrap();
        let read = AuditRecord::read(dir.path()).unwrap();
        assert_eq!(read.target, "redis://127.0.0.1:7000");
        assert_eq!(read.findings.len(), findings.len());
        assert_eq!(read.rules_with(Severity::Risk), ["eviction"]);
    }

    /// Every command a finding shows parses as `lockstorm run` and
    /// resolves to a plan: a reader can paste it.
    #[test]
    fn every_command_shown_is_a_run_lockstorm_accepts() {
        let commands = deployment::audit::samples::demonstrations();
        assert!(commands.len() >= 7, "{commands:#?}");
        for command in commands {
            let words: Vec<&str> = command.split_whitespace().collect();
            let matches = crate::cli::command()
                .try_get_matches_from(&words)
                .unwrap_or_else(|e| panic!("{command}: {e}"));
            let (name, run) = matches.subcommand().expect("a subcommand");
            assert_eq!(name, "run", "{command}");
            let options = crate::RunOptions::from_arg_matches(run)
                .unwrap_or_else(|e| panic!("{command}: {e}"));
            if let Err(refused) = options.resolve() {
                panic!("{command}: {refused:?}");
            }
        }
    }
}
