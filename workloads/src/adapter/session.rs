//! One running adapter process: its pipes, one request at a time, and the
//! ways it can fail. Replies are waited for on the worker's *running* time,
//! so a pause that froze worker and adapter together does not read as a
//! hung adapter once they resume.

use super::protocol::{parse_reply, Op, Reply, Request};
use super::AdapterSpec;
use checker::history::MAX_LINE_BYTES;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a wait for a reply wakes (to run its idle work and count time).
const POLL: Duration = Duration::from_millis(2);
/// One wake-up never counts for more than this: a longer gap is the
/// process having been stopped, not the adapter being slow.
const MAX_STEP: Duration = Duration::from_millis(50);
/// How much of an adapter's stderr its file keeps. A replacement adapter
/// appends to its predecessor's file, so what is there counts.
pub const STDERR_CAP: u64 = 16 << 20;
/// How much of a line too long to be a reply its message quotes.
const QUOTED_CHARS: usize = 80;

/// Whose process group an adapter is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Its worker's: a pause or crash of the worker strikes the adapter and
    /// all its children too. The harness kills the group when the worker
    /// ends; the session kills only the adapter.
    Worker,
    /// A group of its own (an adapter the harness starts itself, for the
    /// check before a run and in `client-test`): the session kills the whole
    /// group when it ends, the adapter's children with it.
    Own,
}

/// Why a request got no usable reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No reply within the budget: the op's outcome is unknown.
    Hung(String),
    /// It exited or closed its stdout: the op's outcome is unknown.
    Died(String),
    /// It broke the protocol: the message names the line or the problem,
    /// and running it again would repeat it.
    Broken(String),
    /// Its program cannot be started (not found, not executable): bad input,
    /// as a missing file is.
    Unstartable(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Hung(m) | Failure::Died(m) | Failure::Broken(m) | Failure::Unstartable(m) => {
                f.write_str(m)
            }
        }
    }
}

pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its stdout, line by line.
    lines: Receiver<Out>,
    /// Bytes the reader has taken from its stdout so far, and that count
    /// when the last request went out: whether a reply has begun.
    received: Arc<AtomicU64>,
    received_at_request: u64,
    /// Its stdout pipe, to ask whether bytes wait in it (a copy of the
    /// descriptor the reader reads), and the reader thread's id (0 until it
    /// has started), to ask whether it sleeps on the pipe.
    stdout_probe: Option<OwnedFd>,
    reader_tid: Arc<AtomicI32>,
    next_id: u64,
    spec: AdapterSpec,
    group: Group,
    /// Set once it is reaped (and its group killed, if it leads one).
    status: Option<ExitStatus>,
}

/// How a session ended.
#[derive(Debug)]
pub struct Ended {
    /// It exited on its own once its stdin closed (not killed).
    pub exited: bool,
    /// Its descendants that had left its process group, which no kill of
    /// the group reaches: `pid (command)`.
    pub strays: Vec<String>,
    /// For one that did not exit: what it was doing when it was killed (its
    /// state, and who else held its stdin open).
    pub stuck: Option<String>,
}

/// What the reader of an adapter's stdout hands over.
enum Out {
    Line(String),
    /// A line that cannot be a reply: too long, or not UTF-8.
    Unreadable(String),
    Closed,
}

