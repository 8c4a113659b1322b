//! A lock client driven through an adapter process (see [`crate::adapter`]).
//! The library inside is opaque: the worker records what the adapter
//! answers, strikes points as closely as it can see them, restarts an
//! adapter that hangs or dies (the op in flight is `info`), and gives up
//! on one that breaks the protocol.

use super::adapter_watch;
use super::{Grant, LockClient, LockParams};
use crate::adapter::{
    self, grace, AdapterSpec, Answer, Failure, GiveUp, Group, Hello, Init, Op, Reply, Session,
    Warn, UNSAID,
};
use crate::conn::Conn;
use crate::strike::Hook;
use crate::Outcome;
use checker::history::error;
use checker::Point;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub struct Adapter {
    spec: AdapterSpec,
    init: Init,
    session: Option<Session>,
    hello: Hello,
    acquire_timeout: Duration,
    /// Added to every reply's budget: a library's own retries and timeouts
    /// may overrun what it was asked for by this much before it counts as hung.
    grace: Duration,
    strike: Hook,
    /// The lock nodes, watched for an acquisition in flight.
    watch: Vec<(String, Conn)>,
    give_up: GiveUp,
    warn: Warn,
}

impl Adapter {
    pub fn new(spec: &AdapterSpec, params: &LockParams) -> Self {
        let init = spec.init(
            &params.nodes,
            &params.sentinels,
            params.ttl.as_millis() as u64,
            params.acquire_timeout.as_millis() as u64,
            params.worker,
            params.keys.lock(),
        );
        // etcd's and ZooKeeper's members speak no Redis: nothing to watch,
        // and a strike at `acquiring` lands when the grant arrives, after
        // the decision.
        let watch = match crate::adapter::speaks_redis(&spec.topology) {
            false => Vec::new(),
            true => params
                .nodes
                .iter()
                .map(|n| (n.clone(), params.connect(n, params.op_timeout)))
                .collect(),
        };
        let mut client = Adapter {
            spec: spec.clone(),
            init,
            session: None,
            hello: Hello::default(),
            acquire_timeout: params.acquire_timeout,
            grace: grace(params.op_timeout),
            strike: params.strike.clone(),
            watch,
            give_up: params.give_up.clone(),
            warn: params.warn.clone(),
        };
        // The worker cannot run without it: a first start that fails in any
        // way is the adapter's to fix.
        if let Err(f) = client.restart() {
            client.broken(f.to_string());
        }
        client
    }

    /// A fresh adapter process, `init`ed. A replacement mid-run has as long
    /// as the first: it starts the same way (on a busy machine, 5 s was too
    /// little for either), and the op that needed it is already unknown.
    fn restart(&mut self) -> Result<(), Failure> {
        self.end_session();
        let (session, hello) = adapter::start(
            &self.spec,
            self.init.clone(),
            adapter::INIT_BUDGET,
            Group::Worker,
        )?;
        self.session = Some(session);
        self.hello = hello;
        Ok(())
    }

    /// Ends the running adapter, if any, and tells the harness of any
    /// process it left outside the worker's group: the group dies with the
    /// worker, those do not.
    fn end_session(&mut self) {
        adapter::end(&mut self.session, &self.warn);
    }

    fn broken(&self, why: String) -> ! {
        (self.give_up)(why.clone());
        // `give_up` ends the process; this is for one that did not.
        panic!("the adapter broke the protocol: {why}");
    }

    /// Sends `op`; a hung or dead adapter is replaced and the op is unknown.
    fn call(
        &mut self,
        op: Op,
        budget: Duration,
        idle: impl FnMut(&Session),
    ) -> Result<Reply, String> {
        if self.session.is_none() {
            self.restart_or_give_up()?;
        }
        let session = self.session.as_mut().expect("started above");
        match session.call(op, budget + self.grace, idle) {
            Ok(reply) => Ok(reply),
            Err(Failure::Broken(why) | Failure::Unstartable(why)) => self.broken(why),
            Err(f @ (Failure::Hung(_) | Failure::Died(_))) => {
                eprintln!("{f}; starting it again");
                let _ = self.restart_or_give_up();
                Err(format!("{}: {f}", error::ADAPTER))
            }
        }
    }

