//! Runs the real `lockstorm` binary against real `redis-server` processes.

#![allow(dead_code)]

use checker::{Results, Validity};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn lockstorm(args: &[&str]) -> Run {
    lockstorm_with(args, &[])
}

pub fn lockstorm_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    lockstorm_at(None, args, env)
}

/// `lockstorm` run from `cwd`: a client adapter runs where the harness was
/// started, so a test that starts one there finds any it leaves behind.
pub fn lockstorm_at(cwd: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Run {
    // Commands that start Redis nodes and workers wait for a slot; their
    // help starts nothing.
    let starts_nodes = matches!(
        args.first(),
        Some(&"run" | &"matrix" | &"client-test" | &"shrink")
    ) && !args.iter().any(|a| *a == "--help" || *a == "-h");
    lockstorm_slotted(cwd, args, env, starts_nodes)
}

/// [`lockstorm_at`] for a command the test expects refused before it starts
/// any node (a setup that cannot reach a registry retries for seconds): it
/// waits for no slot, and holds none meanwhile.
pub fn lockstorm_refused_at(cwd: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Run {
    lockstorm_slotted(cwd, args, env, false)
}

fn lockstorm_slotted(
    cwd: Option<&Path>,
    args: &[&str],
    env: &[(&str, &str)],
    starts_nodes: bool,
) -> Run {
    let _slot =
        starts_nodes.then(|| e2e_slot_for(long_run(args) || LONG_TEST.get(), heavy_run(args)));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockstorm"));
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    cmd.args(args);
    // The slot is one run's worth: a matrix runs one cell at a time here
    // unless a test asks for more (and so for more load) itself.
    if args.first() == Some(&"matrix") && !args.contains(&"--jobs") {
        cmd.args(["--jobs", "1"]);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("lockstorm runs");
    Run {
        code: status
            .code()
            .expect("lockstorm exits, not killed by a signal"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A run in its own results folder; fails the test if the harness crashed.
pub fn run(results: &Path, args: &[&str]) -> (Run, Results, PathBuf) {
    run_at(None, results, args)
}

/// [`run`], with the harness started in `cwd`.
pub fn run_at(cwd: Option<&Path>, results: &Path, args: &[&str]) -> (Run, Results, PathBuf) {
    run_with_env(cwd, results, args, &[])
}

/// [`run_at`], with variables set in the harness's environment.
pub fn run_with_env(
    cwd: Option<&Path>,
    results: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Run, Results, PathBuf) {
    let mut all = vec!["run", "--results", results.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = lockstorm_at(cwd, &all, env);
    assert!(
        [0, 1, 2].contains(&run.code),
        "lockstorm failed with {}:\n{}\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    let group = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a results group folder");
    let dir = group.join("latest").canonicalize().expect("a latest link");
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    let results: Results = serde_json::from_str(&text).expect("results.json parses");
    assert_no_process_left(results_root(&group));
    log_run_timeline(args, &run, &results, &dir);
    (run, results, dir)
}

/// With `LOCKSTORM_TEST_RUN_LOG` naming a file, each run appends its test,
/// its time limit, exit code and verdict, when each anomaly was first seen
/// and when each fault started (s into the run): how much shorter a test's
/// time limit could be, read off the suite rather than guessed.
fn log_run_timeline(args: &[&str], run: &Run, results: &Results, dir: &Path) {
    let Some(log) = std::env::var_os("LOCKSTORM_TEST_RUN_LOG") else {
        return;
    };
    let seconds = |ns: f64| format!("{:.1}", ns / 1e9);
    let limit = args.windows(2).find(|w| w[0] == "--time-limit");
    let firsts: Vec<String> = results
        .anomalies
        .iter()
        .filter(|(_, a)| a.count > 0)
        .map(|(k, a)| format!("{k}={}", seconds(a.first_time.unwrap_or(0) as f64)))
        .collect();
    let history = std::fs::read_to_string(dir.join("history.jsonl")).unwrap_or_default();
    let faults: Vec<String> = history
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["f"].as_str().is_some_and(|f| f.starts_with("start-")))
        .map(|e| {
            format!(
                "{}@{}",
                e["f"].as_str().unwrap(),
                seconds(e["time"].as_f64().unwrap_or(0.0))
            )
        })
        .collect();
    let line = format!(
        "{}\t{}\t{}\t{:?}\t{}\t{}\n",
        std::thread::current().name().unwrap_or("?"),
        limit.map_or("-", |w| w[1]),
        run.code,
        results.valid,
        firsts.join(","),
        faults.join(","),
    );
    let file = File::options().create(true).append(true).open(log);
    let _ = file.and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
}

fn results_root(group: &Path) -> &Path {
    group.parent().unwrap()
}

/// Processes still running (or stopped) inside `root`: nodes and workers all
/// work inside their run folder, so any process whose cwd is under it is a
/// leftover.
pub fn leftover_processes(root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            if cwd.starts_with(&root) {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                left.push(format!("{pid}: {}", stat.trim()));
            }
        }
    }
    left
}

pub fn assert_no_process_left(root: &Path) {
    let left = leftover_processes(root);
    assert!(
        left.is_empty(),
        "processes left behind:\n{}",
        left.join("\n")
    );
}

pub fn count(results: &Results, anomaly: &str) -> u64 {
    results
        .anomalies
        .get(anomaly)
        .unwrap_or_else(|| panic!("results.json lacks anomaly {anomaly}"))
        .count
}

/// Every occurrence of `anomaly` is put down to a fault (or a stall), none
/// to nothing: a fault's start event is stamped when its act began, so what
/// the fault caused never precedes it.
pub fn assert_all_caused(results: &Results, anomaly: &str) {
    let a = &results.anomalies[anomaly];
    assert!(!a.causes.contains_key("none"), "{anomaly}: {:?}", a.causes);
    assert_eq!(a.causes.values().sum::<u64>(), a.count, "{:?}", a.causes);
}

/// lockstorm iptables chains no live run owns: a run makes its chain's lock
/// file first, holds an exclusive `flock` on it, and deletes it only once the
/// chain is gone, so a chain whose lock file is there and free was left
/// behind. (A chain without one was not made by this lockstorm.)
pub fn orphaned_chains() -> Vec<String> {
    use nix::fcntl::{Flock, FlockArg};
    let out = Command::new("iptables")
        .arg("-S")
        .output()
        .expect("iptables runs (CI installs it)");
    let left_behind = |chain: &str| {
        std::fs::File::open(nemesis::net::lock_path(chain))
            .is_ok_and(|f| Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok())
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|chain| chain.starts_with(nemesis::net::PREFIX) && left_behind(chain))
        .map(String::from)
        .collect()
}

/// A bare history in `dir` where two holders hold the lock at once: one
/// overlap, which only mutual exclusion forbids (`check` says INVALID, 1).
pub fn overlap_history(dir: &Path) -> PathBuf {
    let path = dir.join("h.jsonl");
    let lines = [
        r#"{"index":0,"time":10,"process":0,"type":"invoke","f":"acquire","value":null,"token":"a"}"#,
        r#"{"index":1,"time":20,"process":0,"type":"ok","f":"acquire","value":null,"token":"a"}"#,
        r#"{"index":2,"time":30,"process":1,"type":"invoke","f":"acquire","value":null,"token":"b"}"#,
        r#"{"index":3,"time":40,"process":1,"type":"ok","f":"acquire","value":null,"token":"b"}"#,
        r#"{"index":4,"time":50,"process":"harness","type":"invoke","f":"read","value":null}"#,
        r#"{"index":5,"time":60,"process":"harness","type":"ok","f":"read","value":0}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// How many events of the history have `f` equal to `op`.
pub fn events(dir: &Path, op: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["f"] == op)
        .collect()
}

/// Every `op` event carries the evidence that its fault took effect.
pub fn assert_verified(dir: &Path, op: &str) {
    let found = events(dir, op);
    assert!(!found.is_empty(), "no {op} event");
    for e in &found {
        assert!(e["value"]["verified"].is_object(), "{op} not verified: {e}");
    }
}

/// `lockstorm run --config C --nemesis N --time-limit T --seed S`, faults
/// every ~2 s, plus `extra`: the shape of most end-to-end runs.
pub fn run_short(
    results: &Path,
    config: &str,
    nemesis: &str,
    time_limit: &str,
    seed: &str,
    extra: &[&str],
) -> (Run, Results, PathBuf) {
    let mut args = vec![
        "--config",
        config,
        "--nemesis",
        nemesis,
        "--time-limit",
        time_limit,
    ];
    args.extend(["--nemesis-interval-ms", "2000", "--seed", seed]);
    args.extend_from_slice(extra);
    run(results, &args)
}

/// How many end-to-end runs may go at once, across test threads and test
/// binaries: twelve per two cores, or `LOCKSTORM_TEST_RUNS`; of them, only
/// [`heavy_slots`] may be heavy runs. A run of lockstorm's own Redis nodes
/// and workers mostly waits on timers (its leases, its work, its faults: a
/// 10 s `single` run under `kill` takes 0.7 s of CPU), so many share a
/// core; each takes an address block of its own (the harness claims the
/// lowest free one), so they never meet on the network.
///
/// A few kinds of run take most of the CPU (see [`heavy_run`]). With one
/// count for every run, nine per two cores was the most: ten starved the
/// adapters' interpreters (their pauses came too late), and on CI a
/// Sentinel took over 10 s to answer. Twelve, of which at most four heavy,
/// ran the end-to-end tests here in 177 s where nine took 188 s, the
/// machine 87 % busy rather than 80 %: past that, more runs at once only
/// stretch each run.
///
/// On a machine already more than half busy before this process starts a
/// run (another build, another suite), four per two cores: under two CPU-bound
/// loops, eight runs starving each other's interpreters, Sentinels and
/// SIGKILLed processes turned runs unknown and faults late.
fn e2e_slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(n) = std::env::var("LOCKSTORM_TEST_RUNS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
        {
            return n.max(1);
        }
        let busy = busy_share(Duration::from_millis(500));
        // Per two cores: twelve on an idle machine, four on a busy one.
        let per_two_cores = if busy > 0.5 { 4 } else { 12 };
        let slots = (cores * per_two_cores / 2).max(1);
        eprintln!(
            "e2e: the machine was {:.0}% busy before this process's first run: {slots} run slots, {} for heavy runs",
            busy * 100.0,
            heavy_slots(slots),
        );
        slots
    })
}

/// How many of `slots` runs at once may be heavy: a third (four of twelve
/// per two cores), so the JVMs and consensus members never crowd out the
/// Sentinels and interpreters around them.
fn heavy_slots(slots: usize) -> usize {
    (slots / 3).max(1)
}

/// Whether a command's run is heavy on the CPU: a ZooKeeper ensemble or a
/// JVM client (a 12 s Curator run under `pause` takes 5.5 s of CPU), three
/// etcd members (a 7 s run, 3.5 s), or containers. A run of a Python or
/// Node adapter's workers, or of PostgreSQL, takes about a second of CPU,
/// as a Redis-only run takes half of one.
fn heavy_run(args: &[&str]) -> bool {
    const FLAGS: [&str; 3] = ["curator", "kazoo", "docker"];
    const CONFIGS: [&str; 2] = ["etcd", "zookeeper"];
    args.iter().any(|a| {
        FLAGS.contains(a)
            || a.split(',')
                .any(|part| CONFIGS.iter().any(|c| part.starts_with(c)))
    })
}

/// The share of all CPUs' time spent busy (not idle, not waiting on I/O)
/// over `over` by processes other than this one and the children it has
/// reaped (this binary's other tests start at the same moment), from
/// /proc; 0 if it cannot be read.
fn busy_share(over: Duration) -> f64 {
    let sample = || -> Option<(u64, u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|n| n.parse().ok())
            .collect();
        let idle = cpu.get(3)? + cpu.get(4)?;
        // utime, stime, cutime, cstime: fields 14 to 17, after the name.
        let me = std::fs::read_to_string("/proc/self/stat").ok()?;
        let own: u64 = me
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .skip(11)
            .take(4)
            .filter_map(|n| n.parse::<u64>().ok())
            .sum();
        Some((cpu.iter().sum(), idle, own))
    };
    let (Some((total0, idle0, own0)), Some((total1, idle1, own1))) = (sample(), {
        std::thread::sleep(over);
        sample()
    }) else {
        return 0.0;
    };
    let total = total1.saturating_sub(total0).max(1) as f64;
    let busy = total - idle1.saturating_sub(idle0) as f64 - own1.saturating_sub(own0) as f64;
    (busy / total).max(0.0)
}

/// A slot: a `flock` on its file, held until dropped.
pub struct Slot {
    _lock: File,
}

/// An end-to-end run's place: its slot, and a heavy run's place among the
/// heavy ones too.
pub struct RunSlot {
    _slot: Slot,
    _heavy: Option<Slot>,
    taken: std::time::Instant,
}

/// With `LOCKSTORM_TEST_SLOT_LOG` naming a file, each run's place appends
/// the test that held it and for how long when it is freed: where the
/// suite's run time goes (a test's own time includes its wait for a slot).
impl Drop for RunSlot {
    fn drop(&mut self) {
        let Some(path) = std::env::var_os("LOCKSTORM_TEST_SLOT_LOG") else {
            return;
        };
        let line = format!(
            "{:.2}\t{}\t{}\n",
            self.taken.elapsed().as_secs_f64(),
            std::thread::current().name().unwrap_or("?"),
            if self._heavy.is_some() {
                "heavy"
            } else {
                "light"
            },
        );
        let log = File::options().create(true).append(true).open(path);
        let _ = log.and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    }
}

/// A counting semaphore made of `n` lock files in `dir`: a slot is free
/// while no process holds a `flock` on its file.
pub struct Slots(Vec<File>);

impl Slots {
    pub fn open(dir: &Path, n: usize) -> Slots {
        std::fs::create_dir_all(dir).expect("creating the test slots folder");
        let open = |i: usize| {
            let path = dir.join(format!("slot-{i}.lock"));
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()))
        };
        Slots((0..n.max(1)).map(open).collect())
    }

    /// A free slot, if there is one now.
    pub fn try_take(&mut self) -> Option<Slot> {
        let free = self.0.iter().position(|f| f.try_lock().is_ok())?;
        Some(Slot {
            _lock: self.0.swap_remove(free),
        })
    }

    /// A free slot, waiting for one if none is: whichever is freed first.
    /// A `flock` cannot wait on any one of several files, so the waiter
    /// tries them all every 20 ms; waiting in the queue of one slot (as it
    /// did) left a run waiting behind a 35 s one while other slots stood
    /// free (the end-to-end tests took 221 s that way, 210 s this way).
    pub fn take(self) -> Slot {
        self.take_trying_every(std::time::Duration::from_millis(20))
    }

    /// [`Slots::take`], trying every `every`: a waiter that tries more often
    /// is more likely to get the next freed slot.
    pub fn take_trying_every(mut self, every: std::time::Duration) -> Slot {
        loop {
            if let Some(slot) = self.try_take() {
                return slot;
            }
            std::thread::sleep(every);
        }
    }
}

