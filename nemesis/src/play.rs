//! Plays a schedule against a live run: each step's package acts at its
//! time (never sooner than the quiet after the last), until the steps are
//! done or the run stops. The schedule itself is `schedule.rs`, pure.

use crate::runner::{Env, FaultParams};
use crate::Step;
use tokio::time::{Duration, Instant};

/// Runs `steps` relative to `start` until they are done or the run ends.
pub async fn play(steps: Vec<Step>, mut env: Env, p: FaultParams, start: Instant) {
    let mut earliest = start;
    for step in steps {
        let at = (start + Duration::from_millis(step.at_ms)).max(earliest);
        if !env
            .sleep(at.saturating_duration_since(Instant::now()))
            .await
        {
            return;
        }
        let p = FaultParams {
            at: step.at.unwrap_or(p.at),
            ..p
        };
        step.action.package().run(&mut env, &p).await;
        if env.stopping() {
            return;
        }
        earliest = Instant::now() + p.quiet;
    }
}