    /// The acquire, with the lock nodes watched: `acquiring` is struck as
    /// soon as a lock value that was not there when the request went out
    /// shows on a node (the library's write reached Redis; whose write it
    /// is, the worker cannot tell, so the strike's `how` names the value).
    /// Once the adapter is frozen, its stdout says whether the library had
    /// already decided: a reply begun before the freeze (a library that
    /// sends to every node at once can answer as the first write shows)
    /// makes it a strike after the decision, which shows nothing of a
    /// pause mid-acquisition.
    fn acquire_watched(&mut self, op: Op) -> Result<Reply, String> {
        if self.session.is_none() {
            self.restart_or_give_up()?;
        }
        let adapter = self.session.as_ref().expect("started above").pid();
        let mut nodes = std::mem::take(&mut self.watch);
        let key = self.init.key.clone();
        let before = adapter_watch::values(&mut nodes, &key);
        let done = AtomicBool::new(false);
        let (found, seen) = mpsc::channel();
        let hook = self.strike.clone();
        let budget = self.acquire_timeout;
        let reply = std::thread::scope(|s| {
            s.spawn(|| adapter_watch::watch(&mut nodes, &key, &before, adapter, &done, found));
            let reply = self.call(op, budget, |session| {
                if let Ok(seen) = seen.try_recv() {
                    let begun = session.reply_begun();
                    let value = seen.2.clone();
                    hook.at_seen(Point::Acquiring, frozen_at(seen, begun), begun, Some(value));
                    let _ = process::resume(adapter);
                }
            });
            done.store(true, Ordering::SeqCst);
            reply
        });
        // Frozen as the reply came in (or not struck after all): go on.
        // The reply is in, so the library had decided.
        if let Ok(seen) = seen.try_recv() {
            let value = seen.2.clone();
            hook.at_seen(Point::Acquiring, frozen_at(seen, true), true, Some(value));
        }
        let _ = process::resume(adapter);
        self.watch = nodes;
        reply
    }

    fn restart_or_give_up(&mut self) -> Result<(), String> {
        match self.restart() {
            Ok(()) => Ok(()),
            Err(Failure::Broken(why) | Failure::Unstartable(why)) => self.broken(why),
            Err(f) => Err(format!("{}: {f}", error::ADAPTER)),
        }
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.end_session();
    }
}

/// The strike's `how` when the watch froze the adapter, `decided` if its
/// reply had begun by then.
fn frozen_at((node, key, value): adapter_watch::Seen, decided: bool) -> String {
    let when = match decided {
        false => "while its acquire was in flight, before the library's decision",
        true => "after the library's decision: its reply was already written",
    };
    format!("the adapter was frozen as a new lock value appeared, {when}: {key}={value} on {node}")
}

impl LockClient for Adapter {
    fn fences(&self) -> bool {
        self.hello.has("fence")
    }

    fn try_acquire(&mut self, _token: &str) -> Outcome<Option<Grant>> {
        let timeout_ms = self.acquire_timeout.as_millis() as u64;
        let op = Op::Acquire { timeout_ms };
        let reply = match self.strike.armed(Point::Acquiring) {
            true => self.acquire_watched(op),
            false => self.call(op, self.acquire_timeout, |_| {}),
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(why) => return Outcome::Info(why),
        };
        match reply.answer {
            Some(Answer::Yes) => {
                // Not seen on the nodes (or armed since): struck before the grant is recorded.
                let how = "when the adapter's grant arrived (after the library's decision), before the worker recorded it";
                self.strike
                    .at_seen(Point::Acquiring, how.into(), true, None);
                Outcome::Ok(Some(Grant {
                    fence: reply.fence,
                    nodes: Vec::new(),
                    client_token: reply.token,
                }))
            }
            Some(Answer::No) => match reply.error {
                Some(e) if error::kind(&e) == error::LOCK_BUSY => Outcome::Ok(None),
                e => Outcome::Fail(e.unwrap_or_else(|| error::LOCK_BUSY.into())),
            },
            _ => Outcome::Info(reply.error.unwrap_or_else(|| UNSAID.into())),
        }
    }

    fn release(&mut self, _token: &str) -> Outcome<()> {
        let reply = match self.call(Op::Release, Duration::ZERO, |_| {}) {
            Ok(reply) => reply,
            Err(why) => return Outcome::Info(why),
        };
        match reply.answer {
            Some(Answer::Yes) => Outcome::Ok(()),
            Some(Answer::No) => {
                Outcome::Fail(reply.error.unwrap_or_else(|| error::NOT_HELD.into()))
            }
            _ => Outcome::Info(reply.error.unwrap_or_else(|| UNSAID.into())),
        }
    }

    fn marks(&self) -> &'static [Point] {
        &[Point::Acquiring]
    }

    fn own_view(&mut self) -> Option<Outcome<bool>> {
        if !self.hello.has("check") {
            // The library cannot say: always valid (run.json says so).
            return Some(Outcome::Ok(true));
        }
        let reply = match self.call(Op::Check, Duration::ZERO, |_| {}) {
            Ok(reply) => reply,
            Err(why) => return Some(Outcome::Info(why)),
        };
        Some(match reply.answer {
            Some(Answer::Yes) => Outcome::Ok(reply.valid == Some(true)),
            Some(Answer::No) => {
                Outcome::Fail(reply.error.unwrap_or_else(|| "check refused".into()))
            }
            _ => Outcome::Info(reply.error.unwrap_or_else(|| UNSAID.into())),
        })
    }
}
