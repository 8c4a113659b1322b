//! The counter behind a storage adapter (`--storage-cmd`): a team's own
//! database or service, driven through a child process that speaks JSON
//! lines as a lock adapter does (docs/protocol.md, "Storage adapters").
//! Its answers become the same history as the built-in storages' (a refused
//! fence is `fail` with `stale-fence`), so every checker reads it alike. An
//! adapter that hangs or dies leaves its op `info` and is started again; one
//! that breaks the protocol is given up on, which in a worker ends the run.

use super::Storage;
use crate::adapter::{
    self, grace, AdapterSpec, Answer, Failure, Fence, GiveUp, Group, Op, Reply, Session,
    StorageInit, Warn, UNSAID,
};
use crate::Outcome;
use checker::history::error;
use std::time::Duration;

/// An `ok:false` without an error.
const REFUSED: &str = "refused: the adapter did not say why";

pub struct AdapterStorage {
    spec: AdapterSpec,
    init: StorageInit,
    group: Group,
    session: Option<Session>,
    /// What its `init` said: the storage and its version.
    storage: String,
    /// Every reply's budget: the ops have none of their own.
    budget: Duration,
    give_up: GiveUp,
    warn: Warn,
}

impl AdapterStorage {
    /// Starts the adapter in `group` and has it `init`; a first start that
    /// fails in any way is the adapter's to fix, so it is the caller's error.
    /// `give_up` is told of a protocol break later on (a worker's ends it).
    pub fn start(
        spec: &AdapterSpec,
        init: StorageInit,
        op_timeout: Duration,
        group: Group,
        give_up: GiveUp,
        warn: Warn,
    ) -> Result<Self, Failure> {
        let mut storage = AdapterStorage {
            spec: spec.clone(),
            init,
            group,
            session: None,
            storage: String::new(),
            budget: grace(op_timeout),
            give_up,
            warn,
        };
        storage.restart()?;
        Ok(storage)
    }

    /// The storage and its version, as its adapter's `init` said.
    pub fn storage(&self) -> &str {
        &self.storage
    }

    /// `reset`: the counter to 0 and every fence forgotten, before any
    /// worker starts.
    pub fn reset(&mut self) -> Outcome<()> {
        let reply = match self.call(Op::Reset) {
            Ok(reply) => reply,
            Err(why) => return Outcome::Info(why),
        };
        done(reply)
    }

    /// A fresh adapter process, `init`ed, as long to start as the first.
    fn restart(&mut self) -> Result<(), Failure> {
        adapter::end(&mut self.session, &self.warn);
        let (session, storage) = adapter::start_storage(
            &self.spec,
            self.init.clone(),
            adapter::INIT_BUDGET,
            self.group,
        )?;
        self.session = Some(session);
        self.storage = storage;
        Ok(())
    }

    /// Sends `op`: its reply, or the error of an op whose outcome is
    /// unknown (a hung or dead adapter, replaced; a broken one, given up).
    fn call(&mut self, op: Op) -> Result<Reply, String> {
        if self.session.is_none() {
            self.restart_or_give_up()?;
        }
        let session = self.session.as_mut().expect("started above");
        match session.call(op, self.budget, |_| {}) {
            Ok(reply) => Ok(reply),
            Err(Failure::Broken(why) | Failure::Unstartable(why)) => Err(self.broken(why)),
            Err(f @ (Failure::Hung(_) | Failure::Died(_))) => {
                eprintln!("{f}; starting it again");
                let _ = self.restart_or_give_up();
                Err(format!("{}: {f}", error::ADAPTER))
            }
        }
    }

    fn restart_or_give_up(&mut self) -> Result<(), String> {
        match self.restart() {
            Ok(()) => Ok(()),
            Err(Failure::Broken(why) | Failure::Unstartable(why)) => Err(self.broken(why)),
            Err(f) => Err(format!("{}: {f}", error::ADAPTER)),
        }
    }

    /// Gives up on the adapter (a worker's `give_up` ends the worker); for
    /// a caller whose `give_up` returns, the op's error.
    fn broken(&mut self, why: String) -> String {
        adapter::end(&mut self.session, &self.warn);
        (self.give_up)(why.clone());
        format!("{}: {why}", error::ADAPTER)
    }
}

impl Drop for AdapterStorage {
    fn drop(&mut self) {
        adapter::end(&mut self.session, &self.warn);
    }
}

/// A reply's `ok` as the history's: `fail` keeps the adapter's error
/// (`stale-fence` for a refused fence), `info` its error or that it gave none.
fn outcome<T>(reply: Reply, ok: impl FnOnce(&Reply) -> T) -> Outcome<T> {
    match reply.answer {
        Some(Answer::Yes) => Outcome::Ok(ok(&reply)),
        Some(Answer::No) => Outcome::Fail(reply.error.unwrap_or_else(|| REFUSED.into())),
        _ => Outcome::Info(reply.error.unwrap_or_else(|| UNSAID.into())),
    }
}

fn done(reply: Reply) -> Outcome<()> {
    outcome(reply, |_| ())
}

impl Storage for AdapterStorage {
    fn read(&mut self, fence: Option<u64>) -> Outcome<i64> {
        let fence = fence.map(Fence);
        match self.call(Op::Read { fence }) {
            // `parse_reply` holds a read's `ok:true` to an integer value.
            Ok(reply) => outcome(reply, |r| r.value.unwrap_or_default()),
            Err(why) => Outcome::Info(why),
        }
    }

    fn write(&mut self, value: i64, fence: Option<u64>) -> Outcome<()> {
        let fence = fence.map(Fence);
        match self.call(Op::Write { value, fence }) {
            Ok(reply) => done(reply),
            Err(why) => Outcome::Info(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(answer: Answer, error: Option<&str>, value: Option<i64>) -> Reply {
        Reply {
            answer: Some(answer),
            error: error.map(String::from),
            value,
            ..Reply::default()
        }
    }

    /// Never upgraded: only what the adapter says becomes `ok` or `fail`.
    #[test]
    fn a_reply_becomes_the_history_s_outcome_with_its_error() {
        let read = |r| outcome(r, |r: &Reply| r.value.unwrap_or_default());
        assert_eq!(read(reply(Answer::Yes, None, Some(5))), Outcome::Ok(5));
        assert_eq!(
            read(reply(Answer::No, Some("stale-fence"), None)),
            Outcome::Fail("stale-fence".into())
        );
        assert_eq!(
            done(reply(Answer::No, None, None)),
            Outcome::Fail(REFUSED.into())
        );
        assert_eq!(
            done(reply(Answer::Unknown, Some("timeout: 2 s"), None)),
            Outcome::Info("timeout: 2 s".into())
        );
        assert_eq!(
            done(reply(Answer::Unknown, None, None)),
            Outcome::Info(UNSAID.into())
        );
    }
}
