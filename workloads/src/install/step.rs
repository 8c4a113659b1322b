//! One step of a family's set-up (`python3 -m venv`, `pip install`,
//! `npm ci`): run under a deadline with its output in the family's log, and
//! a failure told in one line, saying so when the package registry could
//! not be reached.

use super::SetupFailed;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one step may run before it is stopped: `LOCKSTORM_SETUP_TIMEOUT`
/// seconds, else 10 minutes (a full install takes well under one on a
/// working link; the tools' own retries are bounded in tens of seconds).
pub fn deadline() -> Duration {
    let secs = std::env::var("LOCKSTORM_SETUP_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(600);
    Duration::from_secs(secs)
}

/// How a step failed.
pub enum Failure {
    /// It could not be started (the program is missing): the user's to fix.
    Unstarted(String),
    /// It ended unsuccessfully, or was stopped at the deadline: how, and
    /// its log.
    Failed {
        how: String,
        log: String,
        ran_out: bool,
    },
}

/// Runs `argv` in `cwd`, its stdout and stderr appended to `log`, and
/// stops it (the group of the child we started) if it runs past
/// `deadline`.
pub fn run(argv: &[String], cwd: &Path, log: &Path, deadline: Duration) -> Result<(), Failure> {
    let command = argv.join(" ");
    let cannot = |e: std::io::Error| Failure::Unstarted(format!("cannot run `{command}`: {e}"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(cannot)?;
    let err = out.try_clone().map_err(cannot)?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // In a group of its own, gone with lockstorm: pip and npm start
    // children (builds, scripts) that a kill of the step must reach too.
    let status = process::run_within(&mut cmd, deadline).map_err(cannot)?;
    let log = std::fs::read_to_string(log).unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(Failure::Failed {
            how: format!("`{command}` failed ({s})"),
            log,
            ran_out: false,
        }),
        None => Err(Failure::Failed {
            how: format!(
                "`{command}` was still running after {} s and was stopped (LOCKSTORM_SETUP_TIMEOUT)",
                deadline.as_secs()
            ),
            log,
            ran_out: true,
        }),
    }
}

/// Why the registry could not be reached, if the log of a failed step says
/// it could not: what the tool itself reports of its connection (pip's
/// urllib3 errors, npm's system error codes).
///
/// Read from the tool's own output rather than found by a TCP probe of the
/// index's host: the tools may go through a proxy (`HTTPS_PROXY`, npm's
/// `proxy`) or a mirror from their own configuration, so a direct probe
/// could fail where they succeed, or succeed where they fail. What they
/// report is the path they actually took. A version missing from a
/// registry that answered has none of these, and keeps its own message.
pub fn unreachable(log: &str) -> Option<&'static str> {
    const SIGNS: &[(&[&str], &str)] = &[
        (
            &["ECONNREFUSED", "Connection refused"],
            "connection refused",
        ),
        (
            &[
                "ENOTFOUND",
                "EAI_AGAIN",
                "Name or service not known",
                "Temporary failure in name resolution",
                "nodename nor servname",
            ],
            "its host name does not resolve",
        ),
        (
            &[
                "ETIMEDOUT",
                "ESOCKETTIMEDOUT",
                "network timeout at",
                "ConnectTimeoutError",
                "ReadTimeoutError",
            ],
            "timed out",
        ),
        (
            &[
                "ENETUNREACH",
                "EHOSTUNREACH",
                "Network is unreachable",
                "No route to host",
            ],
            "no route to it",
        ),
        (
            &["ECONNRESET", "Connection reset by peer"],
            "the connection was reset",
        ),
        (&["ProxyError"], "its proxy failed"),
        // npm's word for any other failure to talk to the registry.
        (
            &["This is a problem related to network connectivity"],
            "a network error",
        ),
    ];
    SIGNS
        .iter()
        .find(|(needles, _)| needles.iter().any(|n| log.contains(n)))
        .map(|(_, words)| *words)
}

/// The line of a failed step's log that says why: the last one with
/// content, passing over npm's pointer to its debug log.
pub fn last_words(log: &str) -> &str {
    log.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && *l != "npm error" && !l.contains("A complete log of this run"))
        .unwrap_or("")
}

/// A failed step as the one line: the registry named when it could not be
/// reached (or the step ran out of time), with the way out.
pub fn told(failure: Failure, registry: impl FnOnce() -> String, way_out: &str) -> SetupFailed {
    let (how, log, ran_out) = match failure {
        Failure::Unstarted(how) => return SetupFailed::theirs(how),
        Failure::Failed { how, log, ran_out } => (how, log, ran_out),
    };
    if let Some(why) = unreachable(&log) {
        return SetupFailed::theirs(format!(
            "the package registry {} cannot be reached ({why}): {way_out}",
            registry()
        ));
    }
    if ran_out {
        return SetupFailed::theirs(format!(
            "{how}; is the package registry {} slow? {way_out}, or raise LOCKSTORM_SETUP_TIMEOUT (seconds)",
            registry()
        ));
    }
    match last_words(&log) {
        "" => SetupFailed::ours(how),
        said => SetupFailed::ours(format!("{how}: {said}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_unreachable_and_a_missing_version_is_not() {
        let pip = "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError('<x>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/mmh3/\nERROR: No matching distribution found for mmh3==5.3.1\n";
        assert_eq!(unreachable(pip), Some("connection refused"));
        let npm =
            "npm error code ENOTFOUND\nnpm error A complete log of this run can be found in: x\n";
        assert_eq!(unreachable(npm), Some("its host name does not resolve"));
        let stalled =
            "npm error code FETCH_ERROR\nnpm error network timeout at: http://127.0.0.1:1/ms\n";
        assert_eq!(unreachable(stalled), Some("timed out"));
        let missing = "ERROR: Could not find a version that satisfies the requirement mmh3==99 (from versions: 5.3.1)\nERROR: No matching distribution found for mmh3==99\n";
        assert_eq!(unreachable(missing), None);
        assert_eq!(
            last_words(missing),
            "ERROR: No matching distribution found for mmh3==99"
        );
        assert_eq!(last_words(npm), "npm error code ENOTFOUND");
    }
}