/// One of the [`e2e_slots`] slots every test binary of this user shares,
/// held until dropped, for a run that is not heavy.
pub fn e2e_slot() -> RunSlot {
    e2e_slot_for(false, false)
}

/// [`e2e_slot`], for a heavy run (see [`heavy_run`]) a test starts itself.
pub fn e2e_heavy_slot() -> RunSlot {
    e2e_slot_for(false, true)
}

/// A run's place, for a `long` run: one that waits tries ten times as
/// often, so the long runs mostly go first and the short ones fill in
/// around them rather than a 30 s run starting last and ending the suite
/// alone. A `heavy` run takes its place among the heavy ones first, so it
/// holds no slot while it waits for one.
fn e2e_slot_for(long: bool, heavy: bool) -> RunSlot {
    let every = std::time::Duration::from_millis(if long { 2 } else { 20 });
    let slots = |dir: &str, n: usize| {
        let dir = std::env::temp_dir().join(dir);
        Slots::open(&dir, n).take_trying_every(every)
    };
    let _heavy = heavy.then(|| slots("lockstorm-test-heavy-slots", heavy_slots(e2e_slots())));
    let _slot = slots("lockstorm-test-slots", e2e_slots());
    RunSlot {
        _slot,
        _heavy,
        taken: std::time::Instant::now(),
    }
}