impl Session {
    /// Starts the adapter in `group`, its stderr appended to the spec's file.
    pub fn start(spec: &AdapterSpec, group: Group) -> Result<Session, Failure> {
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| Failure::Broken("the adapter command is empty".into()))?;
        let cannot = |e: std::io::Error| {
            Failure::Broken(format!(
                "cannot start the adapter `{}`: {e}",
                spec.command()
            ))
        };
        if let Some(dir) = spec.stderr.parent() {
            std::fs::create_dir_all(dir).map_err(cannot)?;
        }
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.stderr)
            .map_err(cannot)?;
        let _ = writeln!(log, "--- lockstorm: starting `{}`", spec.command());
        let mut cmd = Command::new(program);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        cmd.args(args)
            .envs(&spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match group {
            Group::Worker => process::die_with_parent(&mut cmd),
            Group::Own => process::isolate(&mut cmd),
        }
        let mut child = cmd.spawn().map_err(|e| {
            Failure::Unstartable(format!(
                "cannot start the adapter `{}`: {e} (check the program and its path: a relative one is taken from the folder lockstorm runs in)",
                spec.command()
            ))
        })?;
        let stderr = child.stderr.take().expect("stderr is piped");
        std::thread::spawn(move || keep_stderr(stderr, log));
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdout_probe = stdout.as_fd().try_clone_to_owned().ok();
        let received = Arc::new(AtomicU64::new(0));
        let mut stdout = BufReader::new(Counted {
            inner: stdout,
            count: received.clone(),
        });
        let (tx, lines) = mpsc::channel();
        let reader_tid = Arc::new(AtomicI32::new(0));
        let tid = reader_tid.clone();
        std::thread::spawn(move || {
            tid.store(nix::unistd::gettid().as_raw(), Ordering::SeqCst);
            let mut buf = Vec::new();
            loop {
                let out = read_reply(&mut stdout, &mut buf);
                let last = !matches!(out, Out::Line(_));
                if tx.send(out).is_err() || last {
                    return;
                }
            }
        });
        Ok(Session {
            stdin: child.stdin.take(),
            child,
            lines,
            received,
            received_at_request: 0,
            stdout_probe,
            reader_tid,
            next_id: 0,
            spec: spec.clone(),
            group,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the adapter has begun to write its reply to the request in
    /// flight. Asked of a *frozen* adapter (it can write nothing more), it
    /// is final: bytes still in the pipe were written before the freeze;
    /// with the pipe empty, once the reader thread sleeps (blocked on the
    /// pipe) it has counted all it took. A reader seen running may be
    /// between taking bytes and counting them (on a busy machine it can be
    /// preempted there for milliseconds), so it is asked again.
    pub fn reply_begun(&self) -> bool {
        let begun = || self.received.load(Ordering::SeqCst) > self.received_at_request;
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            if self.bytes_waiting() || begun() {
                return true;
            }
            let reader = self.reader_tid.load(Ordering::SeqCst);
            let asleep = reader != 0 && process::state(reader as u32) == Some('S');
            if (asleep && !self.bytes_waiting()) || Instant::now() >= deadline {
                return begun();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether bytes wait in the adapter's stdout pipe, not yet read.
    fn bytes_waiting(&self) -> bool {
        let Some(fd) = &self.stdout_probe else {
            return false;
        };
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
            && fds[0]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLIN))
    }

    /// Sends `op` and waits up to `budget` of running time for its reply,
    /// calling `idle` every few milliseconds meanwhile (it may ask
    /// [`Session::reply_begun`]).
    pub fn call(
        &mut self,
        op: Op,
        budget: Duration,
        mut idle: impl FnMut(&Session),
    ) -> Result<Reply, Failure> {
        // A line before any request is one nobody asked for.
        match self.lines.try_recv() {
            Ok(Out::Line(line)) => {
                return Err(Failure::Broken(format!(
                    "the adapter wrote a line nobody asked for (before {}): {line:?}",
                    op.name()
                )))
            }
            Ok(Out::Unreadable(what)) => {
                return Err(Failure::Broken(format!(
                    "the adapter wrote {what}, before {}",
                    op.name()
                )))
            }
            Ok(Out::Closed) => return Err(self.died(&op)),
            Err(_) => {}
        }
        let request = Request {
            id: self.next_id,
            op,
        };
        self.next_id += 1;
        self.received_at_request = self.received.load(Ordering::SeqCst);
        let sent = match &mut self.stdin {
            Some(stdin) => stdin
                .write_all(request.line().as_bytes())
                .and_then(|()| stdin.flush())
                .is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.died(&request.op));
        }
        let mut spent = Duration::ZERO;
        loop {
            let step = Instant::now();
            match self.lines.recv_timeout(POLL) {
                Ok(Out::Line(line)) => {
                    return parse_reply(&line, &request).map_err(Failure::Broken)
                }
                Ok(Out::Unreadable(what)) => {
                    return Err(Failure::Broken(format!(
                        "the adapter wrote {what}, in reply to {} #{}",
                        request.op.name(),
                        request.id
                    )))
                }
                Ok(Out::Closed) => return Err(self.died(&request.op)),
                Err(RecvTimeoutError::Disconnected) => return Err(self.died(&request.op)),
                Err(RecvTimeoutError::Timeout) => {}
            }
            spent += step.elapsed().min(MAX_STEP);
            if spent >= budget {
                return Err(Failure::Hung(format!(
                    "the adapter did not answer {} #{} within {} ms",
                    request.op.name(),
                    request.id,
                    budget.as_millis()
                )));
            }
            idle(self);
        }
    }

    /// What became of an adapter whose stdout closed: its exit status if it
    /// exited, and the end of its stderr.
    fn died(&mut self, op: &Op) -> Failure {
        let deadline = Instant::now() + Duration::from_secs(1);
        while !process::exited(self.pid()) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        let status = match process::exited(self.pid()) {
            true => format!("exited ({})", self.reap()),
            false => "closed its stdout".to_string(),
        };
        Failure::Died(format!(
            "the adapter `{}` {status} during {}{}",
            self.spec.command(),
            op.name(),
            self.spec.stderr_tail()
        ))
    }

    /// Kills what is left of it, then reaps it. In this order: until it is
    /// reaped, its pid, and so the id of the group it leads, cannot be
    /// reused, so the kill strikes its group and nothing else.
    fn reap(&mut self) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let _ = match self.group {
            Group::Own => process::kill_group(self.pid()),
            // Its group is its worker's; what it left in it goes when the worker ends.
            Group::Worker => process::kill_now(self.pid()),
        };
        let status = self
            .child
            .wait()
            .unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(0));
        self.status = Some(status);
        status
    }
}

