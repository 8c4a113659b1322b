use super::shared::{faults, ops, sample, FAULT_COLOR};
use super::timeline::{CRASH_MARK, DEADLOCK_COLOR, HOLD_COLOR, OPEN_HOLD_COLOR, OVERLAP_COLOR};
use super::*;
use checker::anomaly::LOCK_OVERLAP;
use checker::{Anomaly, OpType, Promise, Validity};
use plotters::style::RGBColor;
use std::collections::BTreeMap;

const MS: u64 = 1_000_000;

/// Two workers. Worker 0 is paused past its lease while worker 1 takes the
/// lock; on waking, worker 0's write is accepted (an unsafe action). Worker
/// 1 later times out on an acquire and carries on as process 3.
fn paused_holder() -> History {
    let lines = [
        (0, 1, "0", "invoke", "acquire", r#","token":"a""#),
        (1, 2, "0", "ok", "acquire", r#","token":"a","fence":1"#),
        (2, 3, "0", "invoke", "read", r#","fence":1"#),
        (3, 4, "0", "ok", "read", r#","value":0,"fence":1"#),
        (4, 5, r#""nemesis""#, "info", "start-pause", ""),
        (5, 1000, "1", "invoke", "acquire", r#","token":"b""#),
        (6, 1001, "1", "ok", "acquire", r#","token":"b","fence":2"#),
        (7, 1002, "1", "invoke", "write", r#","value":1,"fence":2"#),
        (8, 1003, "1", "ok", "write", r#","value":1,"fence":2"#),
        (9, 1100, "1", "invoke", "release", r#","token":"b""#),
        (10, 1101, "1", "ok", "release", r#","token":"b""#),
        (11, 1500, r#""nemesis""#, "info", "stop-pause", ""),
        (12, 1600, "0", "invoke", "write", r#","value":1,"fence":1"#),
        (13, 1601, "0", "ok", "write", r#","value":1,"fence":1"#),
        (14, 1700, "0", "invoke", "release", r#","token":"a""#),
        (
            15,
            1701,
            "0",
            "fail",
            "release",
            r#","token":"a","error":"not-held""#,
        ),
        (16, 1800, "1", "invoke", "acquire", r#","token":"c""#),
        (
            17,
            2300,
            "1",
            "info",
            "acquire",
            r#","token":"c","error":"timeout""#,
        ),
        (18, 2400, "3", "invoke", "acquire", r#","token":"d""#),
        (19, 2401, "3", "ok", "acquire", r#","token":"d","fence":3"#),
        (20, 2900, "3", "invoke", "release", r#","token":"d""#),
        (21, 2901, "3", "ok", "release", r#","token":"d""#),
    ];
    let text: String = lines
        .iter()
        .map(|(i, t, p, kind, f, rest)| {
            let time = t * MS;
            format!(
                r#"{{"index":{i},"time":{time},"process":{p},"type":"{kind}","f":"{f}"{rest}}}"#
            ) + "\n"
        })
        .collect();
    History::from_jsonl(text.as_bytes()).unwrap()
}

fn no_anomalies() -> Results {
    Results {
        valid: Validity::True,
        promise: Promise::MutualExclusion,
        anomalies: BTreeMap::new(),
        checkers: BTreeMap::new(),
        stats: Default::default(),
        notes: Vec::new(),
        incidents: Vec::new(),
    }
}

/// `(attributes, content)` of every element named `tag`.
fn elements<'a>(svg: &'a str, tag: &str) -> Vec<(&'a str, &'a str)> {
    let open = format!("<{tag} ");
    svg.split(&open)
        .skip(1)
        .map(|rest| {
            let attrs_end = rest.find('>').unwrap();
            let attrs = &rest[..attrs_end];
            let content = match attrs.ends_with('/') {
                true => "",
                false => &rest[attrs_end + 1..rest.find('<').unwrap()],
            };
            (attrs, content.trim())
        })
        .collect()
}

fn attr<'a>(attrs: &'a str, name: &str) -> &'a str {
    let start = attrs.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
    &attrs[start..start + attrs[start..].find('"').unwrap()]
}

fn fill(c: RGBColor) -> String {
    format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)
}

/// Rectangles filled with any of `colors`, but for the legend's swatches
/// (the only ones 14 px wide).
fn bars(svg: &str, colors: &[RGBColor]) -> usize {
    let fills: Vec<String> = colors.iter().map(|&c| fill(c)).collect();
    elements(svg, "rect")
        .iter()
        .filter(|(a, _)| fills.iter().any(|f| a.contains(f.as_str())))
        .filter(|(a, _)| attr(a, "width") != "14")
        .count()
}

fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is not a PNG",
        path.display()
    );
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// A holder that crashed holds nothing after: its bar ends at the crash and
/// is not drawn as held to the end of the run.
#[test]
fn a_crashed_holder_bar_ends_at_the_crash() {
    let text = [
        r#"{"index":0,"time":1000,"process":0,"type":"invoke","f":"acquire","token":"a"}"#,
        r#"{"index":1,"time":2000,"process":0,"type":"ok","f":"acquire","token":"a"}"#,
        r#"{"index":2,"time":500000000,"process":"harness","type":"info","f":"crash","value":{"process":0},"token":"a"}"#,
        r#"{"index":3,"time":900000000,"process":1,"type":"invoke","f":"read"}"#,
    ]
    .join("\n");
    let history = History::from_jsonl(text.as_bytes()).unwrap();
    let results = checker::check(&history, Promise::MutualExclusion);
    let svg = timeline_svg(&history, &results, 2).unwrap();
    assert_eq!(
        bars(&svg, &[OPEN_HOLD_COLOR]),
        0,
        "drawn as held at run end"
    );
    assert_eq!(bars(&svg, &[HOLD_COLOR]), 1);
}

/// A worker dies mid-acquire and the lock stays stuck: a † on the dead
/// worker's row, and a `deadlock` band over the stuck interval.
#[test]
fn a_crash_is_a_mark_on_its_row_and_a_deadlock_a_band() {
    let s = 1_000_000_000u64;
    let mut lines = vec![
        format!(
            r#"{{"index":0,"time":{},"process":1,"type":"invoke","f":"acquire"}}"#,
            s
        ),
        format!(
            r#"{{"index":1,"time":{},"process":1,"type":"info","f":"acquire","error":"crashed"}}"#,
            s + 1
        ),
        format!(
            r#"{{"index":2,"time":{},"process":"harness","type":"info","f":"crash","value":{{"process":1}}}}"#,
            s + 2
        ),
    ];
    for (i, t) in (3..).step_by(2).zip((1..5).map(|k| k * 4 * s)) {
        lines.push(format!(
            r#"{{"index":{i},"time":{t},"process":0,"type":"invoke","f":"acquire"}}"#
        ));
        lines.push(format!(
            r#"{{"index":{},"time":{},"process":0,"type":"fail","f":"acquire"}}"#,
            i + 1,
            t + 4 * s
        ));
    }
    let history = History::from_jsonl(lines.join("\n").as_bytes()).unwrap();
    let settings = checker::Settings::new(Promise::MutualExclusion)
        .deadlock_after(std::time::Duration::from_secs(7));
    let results = checker::check(&history, settings);
    assert_eq!(results.deadlocks(), [(s, 20 * s)], "{results:#?}");
    let svg = timeline_svg(&history, &results, 2).unwrap();
    let texts = elements(&svg, "text");
    let row_y = |label: &str| {
        let (a, _) = texts.iter().find(|(_, c)| *c == label).unwrap();
        attr(a, "y").parse::<i32>().unwrap()
    };
    let daggers: Vec<_> = texts.iter().filter(|(_, c)| *c == CRASH_MARK).collect();
    assert_eq!(daggers.len(), 1, "{daggers:?}");
    assert_eq!(
        attr(daggers[0].0, "y").parse::<i32>().unwrap(),
        row_y("worker 1")
    );
    assert_eq!(bars(&svg, &[DEADLOCK_COLOR]), 1);
    assert!(texts.iter().any(|(_, c)| *c == "deadlock"));
    // Without the deadlock checked there is no band, but the crash stays.
    let results = checker::check(&history, Promise::MutualExclusion);
    let svg = timeline_svg(&history, &results, 2).unwrap();
    assert_eq!(bars(&svg, &[DEADLOCK_COLOR]), 0);
    assert!(svg.contains(CRASH_MARK));
}

#[test]
fn the_timeline_shows_holds_fences_the_unsafe_write_and_the_fault() {
    let history = paused_holder();
    let results = checker::check(&history, Promise::MutualExclusion);
    assert_eq!(
        results.anomalies["unsafe-action"].examples,
        vec![vec![13, 6]]
    );
    let svg = timeline_svg(&history, &results, 2).unwrap();

    // Holds a and b overlap; d (worker 1 as process 3) is an ordinary hold.
    assert_eq!(bars(&svg, &[OVERLAP_COLOR]), 2);
    assert_eq!(bars(&svg, &[HOLD_COLOR, OPEN_HOLD_COLOR]), 1);
    let texts = elements(&svg, "text");
    let mut fences: Vec<&str> = texts
        .iter()
        .filter(|(a, _)| a.contains(&fill(WHITE_TEXT)))
        .map(|(_, c)| *c)
        .collect();
    fences.sort_unstable();
    // On the holds 1, 2 and 3; on the storage's row the 1 and 2 it accepted
    // (worker 0's stale write with 1 came after 2, so 2 stays the highest).
    assert_eq!(fences, ["1", "1", "2", "2", "3"]);
    assert!(texts.iter().any(|(_, c)| *c == "storage fence"));

    // Process 3 is worker 1: there is no row of its own.
    let row_y = |label: &str| {
        let (a, _) = texts.iter().find(|(_, c)| *c == label).unwrap();
        attr(a, "y").parse::<i32>().unwrap()
    };
    assert!(!svg.contains("worker 3"));
    // The ✗ is in the unsafe row, named by its worker and its write's fence.
    let crosses: Vec<_> = texts.iter().filter(|(_, c)| *c == "✗").collect();
    assert_eq!(crosses.len(), 1);
    let y = attr(crosses[0].0, "y").parse::<i32>().unwrap();
    assert!(
        (y - row_y("unsafe")).abs() < 15,
        "{y} not in the unsafe row"
    );
    assert!(texts.iter().any(|(_, c)| *c == "w0 f1"), "{texts:?}");

    let band = fill(FAULT_COLOR);
    assert!(elements(&svg, "rect")
        .iter()
        .any(|(a, _)| a.contains(&band)));
    assert!(texts.iter().any(|(_, c)| *c == "pause"));
    assert!(!svg.contains("merged"), "a small run draws every hold");
}

const WHITE_TEXT: RGBColor = RGBColor(255, 255, 255);

#[test]
fn the_storage_row_follows_the_highest_accepted_fence() {
    let spans = scene::accepted_fences(&paused_holder());
    let got: Vec<(u64, u64, u64)> = spans
        .iter()
        .map(|s| (s.start / MS, s.end / MS, s.fence))
        .collect();
    assert_eq!(got, [(4, 1003, 1), (1003, 2901, 2)]);
    // An unfenced run has no such row.
    let svg = timeline_svg(&unfenced(), &no_anomalies(), 2).unwrap();
    assert!(!svg.contains("storage fence"));
}

/// `paused_holder` without its fences.
fn unfenced() -> History {
    let mut h = paused_holder();
    for e in &mut h.events {
        e.fence = None;
    }
    h
}

#[test]
fn a_hold_past_its_lease_goes_thin_there() {
    let history = paused_holder();
    let results = checker::check(&history, Promise::MutualExclusion);
    let thick_and_thin = |lease_ms: Option<u64>| {
        let setup = Setup {
            workers: 2,
            lease: lease_ms.map(std::time::Duration::from_millis),
        };
        let svg = timeline_svg(&history, &results, setup).unwrap();
        let heights: Vec<f64> = elements(&svg, "rect")
            .iter()
            .filter(|(a, _)| a.contains(&fill(OVERLAP_COLOR)) && attr(a, "width") != "14")
            .map(|(a, _)| attr(a, "height").parse().unwrap())
            .collect();
        heights
    };
    // Without a lease: hold a (0.002–1.7 s) and b (1.001–1.1 s), full height.
    let plain = thick_and_thin(None);
    assert_eq!(plain.len(), 2);
    // A 1 s lease: a outlived its key from 1.002 s on, b did not.
    let leased = thick_and_thin(Some(1000));
    assert_eq!(leased.len(), 3, "{leased:?}");
    let thin = leased.iter().filter(|&&h| h < plain[0] / 2.0).count();
    assert_eq!(thin, 1, "{leased:?}");
}

#[test]
fn the_legend_lists_only_what_the_run_has() {
    let history = paused_holder();
    let results = checker::check(&history, Promise::MutualExclusion);
    let legend = |lease_ms: Option<u64>| -> Vec<String> {
        let setup = Setup {
            workers: 2,
            lease: lease_ms.map(std::time::Duration::from_millis),
        };
        let svg = timeline_svg(&history, &results, setup).unwrap();
        elements(&svg, "text")
            .into_iter()
            .map(|(_, c)| c.to_string())
            .collect()
    };
    let found = legend(None);
    for present in ["hold (acquire ok → release)", "in a lock-overlap", "fault"] {
        assert!(
            found.iter().any(|t| t == present),
            "no {present} in {found:?}"
        );
    }
    let absent = [
        "deadlock: acquires tried, none granted, no fault",
        "† a worker died (crash)",
        "thin: held past its lease (TTL)",
        "key on a node, by owner:",
    ];
    for absent in absent {
        assert!(!found.iter().any(|t| t == absent), "{absent} in {found:?}");
    }
    // With a lease the first hold outlived, the thin bar is drawn and named.
    let leased = legend(Some(1000));
    assert!(
        leased
            .iter()
            .any(|t| t == "thin: held past its lease (TTL)"),
        "{leased:?}"
    );
}

#[test]
fn without_a_worker_count_each_process_gets_a_row() {
    let history = paused_holder();
    let svg = timeline_svg(&history, &no_anomalies(), 0).unwrap();
    let texts = elements(&svg, "text");
    for row in ["process 0", "process 1", "process 3"] {
        assert!(texts.iter().any(|(_, c)| *c == row), "{row}");
    }
}

#[test]
fn render_writes_the_three_pictures() {
    let dir = tempfile::tempdir().unwrap();
    let history = paused_holder();
    let results = checker::check(&history, Promise::MutualExclusion);
    render(dir.path(), &history, &results, 2, "single × pause (seed 1)").unwrap();
    let svg = std::fs::read_to_string(dir.path().join(TIMELINE)).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(png_size(&dir.path().join(LATENCY)), (1200, 600));
    assert_eq!(png_size(&dir.path().join(RATE)), (1200, 600));
    // Each example told, each with a view of its slice of the timeline.
    let page = std::fs::read_to_string(dir.path().join(EXPLAIN)).unwrap();
    let examples: usize = results.anomalies.values().map(|a| a.examples.len()).sum();
    assert_eq!(page.matches("<section id=").count(), examples, "{page}");
    assert!(page.contains("id=\"lock-overlap-1\""), "{page}");
    // Headed by its run and verdict, with contents, and each slice an SVG
    // view of the timeline (a `#svgView` link does not zoom in Chromium).
    assert!(
        page.contains("<h1>single × pause (seed 1): INVALID (promise: mutual-exclusion)</h1>"),
        "{page}"
    );
    assert!(
        page.contains("<nav><h2>Contents</h2>") && page.contains("href=\"#lock-overlap-1\""),
        "{page}"
    );
    // Each slice: the row names, then its stretch of time.
    assert_eq!(
        page.matches("<image href=\"timeline.svg\"").count(),
        2 * examples,
        "{page}"
    );
    assert!(!page.contains("svgView"), "{page}");
    // A run that found nothing has nothing to tell: the old page goes.
    let clean = no_anomalies();
    render(dir.path(), &history, &clean, 2, "single × pause (seed 1)").unwrap();
    assert!(!dir.path().join(EXPLAIN).exists());
}

#[test]
fn a_slice_of_the_timeline_covers_its_story_and_stays_in_the_picture() {
    use super::timeline::slice;
    // 10 s drawn over 1272 px from x = 114: 2–4 s is x 368–622, padded.
    let (x, w) = slice(2.0, 4.0, 10.0);
    assert!(x < 368.0 && x + w > 622.0, "{x} {w}");
    let (x, w) = slice(0.0, 10.0, 10.0);
    assert_eq!((x, x + w), (114.0, 1386.0));
}

#[test]
fn faults_pair_starts_with_stops_and_open_ones_last_to_the_end() {
    let mut history = paused_holder();
    let mut e = history.events[4].clone();
    e.f = "start-kill".into();
    e.time = 2500 * MS;
    history.events.push(e);
    let found = faults(&history);
    assert_eq!(found.len(), 2);
    assert_eq!(
        (found[0].name.as_str(), found[0].start, found[0].end),
        ("pause", 5 * MS, 1500 * MS)
    );
    assert_eq!((found[1].name.as_str(), found[1].end), ("kill", 2901 * MS));
}

#[test]
fn sampling_keeps_exactly_the_cap_spread_evenly() {
    let (n, k) = (19_998, 1_998);
    let kept = sample((0..n).collect::<Vec<usize>>(), k);
    assert_eq!(kept.len(), k);
    for (w, &i) in kept.iter().enumerate() {
        assert!((w * n / k..(w + 1) * n / k).contains(&i), "window {w}: {i}");
    }
    // A stride of 10 must not always land on the same op of a 5-op cycle.
    let phases: std::collections::HashSet<usize> = kept.iter().map(|i| i % 5).collect();
    assert_eq!(phases.len(), 5);
    assert_eq!(sample(vec![1, 2], 5), [1, 2]);
    assert!(sample(vec![1, 2], 0).is_empty());
}

#[test]
fn latency_counts_each_completed_op_once() {
    let ops = ops(&paused_holder());
    assert_eq!(ops.len(), 10);
    let timed_out = ops.iter().find(|o| o.outcome == OpType::Info).unwrap();
    assert_eq!(timed_out.completed - timed_out.invoked, 500 * MS);
}

#[test]
fn an_empty_history_still_renders() {
    let dir = tempfile::tempdir().unwrap();
    let history = History::default();
    let results = checker::check(&history, Promise::MutualExclusion);
    render(dir.path(), &history, &results, 3, "t").unwrap();
    let svg = std::fs::read_to_string(dir.path().join(TIMELINE)).unwrap();
    assert!(elements(&svg, "text").iter().any(|(_, c)| *c == "worker 2"));
    assert_eq!(png_size(&dir.path().join(LATENCY)), (1200, 600));
    assert_eq!(png_size(&dir.path().join(RATE)), (1200, 600));
}

#[test]
fn a_large_run_is_capped_but_keeps_the_holds_in_anomalies() {
    let history = checker::generate::valid_history(7, 5, 20_000, 5);
    let holds = checker::holds(&history);
    assert!(holds.len() > 10_000);
    // Pretend one hold deep in the run overlapped another.
    let (a, b) = (&holds[12_345], &holds[12_346]);
    let mut results = no_anomalies();
    results.anomalies.insert(
        LOCK_OVERLAP.into(),
        Anomaly {
            count: 1,
            examples: vec![vec![a.start_index, b.start_index]],
            first_time: Some(b.start),
            ..Anomaly::default()
        },
    );
    let svg = timeline_svg(&history, &results, 5).unwrap();
    // The holds it names are drawn one by one (below: all but them are
    // merged); the overlap colour follows the holds themselves, and these
    // two do not really overlap.
    assert_eq!(bars(&svg, &[OVERLAP_COLOR]), 0);
    let drawn = bars(&svg, &[HOLD_COLOR, OPEN_HOLD_COLOR, OVERLAP_COLOR]);
    assert!((5..=2_000).contains(&drawn), "{drawn} bars");
    assert!(svg.contains(&format!("the other {} merged into", holds.len() - 2)));
    assert!(svg.len() < 600_000, "{} bytes", svg.len());

    let dir = tempfile::tempdir().unwrap();
    latency(&dir.path().join(LATENCY), &history).unwrap();
    rate(&dir.path().join(RATE), &history).unwrap();
    assert_eq!(png_size(&dir.path().join(RATE)), (1200, 600));
}

/// 25 pauses, each letting a second holder in: 25 overlapping pairs, more
/// than the checker keeps as examples. Every pair is coloured, the last
/// ones too, found from the holds themselves.
#[test]
fn every_overlap_is_coloured_not_only_the_checkers_examples() {
    let mut lines = Vec::new();
    let mut index = 0;
    let mut push = |t: u64, p: u64, kind: &str, f: &str, token: &str| {
        lines.push(format!(
            r#"{{"index":{index},"time":{},"process":{p},"type":"{kind}","f":"{f}","token":"{token}"}}"#,
            t * MS
        ));
        index += 1;
    };
    for k in 0..25u64 {
        let t = k * 100;
        let (a, b) = (format!("a{k}"), format!("b{k}"));
        push(t, 0, "invoke", "acquire", &a);
        push(t + 1, 0, "ok", "acquire", &a);
        push(t + 10, 1, "invoke", "acquire", &b);
        push(t + 11, 1, "ok", "acquire", &b); // while 0 still holds a{k}
        push(t + 20, 0, "invoke", "release", &a);
        push(t + 21, 0, "ok", "release", &a);
        push(t + 30, 1, "invoke", "release", &b);
        push(t + 31, 1, "ok", "release", &b);
    }
    let history = History::from_jsonl((lines.join("\n") + "\n").as_bytes()).unwrap();
    let found = checker::check(&history, Promise::MutualExclusion);
    let overlap = &found.anomalies[LOCK_OVERLAP];
    assert_eq!(overlap.count, 25);
    assert!(
        overlap.examples.len() < 25,
        "the checker keeps only the first few"
    );
    let scene = scene::Scene::new(&history, &found, 2, 800);
    assert_eq!(scene.overlapping.len(), 50, "both holds of every pair");
    let last_pair = history
        .events
        .iter()
        .rev()
        .find(|e| e.kind == OpType::Ok && e.f == "acquire")
        .unwrap();
    assert!(scene.overlapping.contains(&last_pair.index));
}

/// `paused_holder` as the observer saw it on node `n1`: a's key set, then
/// expired while worker 0 was frozen; b's set and deleted by b's release;
/// d's set and left to the end.
fn observed() -> History {
    let mut h = paused_holder();
    let key = |ms: u64, f: &str, token: &str| {
        checker::Event::new(
            ms * MS,
            checker::Process::observer(),
            checker::OpType::Info,
            f,
        )
        .with_token(token)
        .with_node("n1")
    };
    h.events.extend([
        key(2, checker::history::key::SET, "a"),
        key(1000, checker::history::key::EXPIRED, "a"),
        key(1001, checker::history::key::SET, "b"),
        key(1050, checker::history::key::RENEWED, "b"),
        key(1101, checker::history::key::DELETED, "b"),
        key(2401, checker::history::key::SET, "d"),
    ]);
    for (i, e) in h.events.iter_mut().enumerate() {
        e.index = i as u64;
    }
    h
}

#[test]
fn the_key_rows_show_who_really_held_the_key_and_the_unsafe_row_every_loss() {
    let history = observed();
    let results = checker::check(&history, Promise::MutualExclusion);
    let scene = scene::Scene::new(&history, &results, 2, 1000);
    assert_eq!(scene.key_nodes, ["n1"]);
    let keys: Vec<(u64, u64, Option<usize>)> = scene
        .keys
        .iter()
        .map(|k| (k.start / MS, k.end / MS, k.owner))
        .collect();
    // Process 3 is worker 1: d's key is worker 1's.
    assert_eq!(
        keys,
        [
            (2, 1000, Some(0)),
            (1001, 1101, Some(1)),
            (2401, 2901, Some(1))
        ]
    );
    // Worker 0's stale write of 1 repeats worker 1's: a lost update, marked
    // where it landed, with its fence.
    let lost: Vec<(u64, Option<usize>, Option<u64>)> = scene
        .lost_updates
        .iter()
        .map(|m| (m.time / MS, m.worker, m.fence))
        .collect();
    assert!(lost.contains(&(1601, Some(0), Some(1))), "{lost:?}");
    let svg = timeline_svg(&history, &results, 2).unwrap();
    let texts = elements(&svg, "text");
    assert!(texts.iter().any(|(_, c)| *c == "key on n1"), "{texts:?}");
    assert!(texts.iter().any(|(_, c)| *c == "●"), "no lost-update mark");
    // Without the observer there is no key row.
    let plain = timeline_svg(&paused_holder(), &results, 2).unwrap();
    assert!(!plain.contains("key on n1"));
}