std::thread_local! {
    static LONG_TEST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling test as long: several runs one after another (a run,
/// then its shrink, then the shrunk command), whose first run is short by
/// itself. Its runs then wait for a slot as long runs do, so the test starts
/// early instead of ending the suite alone.
pub fn long_test() {
    LONG_TEST.set(true);
}

/// Whether a command is one of the suite's long runs: a time limit of 15 s
/// or more, or a `shrink` (several runs in turn). The longest first, the
/// short ones filling in: at 20 s, a 15 s `replicated` run that started
/// last ended the suite 7 s after every other run.
fn long_run(args: &[&str]) -> bool {
    let limit = args
        .windows(2)
        .find(|w| w[0] == "--time-limit")
        .and_then(|w| w[1].parse::<u64>().ok());
    args.first() == Some(&"shrink") || limit.is_some_and(|s| s >= 15)
}

/// Asserts the run was VALID; if not, says why in terms a reader of a busy
/// CI runner's log can act on: each anomaly with the faults that preceded
/// it, and every unplanned stall the workers and harness recorded.
pub fn assert_valid(results: &Results, dir: &Path) {
    if results.valid == Validity::True {
        return;
    }
    let mut why = Vec::new();
    for (name, a) in results.anomalies.iter().filter(|(_, a)| a.count > 0) {
        let causes = store::summary::causes(a).unwrap_or_else(|| "not attributed".into());
        why.push(format!("{name} {} ({causes})", a.count));
        for (example, cause) in a.examples.iter().zip(&a.example_causes) {
            why.push(format!("  events {example:?}: {cause}"));
        }
    }
    let stalls = events(dir, "stall");
    why.push(format!("stalls recorded: {}", stalls.len()));
    for s in &stalls {
        why.push(format!(
            "  {} stalled {} ms, until {:.2} s",
            s["value"]["who"],
            s["value"]["ms"],
            s["time"].as_f64().unwrap_or(0.0) / 1e9
        ));
    }
    why.extend(results.notes.iter().map(|n| format!("note: {n}")));
    panic!(
        "expected VALID, got {:?} in {}\n{}",
        results.valid,
        dir.display(),
        why.join("\n")
    );
}

/// Polls until `probe` returns something, failing the test after 30 s.
pub fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Node `name` as the run in `dir` recorded it in `run.json` (`addr`, `pid`…).
pub fn recorded_node(dir: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("run.json")).expect("run.json");
    let record: serde_json::Value = serde_json::from_str(&text).expect("run.json parses");
    record["nodes"]
        .as_array()
        .expect("run.json lists its nodes")
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in run.json"))
        .clone()
}

/// The `summary.json` of the one matrix folder in `results`.
pub fn matrix_summary(results: &Path) -> serde_json::Value {
    let dir = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("matrix-")
        })
        .expect("a matrix folder");
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The one line on stderr of a command refused as bad input (exit 254).
/// `lockstorm run --config <config>` with the server program the test
/// hides through `env` (`[(VAR, a path that is not there)]`): refused
/// before it starts, in one line that names the Debian package to install
/// and the variable.
pub fn missing_server_line(config: &str, env: (&str, &str), package: &str) -> String {
    let tmp = tmp();
    let results = tmp.path().to_str().unwrap();
    let args = [
        "run",
        "--config",
        config,
        "--time-limit",
        "2",
        "--results",
        results,
    ];
    let line = one_line_254(&lockstorm_with(&args, &[env]));
    assert!(
        line.contains(&format!("apt-get install -y {package}")),
        "{line}"
    );
    assert!(line.contains(env.0), "{line}");
    line
}

