//! A worker's side of strike points. The nemesis arms a point on every
//! worker; the first to reach it announces itself on stdout ([`Parked`]) and
//! parks there until the nemesis releases it. A pause is sent while the
//! worker is parked, so it lands exactly at the point; a crash kills it there.

use checker::Point;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a parked worker waits for the nemesis before it goes on alone
/// (the nemesis releases it within milliseconds; this bounds a lost message).
const PARK_LIMIT: Duration = Duration::from_secs(10);

/// What a worker says on stdout when it has parked at an armed point (a
/// [`WorkerLine::Parked`](crate::worker::WorkerLine::Parked)). Not a history
/// event: the harness hands it to the nemesis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    pub point: Point,
    pub arm: u64,
    /// How the worker saw the point, where it cannot see it exactly (a
    /// client adapter's library is opaque to it): the strike records this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
    /// For `acquiring` in an adapter: whether its library had already
    /// decided (begun its reply) when it was frozen. A strike after the
    /// decision cannot show what a pause mid-acquisition does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<bool>,
    /// For `acquiring` in an adapter: the lock value whose appearance froze it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<String>,
}

#[derive(Default)]
struct State {
    /// The point armed on this worker, and the arm's id.
    armed: Option<(Point, u64)>,
    /// Every arm up to this id has been released.
    released: u64,
}

/// Shared by the control thread (which arms and releases) and the worker's
/// cycle (which reaches points).
#[derive(Clone, Default)]
pub struct Strikes(Arc<(Mutex<State>, Condvar)>);

impl Strikes {
    pub fn arm(&self, point: Point, arm: u64) {
        self.state().armed = Some((point, arm));
    }

    /// Ends arm `arm` here: disarms it, or lets the worker parked on it go on.
    pub fn release(&self, arm: u64) {
        let mut state = self.state();
        if state.armed.is_some_and(|(_, a)| a <= arm) {
            state.armed = None;
        }
        state.released = state.released.max(arm);
        self.0 .1.notify_all();
    }

    /// Releases everything, for good: the worker is stopping.
    pub fn release_all(&self) {
        self.release(u64::MAX);
    }

    /// Whether `point` is armed now (a client that must watch for a point
    /// only watches when it is).
    pub fn armed(&self, point: Point) -> bool {
        self.state().armed.is_some_and(|(p, _)| p == point)
    }

    /// The worker is at `point`: if it is armed here, announce (with the
    /// arm's id) and park until released. Returns whether it parked.
    pub fn at(&self, point: Point, announce: impl FnOnce(Parked)) -> bool {
        let arm = {
            let mut state = self.state();
            match state.armed {
                Some((armed, arm)) if armed == point => {
                    state.armed = None;
                    arm
                }
                _ => return false,
            }
        };
        announce(Parked {
            point,
            arm,
            how: None,
            decided: None,
            seen: None,
        });
        let state = self.state();
        let (_state, _timeout) = self
            .0
             .1
            .wait_timeout_while(state, PARK_LIMIT, |s| s.released < arm)
            .unwrap_or_else(|e| e.into_inner());
        true
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0 .0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a lock client marks a point inside its own multi-step operations
/// (between `SETNX` and `PEXPIRE`, between the first and last node of a
/// Redlock round): the worker hands every client one.
#[derive(Clone, Default)]
pub struct Hook {
    strikes: Strikes,
    announce: Option<Arc<dyn Fn(Parked) + Send + Sync>>,
}

impl Hook {
    /// Parks at armed points and announces each through `announce`.
    pub fn new(strikes: Strikes, announce: impl Fn(Parked) + Send + Sync + 'static) -> Self {
        Hook {
            strikes,
            announce: Some(Arc::new(announce)),
        }
    }

    /// The client is at `point`: park there if it is armed.
    pub fn at(&self, point: Point) {
        if let Some(announce) = &self.announce {
            self.strikes.at(point, |parked| announce(parked));
        }
    }

    /// As [`Hook::at`], saying how the point was seen, whether the library
    /// had decided by then, and the lock value seen, if any.
    pub fn at_seen(&self, point: Point, how: String, decided: bool, seen: Option<String>) {
        let Some(announce) = &self.announce else {
            return;
        };
        self.strikes.at(point, |parked| {
            announce(Parked {
                how: Some(how),
                decided: Some(decided),
                seen,
                ..parked
            })
        });
    }

    pub fn armed(&self, point: Point) -> bool {
        self.announce.is_some() && self.strikes.armed(point)
    }
}

/// A hook that never parks, for clients used outside a worker.
pub fn no_hook() -> Hook {
    Hook::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn an_armed_point_parks_once_until_released_and_others_pass() {
        let strikes = Strikes::default();
        assert!(!strikes.at(Point::Read, |_| panic!("not armed")));
        strikes.arm(Point::Checked, 1);
        assert!(!strikes.at(Point::Read, |_| panic!("armed elsewhere")));
        let parked = Arc::new(AtomicBool::new(false));
        let worker = {
            let (strikes, parked) = (strikes.clone(), parked.clone());
            std::thread::spawn(move || {
                strikes.at(Point::Checked, |p| {
                    assert_eq!(
                        p,
                        Parked {
                            point: Point::Checked,
                            arm: 1,
                            how: None,
                            decided: None,
                            seen: None,
                        }
                    );
                    parked.store(true, Ordering::SeqCst);
                })
            })
        };
        while !parked.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert!(!worker.is_finished(), "went on before its release");
        strikes.release(1);
        assert!(worker.join().unwrap(), "it parked");
        assert!(!strikes.at(Point::Checked, |_| panic!("an arm strikes once")));
    }

    #[test]
    fn a_release_disarms_a_worker_that_has_not_reached_the_point() {
        let strikes = Strikes::default();
        strikes.arm(Point::Acquired, 4);
        strikes.release(4);
        assert!(!strikes.at(Point::Acquired, |_| panic!("disarmed")));
        strikes.arm(Point::Acquired, 5);
        strikes.release_all();
        assert!(!strikes.at(Point::Acquired, |_| panic!("stopping")));
    }
}