/// How long a run's adapter has to exit once its stdin closes: a worker
/// waits on it.
const EXIT_GRACE: Duration = Duration::from_millis(500);

impl Session {
    /// Closes its stdin, which asks it to exit; one that has not within
    /// half a second is killed. Either way it is reaped, its group killed
    /// first if it leads one.
    pub fn close(self) -> Ended {
        self.close_within(EXIT_GRACE)
    }

    /// [`Session::close`], giving it `wait` to exit.
    pub fn close_within(mut self, wait: Duration) -> Ended {
        self.end_within(wait)
    }

    fn end(&mut self) -> Ended {
        self.end_within(EXIT_GRACE)
    }

    fn end_within(&mut self, wait: Duration) -> Ended {
        if self.status.is_some() {
            return Ended {
                exited: true,
                strays: Vec::new(),
                stuck: None,
            };
        }
        // Before its stdin closes: once it has exited, its children are
        // no longer found under it.
        let strays = process::strays(self.pid());
        if !strays.is_empty() {
            if let Ok(mut log) = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.spec.stderr)
            {
                let _ = writeln!(log, "--- lockstorm: {}", strays_left(&strays));
            }
        }
        drop(self.stdin.take());
        let deadline = Instant::now() + wait;
        while !process::exited(self.pid()) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        let exited = process::exited(self.pid());
        let stuck = (!exited).then(|| {
            let holders = process::stdin_holders(self.pid())
                .into_iter()
                .map(process::named)
                .collect::<Vec<_>>();
            format!(
                "state {}; its stdin also held by {}",
                process::state(self.pid()).unwrap_or('?'),
                if holders.is_empty() {
                    "no other process".to_string()
                } else {
                    holders.join(", ")
                }
            )
        });
        self.reap();
        Ended {
            exited,
            strays,
            stuck,
        }
    }
}