/// A run of a consensus store's `config` (three members) under `nemesis`
/// (seed 5) for `seconds`, in a folder of its own: its results, its folder
/// and its `results.json`. No member's data folder outlives it.
pub fn members_run(
    config: &str,
    nemesis: &str,
    seconds: &str,
    extra: &[&str],
) -> (tempfile::TempDir, Results, PathBuf, serde_json::Value) {
    let tmp = open_tmp();
    let (_, results, dir) = run_short(tmp.path(), config, nemesis, seconds, "5", extra);
    for n in 1..=3 {
        let data = dir.join(format!("nodes/n{n}/data"));
        assert!(!data.exists(), "{} outlived the run", data.display());
    }
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    (tmp, results, dir, serde_json::from_str(&text).unwrap())
}

/// A fenced consensus `config` run for `seconds` under `kill --targets
/// majority`: two of the three members killed (each kill verified) and
/// restarted on their data, and the run still valid with writes taken.
pub fn fence_survives_a_killed_majority(config: &str, seconds: &str) {
    let majority = ["--targets", "majority"];
    let (_tmp, results, dir, json) = members_run(config, "kill", seconds, &majority);
    assert_valid(&results, &dir);
    assert_verified(&dir, "start-kill");
    assert_verified(&dir, "stop-kill");
    for kill in events(&dir, "start-kill") {
        let killed = kill["value"]["killed"].as_array().map_or(0, Vec::len);
        assert_eq!(killed, 2, "not a majority of three: {kill}");
    }
    assert!(
        json["checkers"]["counter"]["acknowledged"].as_u64() > Some(0),
        "nothing was written: {}",
        dir.display()
    );
}

