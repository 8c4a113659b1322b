//! `run.json` as the harness writes and reads it: the store's record over
//! the harness's own [`RunPlan`], and what the plan tells a reader.

use crate::options::RunPlan;
use std::time::Duration;
use store::Outline;
use workloads::Config;

/// `run.json` of a lockstorm run.
pub type RunRecord = store::RunRecord<RunPlan>;

impl store::Plan for RunPlan {
    type Step = nemesis::Step;

    fn deadlock_after(&self, expires: bool) -> Duration {
        RunPlan::deadlock_after(self, expires)
    }

    fn outline(&self) -> Outline {
        Outline {
            config: self.config.to_string(),
            nemesis: self.aimed().to_string(),
            seed: self.seed,
            workers: self.workers,
            time_limit: self.time_limit,
            ttl: self.ttl,
        }
    }

    fn lease_is_ttl(config: &str) -> bool {
        config.parse::<Config>().is_ok_and(Config::lease_is_ttl)
    }

    fn writes_commit_with_release(&self) -> bool {
        self.config.commits_with_release() && self.client.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use checker::Promise;

    #[test]
    fn an_older_record_loads_with_the_plans_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let run = store::StoredRun::open(tmp.path());
        let older = r#"{"promise": "data-safety", "options": {"config": "fenced", "nemesis": "clock,partition"}}"#;
        std::fs::write(run.run_json(), older).unwrap();
        let record: RunRecord = run.record().unwrap();
        assert_eq!(record.promise, Promise::DataSafety);
        assert_eq!(record.options.config.to_string(), "fenced");
        assert_eq!(record.options.nemesis.to_string(), "partition+clock");
        assert_eq!(record.options.workers, RunPlan::default().workers);
        assert_eq!(
            record.settings().deadlock_after,
            Some(record.options.deadlock_after(true))
        );
    }
}
