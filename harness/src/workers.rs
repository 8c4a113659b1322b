//! Worker processes: `lockstorm worker --spec …`, one per `--workers`. Their
//! stdout carries history events; their stdin carries control ("stop").

use crate::error::{Context, Result};
use crate::journal::HistoryWriter;
use checker::history::Event;
use nemesis::process;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use workloads::WorkerSpec;

pub struct Worker {
    pub index: usize,
    pub pid: u32,
    child: Child,
    /// Lines for the worker's stdin ("stop", "skew …"); closing it is a stop too.
    pub control: mpsc::UnboundedSender<String>,
    reader: JoinHandle<()>,
}

pub fn spawn(
    spec: &WorkerSpec,
    exe: &Path,
    run_dir: &Path,
    history: Arc<HistoryWriter>,
) -> Result<Worker> {
    let index = spec.index as usize;
    let log_path = run_dir.join("workers").join(format!("worker-{index}.log"));
    std::fs::create_dir_all(log_path.parent().expect("has a parent"))
        .context(|| format!("creating {}", log_path.display()))?;
    let log =
        std::fs::File::create(&log_path).context(|| format!("creating {}", log_path.display()))?;
    let spec_json = serde_json::to_string(spec).expect("specs always serialise");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["worker", "--spec", &spec_json])
        .current_dir(run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    process::isolate(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().context(|| format!("starting worker {index}"))?;
    let pid = child.id().expect("a just-spawned child has a pid");
    let stdout = child.stdout.take().expect("stdout is piped");
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Event>(&line) {
                Ok(event) => history.append(event, Some(index)),
                Err(e) => {
                    tracing::warn!("worker {index} wrote a line that is not an event ({e}): {line}")
                }
            }
        }
    });
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let (control, mut lines) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Some(line) = lines.recv().await {
            if stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    Ok(Worker {
        index,
        pid,
        control,
        child,
        reader,
    })
}

/// Asks every worker to finish its cycle and exit; one that has not exited
/// within `grace` is resumed (it may be stopped) and killed. Returns once
/// every worker is reaped and its last event recorded.
pub async fn stop_all(workers: Vec<Worker>, grace: Duration) {
    for w in &workers {
        let _ = w.control.send("stop".into());
    }
    for mut w in workers {
        match tokio::time::timeout(grace, w.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(status) => tracing::warn!("worker {} exited with {status:?}", w.index),
            Err(_) => {
                tracing::warn!(
                    "worker {} did not stop within {grace:?}: killing it",
                    w.index
                );
                let _ = process::resume(w.pid);
                let _ = w.child.kill().await;
            }
        }
        let _ = w.reader.await;
    }
}