/// A run of `config` whose holder is paused for a minute, faults every
/// 200 ms: a harness signalled once the first pause is in the history is
/// signalled mid-fault.
pub fn paused_for_a_minute(config: &str) -> [&str; 13] {
    held_for_a_minute(config, "pause")
}

/// [`paused_for_a_minute`], with the holder held by `nemesis` (one whose
/// length `--pause-ms` sets).
pub fn held_for_a_minute<'a>(config: &'a str, nemesis: &'a str) -> [&'a str; 13] {
    [
        "run",
        "--config",
        config,
        "--nemesis",
        nemesis,
        "--pause-ms",
        "60000",
        "--time-limit",
        "120",
        "--seed",
        "3",
        "--nemesis-interval-ms",
        "200",
    ]
}

pub fn one_line_254(out: &Run) -> String {
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "one line: {}", out.stderr);
    lines[0].to_string()
}

/// Where the tests' folders go: memory (`/dev/shm`) when the machine has
/// it, else the temporary folder. A run's folder holds its nodes' data, and
/// they fsync: Redis with `aof-always`, Sentinel rewriting its config,
/// PostgreSQL committing, etcd's write-ahead log. On a busy disk one run's
/// fsync stalled another's process in state D (a pause refused as
/// unverified, a Sentinel silent for 10 s); in memory an fsync costs
/// nothing. What the tests check of persistence survives a process's
/// SIGKILL, not a machine's power, so memory keeps it just as a disk does.
pub fn scratch() -> PathBuf {
    static SCRATCH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SCRATCH
        .get_or_init(|| {
            let shm = Path::new("/dev/shm");
            let writable = tempfile::tempdir_in(shm).is_ok();
            match writable {
                true => shm.to_path_buf(),
                false => std::env::temp_dir(),
            }
        })
        .clone()
}