/// What to say of an adapter's strays.
pub fn strays_left(strays: &[String]) -> String {
    format!(
        "the adapter left {} running outside its process group (setsid or setpgid): lockstorm cannot stop {}; ending {} is the adapter's job",
        strays.join(", "),
        if strays.len() == 1 { "it" } else { "them" },
        if strays.len() == 1 { "it" } else { "them" },
    )
}

/// No adapter outlives its session.
impl Drop for Session {
    fn drop(&mut self) {
        self.end();
    }
}

/// An adapter's stdout, counting the bytes taken from it as they are.
struct Counted<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
}

/// The next line of an adapter's stdout, read no further than
/// [`MAX_LINE_BYTES`]: a line longer than that is no reply, and reading it
/// whole would cost its length in memory.
fn read_reply(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> Out {
    use checker::history::{next_line, ParseError};
    match next_line(reader, buf, 0) {
        Ok(false) | Err(ParseError::Io(_)) => Out::Closed,
        Err(ParseError::Line { .. }) => {
            let start = String::from_utf8_lossy(&buf[..buf.len().min(4 * QUOTED_CHARS)]);
            let start: String = start.chars().take(QUOTED_CHARS).collect();
            Out::Unreadable(format!(
                "a line longer than {} MiB ({} bytes read, and more), starting {start:?}",
                MAX_LINE_BYTES >> 20,
                buf.len()
            ))
        }
        Ok(true) => {
            let line = buf.strip_suffix(b"\n").unwrap_or(buf);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            match std::str::from_utf8(line) {
                Ok(line) => Out::Line(line.to_string()),
                Err(_) => Out::Unreadable(format!(
                    "a line that is not UTF-8: {:?}",
                    String::from_utf8_lossy(line)
                )),
            }
        }
    }
}

/// Copies an adapter's stderr into its file up to [`STDERR_CAP`], then
/// notes the cut once and reads on to the end without keeping anything:
/// an adapter blocked on a full stderr pipe would read as hung.
fn keep_stderr(mut stderr: impl Read, mut log: std::fs::File) {
    let mut room = STDERR_CAP.saturating_sub(log.metadata().map_or(0, |m| m.len()));
    // A predecessor that filled the file has noted the cut already.
    let mut noted = room == 0;
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match stderr.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let keep = n.min(room as usize);
        if keep > 0 && log.write_all(&buf[..keep]).is_ok() {
            room -= keep as u64;
        }
        if keep < n && !noted {
            noted = true;
            let _ = writeln!(
                log,
                "\n--- lockstorm: the adapter's stderr reached {} MiB here; the rest of it is dropped",
                STDERR_CAP >> 20
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    #[test]
    fn a_reply_line_is_read_no_further_than_the_cap() {
        let mut buf = Vec::new();
        let mut lines = &b"{\"id\":0}\r\nsecond\nlast"[..];
        for want in ["{\"id\":0}", "second", "last"] {
            match read_reply(&mut lines, &mut buf) {
                Out::Line(line) => assert_eq!(line, want),
                _ => panic!("{want} not read"),
            }
        }
        assert!(matches!(read_reply(&mut lines, &mut buf), Out::Closed));
        // A line that never ends: read whole, it would never return.
        let mut endless = BufReader::new(std::io::repeat(b'x'));
        let Out::Unreadable(what) = read_reply(&mut endless, &mut buf) else {
            panic!("an endless line read as a reply");
        };
        assert_eq!(buf.len(), MAX_LINE_BYTES + 1);
        let start = "x".repeat(QUOTED_CHARS);
        assert_eq!(
            what,
            format!("a line longer than 1 MiB (1048577 bytes read, and more), starting {start:?}")
        );
        // Up to the cap is a line like any other.
        let mut long = vec![b'y'; MAX_LINE_BYTES - 1];
        long.push(b'\n');
        let Out::Line(line) = read_reply(&mut &long[..], &mut buf) else {
            panic!("a line within the cap refused");
        };
        assert_eq!(line.len(), MAX_LINE_BYTES - 1);
        let mut bad = &b"\xff\xfe\n"[..];
        let Out::Unreadable(what) = read_reply(&mut bad, &mut buf) else {
            panic!("a line that is not UTF-8 read as a reply");
        };
        assert!(what.starts_with("a line that is not UTF-8"), "{what}");
    }

    fn spec(dir: &Path, argv: &[&str]) -> AdapterSpec {
        AdapterSpec {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            cwd: None,
            stderr: dir.join("adapter.stderr"),
            topology: "single".into(),
            master: None,
            db: 0,
        }
    }

    fn init() -> Op {
        Op::Init(super::super::Init {
            topology: "single".into(),
            nodes: vec![],
            sentinels: None,
            master: None,
            db: None,
            key: "k".into(),
            ttl_ms: 1000,
            acquire_timeout_ms: 1000,
            worker: 0,
        })
    }

    /// Writes 20 MiB to stderr before it answers `init`: one that blocked on
    /// a full stderr pipe would never answer.
    const NOISY: &str = r#"yes 'adapter noise' | head -c 20971520 >&2
read request
echo '{"id":0,"ok":true,"client":"noisy 0","features":[]}'
cat >/dev/null"#;

    #[test]
    fn an_adapters_stderr_stops_at_the_cap_and_never_blocks_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(dir.path(), &["sh", "-c", NOISY]);
        let note = "--- lockstorm: the adapter's stderr reached 16 MiB here";
        let budget = Duration::from_secs(20);
        for started in 1..=2 {
            // The second is a replacement, appending to the same file.
            let mut session = Session::start(&spec, Group::Own).unwrap();
            let reply = session.call(init(), budget, |_| {});
            assert_eq!(reply.unwrap().client.as_deref(), Some("noisy 0"));
            // Everything but what the pipe holds is read by now, so the cap
            // was passed and noted before the reply was written.
            let len = std::fs::metadata(&spec.stderr).unwrap().len();
            let text = String::from_utf8_lossy(&std::fs::read(&spec.stderr).unwrap()).into_owned();
            assert!(
                (STDERR_CAP..STDERR_CAP + 1024).contains(&len),
                "{len} bytes after {started} adapters"
            );
            assert_eq!(text.matches(note).count(), 1, "one note");
            let starts = text.matches("--- lockstorm: starting `sh -c").count();
            assert_eq!(starts, started);
            assert!(session.close().strays.is_empty());
        }
    }

    /// The shipped Node adapters' protocol helper, serving a client whose
    /// fences are BigInts (past 2^53, as JavaScript has them).
    #[test]
    fn the_node_helper_sends_a_bigint_fence_as_a_string_of_digits() {
        let dir = tempfile::tempdir().unwrap();
        let helper = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/node/protocol.js");
        let adapter = dir.path().join("bigint.js");
        std::fs::write(
            &adapter,
            format!(
                "require({helper:?}).serve({{
  library: 'bigint', topologies: ['single'], features: ['fence'],
  async init() {{ return {{ ok: true, client: 'bigint 0', features: this.features }}; }},
  async acquire() {{ return {{ ok: true, fence: 18446744073709551615n }}; }},
  async release() {{ return {{ ok: true }}; }},
}});
"
            ),
        )
        .unwrap();
        let spec = spec(dir.path(), &["node", adapter.to_str().unwrap()]);
        let mut session = Session::start(&spec, Group::Own).unwrap();
        let budget = Duration::from_secs(20);
        session.call(init(), budget, |_| {}).unwrap();
        let reply = session.call(Op::Acquire { timeout_ms: 10 }, budget, |_| {});
        assert_eq!(reply.map(|r| r.fence), Ok(Some(u64::MAX)));
        assert!(session.close().exited);
    }

    /// Answers `init`, then the acquire in two halves with a pause between
    /// (`half`) or whole after one (`whole`), saying on stderr when the
    /// pause begins. The half is written by a process of its own, so it is
    /// in the pipe when that process has exited.
    const SLOW_REPLY: &str = r#"read request
