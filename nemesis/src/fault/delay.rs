//! The faults that act on one command in the fault proxy: `delay` holds one
//! request of a worker (or its reply) past the lease, then lets it go on;
//! `lose-reply` forwards one request, drops its reply and resets the
//! connection. The strike point names the command (`aim`); the proxy
//! catches it from whichever worker sends it first, so a library the worker
//! cannot see inside is struck the same way as a built-in client.

use crate::cluster::BoxFuture;
use crate::names::{skip_event, Fault};
use crate::package::{Package, Shape};
use crate::runner::{Env, FaultParams};
use crate::verify;
use checker::history::fault::{ACCEPTED, DELIVERED_WRITE};
use checker::Point;
use proxy::{Act, Class, Role, Trap};
use serde_json::json;
use std::time::Duration;

pub struct Delay;
pub struct LoseReply;

/// The command a strike point names, and whether the fault acts on its
/// reply. Pure, one table for both faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aim {
    pub role: Role,
    pub class: Class,
    /// Hold the reply rather than the request.
    pub reply: bool,
}

pub fn aim(point: Point) -> Aim {
    let (role, class, reply) = match point {
        // The grant comes back late: the client holds a lease that ran out.
        Point::Acquiring => (Role::Lock, Class::Acquire, true),
        // The first request after the grant: the read leaves late.
        Point::Acquired => (Role::Storage, Class::Read, false),
        // The read comes back late: the lease check before the write sees it.
        Point::Read => (Role::Storage, Class::Read, true),
        // The write leaves in time and arrives late: no check can help.
        Point::Checked => (Role::Storage, Class::Write, false),
        // The release arrives after the key may have changed hands.
        Point::Releasing => (Role::Lock, Class::Release, false),
    };
    Aim { role, class, reply }
}

impl Package for Delay {
    fn name(&self) -> &'static str {
        Fault::Delay.name()
    }
    fn supports(&self, _: &Shape) -> Result<(), String> {
        Ok(())
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        p.pause
    }
    fn strikes(&self) -> bool {
        true
    }
    fn needs_proxy(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        let aim = aim(p.at);
        let act = match aim.reply {
            // Only a grant is worth holding: a refusal that comes late harms nothing.
            true => Act::HoldReply {
                hold: p.pause,
                granted_only: aim.class == Class::Acquire,
            },
            // A write or release is let go right behind the next holder's
            // write or grant: Kleppmann's delayed packet, made sure.
            false => match aim.class {
                Class::Write => Act::HoldPast {
                    hold: p.pause,
                    after: Class::Write,
                },
                Class::Release => Act::HoldPast {
                    hold: p.pause,
                    after: Class::Acquire,
                },
                _ => Act::HoldRequest(p.pause),
            },
        };
        Box::pin(spring(env, Fault::Delay, p.at, aim, act, Duration::ZERO))
    }
}

impl Package for LoseReply {
    fn name(&self) -> &'static str {
        Fault::LoseReply.name()
    }
    fn supports(&self, _: &Shape) -> Result<(), String> {
        Ok(())
    }
    fn duration(&self, p: &FaultParams) -> Duration {
        lingers(p)
    }
    fn strikes(&self) -> bool {
        true
    }
    fn needs_proxy(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, env: &'a mut Env, p: &'a FaultParams) -> BoxFuture<'a, ()> {
        let act = Act::DropReply;
        Box::pin(spring(
            env,
            Fault::LoseReply,
            p.at,
            aim(p.at),
            act,
            lingers(p),
        ))
    }
}

/// How long a lost reply's effect lasts: a grant whose reply was lost leaves
/// a key nobody knows it holds, until its TTL. The fault ends then, so a run
/// of lost grants does not read as a stuck lock (`deadlock`).
fn lingers(p: &FaultParams) -> Duration {
    p.lock_ttl
}