/// A temporary folder in [`scratch`], removed when dropped.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(scratch()).expect("a temporary folder")
}

/// A temporary folder PostgreSQL's user may walk into when the suite runs
/// as root (a temporary folder is 0700 otherwise), so a run's PostgreSQL
/// data folder can sit in its run folder, where the leftover checks look.
pub fn open_tmp() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tmp();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

/// The examples docs/protocol.md marks with `mark` (`<!-- protocol-example:`),
/// each a ```text block of request (`→ `) and reply (`← `) lines in turn:
/// the words after the mark, and the pairs.
pub fn page_examples(mark: &str) -> Vec<(String, Vec<(String, String)>)> {
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md");
    let page = std::fs::read_to_string(page).unwrap();
    page.split(mark)
        .skip(1)
        .map(|part| {
            let (tags, rest) = part.split_once("-->").expect("a marker ends with -->");
            let block = rest
                .trim_start()
                .strip_prefix("```text\n")
                .expect("a marker is followed by a ```text block");
            let (block, _) = block.split_once("```").expect("the block ends");
            let lines: Vec<&str> = block.lines().collect();
            let pairs = lines
                .chunks(2)
                .map(|pair| match pair {
                    [q, a] => (
                        q.strip_prefix("→ ").expect("a request line starts with →"),
                        a.strip_prefix("← ").expect("a reply line starts with ←"),
                    ),
                    _ => panic!("an example is request and reply lines in turn: {pair:?}"),
                })
                .map(|(q, a)| (q.to_string(), a.to_string()))
                .collect();
            (tags.to_string(), pairs)
        })
        .collect()
}

