//! Killing the lock node: what it keeps across a restart decides whether the
//! lock, and the fencing counter, survive.

mod common;

use checker::Results;
use common::{count, run_short};
use std::path::PathBuf;

/// The run's output, results and folder (kept until the `TempDir` drops).
fn kill_run(config: &str, persistence: &str) -> (common::Run, Results, PathBuf, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let extra = ["--persistence", persistence];
    let (out, results, dir) = run_short(tmp.path(), config, "kill", "15", "1", &extra);
    // The old pid is gone and the restarted node answers with a new run id.
    common::assert_verified(&dir, "start-kill");
    common::assert_verified(&dir, "stop-kill");
    let restart = &common::events(&dir, "stop-kill")[0]["value"]["verified"];
    assert_ne!(restart["old_run_id"], restart["new_run_id"], "{restart}");
    (out, results, dir, tmp)
}

#[test]
fn single_restarted_without_persistence_loses_the_lock_and_with_aof_always_keeps_it() {
    let (out, results, _, _tmp) = kill_run("single", "none");
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);

    let (out, results, dir, _tmp) = kill_run("single", "aof-always");
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
}

/// The fence counter restarts from zero without persistence. New tokens are
/// first refused as stale, but the counter climbs back to the number the
/// stale holder still has, and the storage must accept a token equal to the
/// highest it has seen (a holder reads, then writes, with one token): two
/// holders share a token, and an increment is lost.
#[test]
fn fenced_needs_a_durable_fence_counter() {
    let (out, results, _, _tmp) = kill_run("fenced", "none");
    assert_eq!(out.code, 1, "{}", out.stdout);
    let counter = results.counter().expect("a counter report");
    assert!(
        counter.stale_fence_rejected.reads + counter.stale_fence_rejected.writes > 0,
        "{}",
        out.stdout
    );
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);

    let (out, results, dir, _tmp) = kill_run("fenced", "aof-always");
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(count(&results, "lost-update"), 0);
}
