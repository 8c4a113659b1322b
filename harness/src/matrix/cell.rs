//! One run of a matrix as a process of its own (`lockstorm cell`, hidden):
//! a cell has its own log, signal handling and progress, so cells can run
//! side by side (`matrix --jobs`), and one that crashes takes no other with
//! it. The matrix hands it a resolved [`RunPlan`] and reads [`Line`]s back
//! from its stdout: a [`Tick`] a second, then its outcome. Its stderr is
//! the matrix's (warnings go straight through).
//!
//! The cell leads its own process group, so a Ctrl-C at the terminal
//! reaches only the matrix, which passes one SIGINT on; if the matrix dies,
//! the kernel sends the cell SIGTERM and it stops in order all the same.

use crate::error::{Error, Result};
use crate::exit;
use crate::progress::Tick;
use crate::run::RunOutcome;
use crate::RunPlan;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use store::StoredRun;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

/// What a cell writes on stdout, one JSON object a line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Progress(Tick),
    /// The run ended (whatever its verdict): its folder.
    Done {
        dir: PathBuf,
    },
    /// The run could not be made or completed. `fatal`: the setup itself is
    /// wrong (bad options, a missing program, an adapter that will not
    /// start), so every other run would fail too.
    Failed {
        message: String,
        code: u8,
        fatal: bool,
    },
}

/// Writes `line` on stdout for the matrix. A matrix that has gone cannot
/// be told anything: the run goes on and stores its results.
pub fn report(line: &Line) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// The outcome of a run, as the cell reports it.
pub fn outcome_line(outcome: &Result<RunOutcome>) -> Line {
    match outcome {
        Ok(o) => Line::Done { dir: o.dir.clone() },
        Err(e) => Line::Failed {
            message: e.to_string(),
            code: e.exit_code(),
            fatal: matches!(
                e,
                Error::Usage(_)
                    | Error::Backend(
                        backend::Error::Usage(_) | backend::Error::MissingProgram { .. }
                    )
                    | Error::Adapter(_)
                    | Error::ClientSetup(_)
            ),
        },
    }
}

/// How a cell ended, seen from the matrix.
pub enum Ended {
    Ran(Box<RunOutcome>),
    /// A run error: the row records it and the matrix goes on.
    Failed(Error),
    /// The setup is wrong: the matrix stops with this error.
    Fatal(Error),
}

/// Runs `plan` as a cell: starts `lockstorm cell`, passes `ticks` on as
/// they come, sends it one SIGINT when `stop` turns true, and reads the
/// run back from its folder once it has ended.
pub async fn run(
    plan: &RunPlan,
    stop: &mut watch::Receiver<bool>,
    mut ticks: impl FnMut(Tick),
) -> Ended {
    let failed = |message: String| {
        Ended::Failed(Error::Cell {
            message,
            code: exit::HARNESS_FAILED,
        })
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return failed(format!("finding the lockstorm binary: {e}")),
    };
    let json = serde_json::to_string(plan).expect("a plan serializes");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["cell", "--plan", &json])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    nemesis::process::isolate_run(&mut cmd);
    let mut child = match tokio::process::Command::from(cmd).spawn() {
        Ok(child) => child,
        Err(e) => return failed(format!("starting the run's process: {e}")),
    };
    let pid = child.id();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut last = None;
    let mut asked_to_stop = *stop.borrow();
    if asked_to_stop {
        pid.map(nemesis::process::interrupt);
    }
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(text)) => match serde_json::from_str::<Line>(&text) {
                    Ok(Line::Progress(tick)) => ticks(tick),
                    Ok(end) => last = Some(end),
                    // Not ours (a library printing to stdout): ignore it.
                    Err(_) => {}
                },
                Ok(None) | Err(_) => break,
            },
            changed = stop.changed(), if !asked_to_stop => {
                // Sent once, to the process we started; it stops in order.
                asked_to_stop = changed.is_err() || *stop.borrow();
                if asked_to_stop {
                    pid.map(nemesis::process::interrupt);
                }
            }
        }
    }
    let status = child.wait().await;
    match last {
        Some(Line::Done { dir }) => read_back(dir),
        Some(Line::Failed {
            message,
            code,
            fatal,
        }) => {
            let e = Error::Cell { message, code };
            match fatal {
                true => Ended::Fatal(e),
                false => Ended::Failed(e),
            }
        }
        _ => failed(format!(
            "the run's process ended ({}) without saying how its run went",
            status.map_or_else(|e| e.to_string(), |s| s.to_string())
        )),
    }
}

/// The run's record and results, from the files it wrote.
fn read_back(dir: PathBuf) -> Ended {
    let stored = StoredRun::open(&dir);
    let read = stored.record().and_then(|r| Ok((r, stored.results()?)));
    match read {
        Ok((record, results)) => Ended::Ran(Box::new(RunOutcome {
            dir,
            record,
            results,
            first_breach: None,
        })),
        Err(e) => Ended::Failed(Error::Cell {
            message: format!("reading back {}: {e}", dir.display()),
            code: exit::HARNESS_FAILED,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back_as_written() {
        let lines = [
            Line::Progress(Tick {
                elapsed_s: 3,
                tally: "12 ops, no anomaly so far".into(),
            }),
            Line::Done {
                dir: "/r/single-none/20261201T000000".into(),
            },
            Line::Failed {
                message: "--ttl-ms 1 is out of range".into(),
                code: 254,
                fatal: true,
            },
        ];
        for line in lines {
            let text = serde_json::to_string(&line).unwrap();
            assert!(!text.contains('\n'));
            assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line);
        }
    }

    #[test]
    fn a_setup_error_is_fatal_and_keeps_its_exit_code() {
        let usage: Result<RunOutcome> = Err(Error::Usage("bad".into()));
        assert_eq!(
            outcome_line(&usage),
            Line::Failed {
                message: "bad".into(),
                code: exit::BAD_INPUT,
                fatal: true
            }
        );
        let node: Result<RunOutcome> = Err(Error::NodeStart {
            name: "n1".into(),
            message: "exited".into(),
        });
        assert!(matches!(
            outcome_line(&node),
            Line::Failed {
                fatal: false,
                code: exit::HARNESS_FAILED,
                ..
            }
        ));
    }
}