/// A reply line's `ok`, as the history takes it.
pub fn answer_of(reply: &serde_json::Value) -> workloads::adapter::Answer {
    use workloads::adapter::Answer;
    match reply["ok"] {
        serde_json::Value::Bool(true) => Answer::Yes,
        serde_json::Value::Bool(false) => Answer::No,
        _ => Answer::Unknown,
    }
}

/// Starts `run` (a long run whose fault holds, writing into `results`) once
/// per signal, waits until `marker` is in the history of its run (in
/// `results/<group>/<run>`), checks that every folder `data` names for that
/// run exists, signals the harness (SIGINT and SIGTERM must end it with exit
/// 2), and waits until no process of it and none of those folders is left:
/// a server's data goes with the harness however it ends.
pub fn nothing_outlives_a_signalled_harness(
    run: &[&str],
    group: &str,
    marker: &str,
    data: impl Fn(&Path) -> Vec<PathBuf>,
) {
    use nix::sys::signal::{kill, Signal};
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGKILL] {
        let _slot = e2e_slot_for(false, heavy_run(run));
        let tmp = open_tmp();
        let child = Command::new(env!("CARGO_BIN_EXE_lockstorm"))
            .args(run)
            .arg("--results")
            .arg(tmp.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let dir = wait_for(marker, || {
            let dir = std::fs::read_dir(tmp.path().join(group))
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| p.is_dir())?;
            let history = std::fs::read_to_string(dir.join("history.jsonl")).ok()?;
            history.contains(marker).then_some(dir)
        });
        let data = data(&dir);
        assert!(
            data.iter().all(|d| d.exists()),
            "{signal}: no data folder in {}",
            dir.display()
        );
        kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let out = child.wait_with_output().unwrap();
        if signal != Signal::SIGKILL {
            assert_eq!(
                out.status.code(),
                Some(2),
                "{signal}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        wait_for(
            "every server, its data folder and shared memory to be gone",
            || {
                let gone = leftover_processes(tmp.path()).is_empty()
                    && data.iter().all(|d| !d.exists())
                    && postgres_segments_left(&dir).is_empty();
                gone.then_some(())
            },
        );
    }
}

/// The System V shared memory segments (`ipcs -m -p` lines) that a
/// PostgreSQL server of the run in `dir` created and left: a SIGKILLed
/// postmaster leaves its own, and the machine allows 4096 in all. The
/// servers are the postmasters of the nodes' logs (`[pid]` in the line
/// prefix of "ready to accept connections").
pub fn postgres_segments_left(dir: &Path) -> Vec<String> {
    let logs = std::fs::read_dir(dir.join("nodes")).into_iter().flatten();
    let logs: String = logs
        .flatten()
        .filter_map(|node| std::fs::read_to_string(node.path().join("output.log")).ok())
        .collect();
    let servers: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("database system is ready to accept connections"))
        .filter_map(|l| l.split_once(" [")?.1.split_once(']').map(|(pid, _)| pid))
        .collect();
    if servers.is_empty() {
        return Vec::new();
    }
    let ipcs = Command::new("ipcs")
        .args(["-m", "-p"])
        .output()
        .expect("ipcs (util-linux) runs");
    // Lines: shmid, owner, creator's pid, last user's pid.
    String::from_utf8_lossy(&ipcs.stdout)
        .lines()
        .filter(|l| {
            let cpid = l.split_whitespace().nth(2);
            cpid.is_some_and(|pid| servers.contains(&pid))
        })
        .map(str::to_string)
        .collect()
}
