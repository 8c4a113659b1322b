//! `terminate-session`: the server ends the lock holder's PostgreSQL
//! session (`pg_terminate_backend`), as an operator, a connection pooler or
//! an idle-session timeout would, while the holder is held at a strike
//! point (`--at`, by default after its last check, right before its write)
//! for `--pause-ms`. The server frees a session's locks at once; the holder
//! learns its session is gone only when it next uses it. A session lock
//! (`pg-advisory`) is then taken by another worker while the first still
//! works; a transaction's lock (`pg-row-lock`) takes the holder's
//! uncommitted write with it.

use crate::cluster::BoxFuture;
use crate::names::{skip_event, Fault};
use crate::package::{Package, Shape};
use crate::runner::{Env, FaultParams, Struck};
use checker::Point;
use serde_json::json;
use std::time::Duration;

pub struct TerminateSession;

impl Package for TerminateSession {
    fn name(&self) -> &'static str {
        Fault::TerminateSession.name()
    }
    fn supports(&self, shape: &Shape) -> Result<(), String> {
        match shape.locks_in_storage {
            true => Ok(()),
            false => Err(format!(
                "ends the lock's PostgreSQL session, and config {} does not lock with PostgreSQL: choose pg-row-lock, pg-advisory or pg-advisory-fenced",
                shape.config
            )),
        }
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.pause
    }
    fn strikes(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        Box::pin(terminate(env, p.pause, p.at))
    }
}

async fn terminate(env: &mut Env, hold: Duration, at: Point) {
    let name = TerminateSession.name();
    let Some(Struck { parked, target, .. }) = env.strike(name, at).await else {
        return;
    };
    let worker = checker::history::worker_name(parked.worker);
    let began = env.journal.now_ns();
    // The evidence: the server ended a backend of the holder's lock
    // session (pg_terminate_backend waits until it has exited).
    let ended = match env.cluster.end_lock_session(&worker).await {
        Ok(pids) if pids.is_empty() => {
            Err(format!("{worker}'s lock session held no lock when struck"))
        }
        Ok(pids) => Ok(json!({"backends": pids, "terminated": true})),
        Err(e) => Err(format!("ending {worker}'s lock session failed: {e}")),
    };
    if let Err(reason) = &ended {
        env.release(&parked);
        let mut value = target;
        value["reason"] = json!(reason);
        env.journal.record(&skip_event(name), value, None);
        return;
    }
    env.journal.record_at(
        began,
        &Fault::TerminateSession.start_event(),
        crate::verify::attach(target.clone(), ended),
        None,
    );
    // The holder stays where it was struck, unaware, while another worker
    // may take the lock its session no longer holds.
    env.sleep(hold).await;
    env.release(&parked);
    env.journal
        .record(&Fault::TerminateSession.stop_event(), target, None);
}
