//! Strike points: where in a client's cycle a `pause` or `crash` lands. They
//! are part of the history's vocabulary: a fault event that struck a client
//! carries `"at": <point>` and `"process": <id>` (`history::fault::{AT,
//! PROCESS}`), and that client's own events around the fault show whether
//! it landed there ([`Placement`]).

use crate::history::fault::{AT, PROCESS};
use crate::history::{f, Event, OpType, Process};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use strum::VariantArray;

/// Where a strike lands. Its name is the variant's in kebab-case, alike for
/// [`Point::name`], `Display`, `FromStr` and serde.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown)]
pub enum Point {
    /// The acquire is in flight: its first command has reached Redis (a
    /// multi-step client marks its most harmful inner step).
    Acquiring,
    /// Right after the grant, before the storage read.
    Acquired,
    /// After the storage read, before the holder's lease check.
    Read,
    /// After the holder's last lease check, right before its write: the gap
    /// that no check closes.
    Checked,
    /// Inside the release.
    Releasing,
}

impl Point {
    /// Every point, in the order of a client's cycle: the derived
    /// `VARIANTS`, as an array.
    pub const ALL: [Point; Point::VARIANTS.len()] = *Point::VARIANTS.first_chunk().unwrap();

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Where a client struck here is, in words (`explain` tells a strike so).
    pub fn place(self) -> &'static str {
        match self {
            Point::Acquiring => "inside its acquire",
            Point::Acquired => "right after its grant",
            Point::Read => "right after its read",
            Point::Checked => "right before its write, after its last check",
            Point::Releasing => "inside its release",
        }
    }

    /// The client's last event before a strike here, and the op whose next
    /// event follows it (pure: the history's side of the contract).
    pub fn bounds(self) -> (Bound, Bound) {
        let done = Kinds::Completion;
        match self {
            Point::Acquiring => ((Kinds::Invoke, f::ACQUIRE), (done, f::ACQUIRE)),
            Point::Acquired => ((Kinds::Ok, f::ACQUIRE), (Kinds::Invoke, f::READ)),
            Point::Read => ((Kinds::Ok, f::READ), (Kinds::Invoke, f::WRITE)),
            // Parked after its lease check, before its write leaves (the
            // write's invoke is stamped when it leaves): the same events
            // bound it as `read`, the work and the check happening between.
            Point::Checked => ((Kinds::Ok, f::READ), (Kinds::Invoke, f::WRITE)),
            Point::Releasing => ((Kinds::Invoke, f::RELEASE), (done, f::RELEASE)),
        }
    }
}

/// Why `name` is no point, listing those there are (`FromStr`'s error).
fn unknown(name: &str) -> String {
    let names = Point::ALL.map(Point::name).join(", ");
    format!("unknown strike point '{name}': choose one of {names}")
}

/// Which event types a bound accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kinds {
    Invoke,
    Ok,
    /// `ok`, `fail` or `info`.
    Completion,
}

impl Kinds {
    fn matches(self, kind: OpType) -> bool {
        match self {
            Kinds::Invoke => kind == OpType::Invoke,
            Kinds::Ok => kind == OpType::Ok,
            Kinds::Completion => kind != OpType::Invoke,
        }
    }
}