/// Sets the trap, records the start once the proxy has caught the command
/// (stamped when it caught it), and the stop with the proxy's evidence once
/// it let go (held ms, bytes, connections reset), or `linger` after that.
async fn spring(env: &mut Env, fault: Fault, at: Point, aim: Aim, act: Act, linger: Duration) {
    let Some(net) = env.net.clone() else {
        let reason = "this run has no fault proxy";
        env.journal
            .record(&skip_event(fault.name()), json!({"reason": reason}), None);
        return;
    };
    let mut armed = net.arm(Trap {
        workers: None,
        role: aim.role,
        class: aim.class,
        act,
    });
    let caught = tokio::select! {
        c = tokio::time::timeout(env.arm_timeout, &mut armed.caught) => c.ok().and_then(Result::ok),
        _ = env.stop.wait_for(|s| *s) => None,
    };
    let Some(caught) = caught else {
        armed.heal();
        if !env.stopping() {
            let reason = format!("no worker sent a {:?} request in time", aim.class).to_lowercase();
            env.journal.record(
                &format!("no-holder-{fault}"),
                json!({"reason": reason}),
                None,
            );
        }
        return;
    };
    let ago = caught.at.elapsed().as_nanos() as u64;
    let began = env.journal.now_ns().saturating_sub(ago);
    let value = json!({
        "target": checker::history::worker_name(caught.worker as u64),
        "point": at,
        "command": caught.command,
        "class": caught.class,
        "on": if aim.reply { "reply" } else { "request" },
    });
    let mut value = value;
    match act {
        Act::HoldRequest(hold) => value["hold_ms"] = json!(hold.as_millis()),
        Act::HoldPast { hold, after } => {
            value["hold_ms"] = json!(hold.as_millis());
            value["then_behind"] = json!(after);
        }
        Act::HoldReply { hold, granted_only } => {
            value["hold_ms"] = json!(hold.as_millis());
            value["grants_only"] = json!(granted_only);
        }
        Act::DropReply => value["drops"] = json!("reply"),
    }
    let evidence = json!({"proxy": "caught", "command": caught.command, "node": caught.node});
    let start = verify::attach(value.clone(), Ok(evidence));
    env.journal
        .record_at(began, &fault.start_event(), start, Some(&caught.node));
    let done = tokio::select! {
        s = &mut armed.done => Some(s.ok()),
        _ = env.stop.wait_for(|s| *s) => None,
    };
    let sprung = match done {
        Some(s) => s,
        // The run ends: let go now.
        None => {
            armed.heal();
            (&mut armed.done).await.ok()
        }
    };
    let mut stop = value;
    // A held request's stop is stamped when it went on to the node.
    let mut at = env.journal.now_ns();
    match sprung {
        Some(s) => {
            if let Some(delivered) = s.delivered {
                at = at.saturating_sub(delivered.elapsed().as_nanos() as u64);
            }
            if let Some(reply) = &s.reply {
                stop["reply"] = json!(reply);
            }
            if let Some(accepted) = s.accepted {
                stop[ACCEPTED] = json!(accepted);
            }
            // The storage took a write that was held back: it acted now,
            // not when it left (the checker's unsafe-action reads this).
            if s.accepted == Some(true) && caught.class == Class::Write && !aim.reply {
                if let Some(v) = written_value(&caught.command) {
                    stop[DELIVERED_WRITE] = v;
                }
            }
            stop["held_ms"] = json!(s.held_ms);
            stop["bytes"] = json!(s.bytes);
            stop["reset"] = json!(s.reset);
            if s.cut_short {
                stop["cut_short"] = json!(true);
            }
            if let Some(behind) = s.behind_another {
                stop["behind_another"] = json!(behind);
            }
        }
        None => stop["lost"] = json!("the proxy ended before it let go"),
    }
    if !linger.is_zero() {
        env.sleep(linger).await;
        at = env.journal.now_ns();
    }
    env.journal
        .record_at(at, &fault.stop_event(), stop, Some(&caught.node));
}

/// The value a counter write carries: its last word (`SET <counter> 9`,
/// or the fenced script's `… w 9`), a number when it reads as one.
fn written_value(command: &str) -> Option<serde_json::Value> {
    let last = command.split_whitespace().last()?;
    Some(
        last.parse::<i64>()
            .map_or_else(|_| json!(last), |n| json!(n)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_point_holds_the_storage_write_on_its_way() {
        let a = aim(crate::At::default_point());
        assert_eq!(
            (a.role, a.class, a.reply),
            (Role::Storage, Class::Write, false)
        );
    }

    #[test]
    fn a_held_write_is_known_by_the_value_it_carries() {
        assert_eq!(written_value("SET lockstorm:counter 9"), Some(json!(9)));
        assert_eq!(
            written_value("EVALSHA 3f2a… 2 lockstorm:counter lockstorm:highest-fence 34 w 12"),
            Some(json!(12))
        );
    }

    #[test]
    fn acquiring_holds_the_grant_and_releasing_the_release() {
        assert_eq!(
            aim(Point::Acquiring),
            Aim {
                role: Role::Lock,
                class: Class::Acquire,
                reply: true
            }
        );
        assert_eq!(aim(Point::Releasing).class, Class::Release);
    }
}