echo '{"id":0,"ok":true,"client":"slow 0","features":[]}'
read request
if [ "$0" = half ]; then env printf '{"id":1,'; fi
echo pausing >&2
sleep 1
if [ "$0" = half ]; then echo '"ok":false,"error":"lock-busy"}'; else echo '{"id":1,"ok":false,"error":"lock-busy"}'; fi
cat >/dev/null"#;

    /// Whether a reply had begun when the adapter was frozen mid-acquire:
    /// half a line in the pipe is a decision made, nothing is none.
    #[test]
    fn a_frozen_adapter_has_begun_its_reply_only_when_bytes_of_it_were_written() {
        for (mode, begun) in [("half", true), ("whole", false)] {
            let dir = tempfile::tempdir().unwrap();
            let spec = spec(dir.path(), &["sh", "-c", SLOW_REPLY, mode]);
            let mut session = Session::start(&spec, Group::Own).unwrap();
            session
                .call(init(), Duration::from_secs(20), |_| {})
                .unwrap();
            let pid = session.pid();
            let mut seen = None;
            let reply = session.call(
                Op::Acquire { timeout_ms: 1000 },
                Duration::from_secs(20),
                |s| {
                    let said = std::fs::read_to_string(&spec.stderr).unwrap_or_default();
                    // A line of its own: the file's first line quotes the script.
                    if seen.is_none() && said.lines().any(|l| l == "pausing") {
                        process::suspend(pid).unwrap();
                        seen = Some(s.reply_begun());
                        process::resume(pid).unwrap();
                    }
                },
            );
            assert!(reply.is_ok(), "{mode}: {reply:?}");
            assert_eq!(seen, Some(begun), "{mode}");
            session.close();
        }
    }

    #[test]
    fn a_session_kills_its_own_group_and_names_what_left_it() {
        let dir = tempfile::tempdir().unwrap();
        // A child that stays in the group and ignores SIGTERM, and one that
        // says its pid once it has left it.
        let script = r#"trap '' TERM HUP INT
sleep 300 & echo "stays $!" >&2
setsid sh -c 'echo "leaves $$" >&2; exec sleep 300' &
read request
echo '{"id":0,"ok":true,"client":"forks 0","features":[]}'
cat >/dev/null"#;
        let spec = spec(dir.path(), &["sh", "-c", script]);
        let mut session = Session::start(&spec, Group::Own).unwrap();
        session
            .call(init(), Duration::from_secs(20), |_| {})
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid = |what: &str| -> Option<u32> {
            let text = std::fs::read_to_string(&spec.stderr).unwrap();
            let line = text.lines().find(|l| l.starts_with(what))?;
            line[what.len() + 1..].parse().ok()
        };
        let (stays, leaves) = loop {
            if let (Some(stays), Some(leaves)) = (pid("stays"), pid("leaves")) {
                break (stays, leaves);
            }
            assert!(
                Instant::now() < deadline,
                "the children did not say their pids"
            );
            std::thread::sleep(POLL);
        };
        let ended = session.close();
        assert_eq!(ended.strays.len(), 1, "{:?}", ended.strays);
        assert!(
            ended.strays[0].starts_with(&format!("{leaves} (")),
            "{:?}",
            ended.strays
        );
        let gone = |p: u32| process::state(p).is_none_or(|s| s == 'Z');
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gone(stays) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        assert!(gone(stays), "the child in its group outlived the session");
        assert!(!gone(leaves), "the one that left the group is out of reach");
        let _ = process::kill_now(leaves);
        let log = std::fs::read_to_string(&spec.stderr).unwrap();
        let noted = format!("--- lockstorm: the adapter left {leaves} (");
        assert!(log.contains(&noted), "{log}");
    }
}