/// An event type and op name, e.g. (`invoke`, `write`).
pub type Bound = (Kinds, &'static str);

fn show(e: Option<&(OpType, String)>) -> String {
    match e {
        Some((kind, op)) => format!("{op} {}", format!("{kind:?}").to_lowercase()),
        None => "nothing".into(),
    }
}

/// Checks, fed in time order, that every strike landed at its point: the
/// struck client's last event before it is the point's first bound, and its
/// next event (if it has one) the second.
#[derive(Default)]
pub struct Placement {
    /// Client process → its latest event (type, op).
    last: FxHashMap<u64, (OpType, String)>,
    /// Client process → (fault event index and name, point) awaiting the next event.
    pending: FxHashMap<u64, (u64, String, Point)>,
    /// (fault event index, fault event name, why it is not where it says).
    pub misplaced: Vec<(u64, String, String)>,
}

impl Placement {
    pub fn on_event(&mut self, e: &Event) {
        if let Process::Client(p) = e.process {
            if let Some((index, name, point)) = self.pending.remove(&p) {
                let (_, (kinds, op)) = point.bounds();
                if !(kinds.matches(e.kind) && e.f == op) {
                    let why = format!(
                        "struck at {point}, but process {p} went on with {} (event {}), not {op}",
                        show(Some(&(e.kind, e.f.clone()))),
                        e.index
                    );
                    self.misplaced.push((index, name, why));
                }
            }
            // Every client event passes here: reuse the op's string.
            match self.last.get_mut(&p) {
                Some((kind, f)) => {
                    *kind = e.kind;
                    f.clone_from(&e.f);
                }
                None => {
                    self.last.insert(p, (e.kind, e.f.clone()));
                }
            }
            return;
        }
        // The start of a strike is where it landed; its stop repeats the point.
        if !e.is_nemesis() || crate::history::fault::started(&e.f).is_none() {
            return;
        }
        let point = e.value.get(AT).and_then(|v| v.as_str());
        let process = e.value.get(PROCESS).and_then(|v| v.as_u64());
        let (Some(point), Some(p)) = (point, process) else {
            return;
        };
        let Ok(point) = point.parse::<Point>() else {
            let why = format!("names an unknown strike point '{point}'");
            self.misplaced.push((e.index, e.f.clone(), why));
            return;
        };
        let ((kinds, op), _) = point.bounds();
        let last = self.last.get(&p);
        match last {
            Some((kind, f)) if kinds.matches(*kind) && f == op => {
                self.pending.insert(p, (e.index, e.f.clone(), point));
            }
            _ => {
                let why = format!(
                    "struck at {point}, but process {p}'s last event before it was {}, not {op}",
                    show(last)
                );
                self.misplaced.push((e.index, e.f.clone(), why));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;
    use serde_json::json;

    fn misplaced(h: &Hist) -> Vec<String> {
        let mut p = Placement::default();
        for e in h.build().in_time_order() {
            p.on_event(e);
        }
        p.misplaced.into_iter().map(|(_, _, why)| why).collect()
    }

    #[test]
    fn a_pause_between_the_lease_check_and_the_write_is_at_checked() {
        // The write's invoke is stamped when it leaves: after the pause.
        let mut h = Hist::new();
        h.ok(1, f::READ).value(3);
        h.nemesis("start-pause")
            .value(json!({"at": "checked", "process": 1}));
        h.nemesis("stop-pause");
        h.invoke(1, f::WRITE).value(4);
        h.ok(1, f::WRITE).value(4);
        assert!(misplaced(&h).is_empty(), "{:?}", misplaced(&h));
    }

    #[test]
    fn a_strike_that_is_not_where_it_says_is_named() {
        // A write already sent when the strike came was not struck at
        // `checked`, which parks the worker before the write leaves.
        let mut h = Hist::new();
        h.ok(1, f::READ).value(3);
        h.invoke(1, f::WRITE).value(4);
        h.nemesis("start-pause")
            .value(json!({"at": "checked", "process": 1}));
        let why = misplaced(&h);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].contains("last event before it was write invoke"),
            "{}",
            why[0]
        );

        let mut h = Hist::new();
        h.ok(2, f::ACQUIRE);
        h.nemesis("start-crash")
            .value(json!({"at": "acquired", "process": 2}));
        h.invoke(2, f::WRITE);
        let why = misplaced(&h);
        assert!(why[0].contains("went on with write invoke"), "{why:?}");
    }

    #[test]
    fn a_struck_client_that_never_goes_on_is_in_place() {
        let mut h = Hist::new();
        h.invoke(1, f::ACQUIRE);
        h.nemesis("start-crash")
            .value(json!({"at": "acquiring", "process": 1}));
        assert!(misplaced(&h).is_empty());
    }

    #[test]
    fn every_point_reads_back_from_its_name() {
        for p in Point::ALL {
            assert_eq!(p.name().parse::<Point>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
            assert_eq!(serde_json::to_value(p).unwrap(), json!(p.name()));
        }
        assert_eq!(
            "later".parse::<Point>().unwrap_err(),
            "unknown strike point 'later': choose one of acquiring, acquired, read, checked, releasing"
        );
    }
}
