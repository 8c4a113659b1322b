//! `--nodes HOST,…`: the run's nodes on other machines, reached over SSH
//! as Jepsen's control node reaches n1…n5 — OpenSSH itself, one
//! multiplexed master connection per host, so the user's `~/.ssh/config`,
//! agent and jump hosts apply.
//!
//! This file is the plan, pure: the destinations as given, which host runs
//! which node, what a host must have, and the shell it runs. `host.rs` is
//! one host's connection (every command under a deadline), `process.rs` a
//! node's process there and the provisioner that starts it, `firewall.rs`
//! the cuts between hosts, `hosts.rs` what the topology's faults do there.

mod firewall;
mod host;
mod hosts;
mod process;

pub use host::{Host, Login};
pub use process::{connect, Remote, Setup};

use std::fmt;

/// One `--nodes` entry: `[user@]host[:port]`, as `ssh` takes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Destination {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl Destination {
    pub fn parse(s: &str) -> Result<Destination, String> {
        let bad = |why: &str| {
            format!(
                "--nodes entry {s:?} {why}: give [user@]host[:port], e.g. root@10.0.0.5 or n1:2222"
            )
        };
        let (user, rest) = match s.split_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, s),
        };
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => {
                let port = port.parse::<u16>().ok().filter(|p| *p != 0);
                (host, Some(port.ok_or_else(|| bad("has no valid port"))?))
            }
            None => (rest, None),
        };
        let plain = |t: &str| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                && !t.starts_with('-')
        };
        if user.is_some_and(|u| !plain(u)) {
            return Err(bad("has an empty or odd user"));
        }
        if !plain(host) {
            return Err(bad("has an empty or odd host name"));
        }
        Ok(Destination {
            user: user.map(str::to_string),
            host: host.to_string(),
            port,
        })
    }

    /// What `ssh` is given: the user and host (the port goes apart).
    pub fn target(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.target())?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// `--nodes`' value: one or more destinations, none twice.
pub fn parse_nodes(s: &str) -> Result<Vec<Destination>, String> {
    let hosts = s
        .split(',')
        .map(|d| Destination::parse(d.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, d) in hosts.iter().enumerate() {
        if hosts[..i].contains(d) {
            return Err(format!(
                "--nodes names {d} twice: give each host once (a host runs as many nodes as the config places there)"
            ));
        }
    }
    Ok(hosts)
}

/// Which host (an index into `--nodes`) runs node `name`, of `hosts`, in a
/// topology of `data_nodes` data nodes (n1…): data node `n<i>` the i-th,
/// round the list; the storage node the last. Sentinel `s<j>` takes the
/// hosts after the data nodes' first, then the replicas' (n2's, …), the
/// first primary's last: a cut of the primary
/// from its replicas must leave every Sentinel reaching the replicas, so
/// one can promote them (and with five hosts, none shares a host with a
/// data node it would be cut from).
pub fn host_of(name: &str, hosts: usize, data_nodes: usize) -> usize {
    let hosts = hosts.max(1);
    let index = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n >= 1)
    };
    if let Some(i) = index("n") {
        (i - 1) % hosts
    } else if let Some(j) = index("s") {
        let data = data_nodes.clamp(1, hosts);
        let order: Vec<usize> = (data..hosts).chain(1..data).chain([0]).collect();
        order[(j - 1) % order.len()]
    } else {
        hosts - 1
    }
}

/// The programs a host needs for a run: Redis's, and for cuts between
/// hosts `iptables` (the rules) and `bash` (the probe that shows a cut).
/// With each, the Debian package that has it.
pub fn needed_programs(sentinel: bool, cuts: bool) -> Vec<(&'static str, &'static str)> {
    let mut programs = vec![
        ("redis-server", "redis-server"),
        ("setsid", "util-linux"),
        ("ps", "procps"),
    ];
    if sentinel {
        programs.push(("redis-sentinel", "redis-sentinel"));
    }
    if cuts {
        programs.push(("iptables", "iptables"));
        programs.push(("bash", "bash"));
    }
    programs
}

/// `s` as one word of POSIX shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell that runs one node's process on its host and reports on it,
/// one line each, on its stdout: `pid N` once started, `exit S` once it
/// ended (`S` as `wait` gives it: above 128, killed by signal S − 128).
/// The process leads a session of its own (`setsid`), so a kill or a pause
/// of its group reaches whatever it starts. Its stdin is the harness's
/// hold on it: a line `kill` kills the group, and so does the end of the
/// input, when the harness (or its connection) is gone. (The watcher reads
/// it through fd 3: `sh` gives a command run with `&` `/dev/null` for
/// stdin.) It removes `forget` first: what a restart starts without.
pub fn wrapper(
    dir: &str,
    program: &str,
    args: &[String],
    env: &[(String, String)],
    forget: &[String],
) -> String {
    let mut command = String::new();
    for (k, v) in env {
        command.push_str(&format!("{k}={} ", quote(v)));
    }
    command.push_str(&format!("exec {}", quote(program)));
    for a in args {
        command.push(' ');
        command.push_str(&quote(a));
    }
    let forget: Vec<String> = forget.iter().map(|f| quote(f)).collect();
    let forget = match forget.is_empty() {
        true => String::new(),
        false => format!("rm -rf {}\n", forget.join(" ")),
    };
    format!(
        "cd {dir} || exit 97\n\
         {forget}\
         exec 3<&0\n\
         setsid sh -c {inner} </dev/null >>output.log 2>&1 3<&- &\n\
         pid=$!\n\
         echo \"pid $pid\"\n\
         ( while read -r line; do [ \"$line\" = kill ] && break; done; kill -KILL -$pid 2>/dev/null ) <&3 >/dev/null 2>&1 &\n\
         watcher=$!\n\
         wait $pid\n\
         status=$?\n\
         kill $watcher 2>/dev/null\n\
         echo \"exit $status\"\n",
        dir = quote(dir),
        inner = quote(&command),
    )
}

/// A line the wrapper said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    Pid(u32),
    /// How it ended, worded as `std`'s `ExitStatus` is.
    Exit(String),
}

pub fn parse_said(line: &str) -> Option<Said> {
    let (word, n) = line.trim().split_once(' ')?;
    let n: u32 = n.parse().ok()?;
    match word {
        "pid" => Some(Said::Pid(n)),
        "exit" if n > 128 => Some(Said::Exit(format!("signal: {}", n - 128))),
        "exit" => Some(Said::Exit(format!("exit status: {n}"))),
        _ => None,
    }
}

/// The files of an answer made of `name size` lines, each followed by the
/// file's `size` bytes (pure); what does not parse ends the list.
pub fn unpack(mut bytes: &[u8]) -> Vec<(String, &[u8])> {
    let mut files = Vec::new();
    while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        let Some((name, size)) = head.rsplit_once(' ') else {
            break;
        };
        let Ok(size) = size.trim().parse::<usize>() else {
            break;
        };
        let rest = &bytes[end + 1..];
        if rest.len() < size || name.contains('/') {
            break;
        }
        files.push((name.to_string(), &rest[..size]));
        bytes = &rest[size..];
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_as_ssh_takes_them_and_odd_ones_are_refused() {
        let d = Destination::parse("root@10.213.0.11").unwrap();
        assert_eq!(
            (d.user.as_deref(), d.host.as_str(), d.port),
            (Some("root"), "10.213.0.11", None)
        );
        let d = Destination::parse("n1:2222").unwrap();
        assert_eq!((d.user.as_deref(), d.port), (None, Some(2222)));
        assert_eq!(d.to_string(), "n1:2222");
        for bad in [
            "",
            "root@",
            "@n1",
            "n1:",
            "n1:0",
            "n1:x",
            "-oProxyCommand=x",
            "a b",
            "n1;rm",
        ] {
            let why = Destination::parse(bad).unwrap_err();
            assert!(why.contains("[user@]host[:port]"), "{bad}: {why}");
        }
        let twice = parse_nodes("n1,n2,n1").unwrap_err();
        assert!(twice.contains("n1 twice"), "{twice}");
        assert_eq!(parse_nodes("a, b").unwrap().len(), 2);
    }

    #[test]
    fn sentinels_take_the_spare_hosts_then_the_replicas_and_the_primarys_last() {
        let on = |name| host_of(name, 5, 3);
        assert_eq!([on("n1"), on("n2"), on("n3"), on("n5")], [0, 1, 2, 4]);
        assert_eq!([on("s1"), on("s2"), on("s3")], [3, 4, 1]);
        let on3 = |name| host_of(name, 3, 3);
        assert_eq!([on3("s1"), on3("s2"), on3("s3")], [1, 2, 0]);
        assert_eq!(on("storage"), 4);
        assert_eq!(host_of("n4", 3, 3), 0, "round the list");
        assert_eq!(host_of("storage", 1, 1), 0);
    }

    #[test]
    fn the_wrapper_quotes_every_word_and_reports_its_process() {
        let args = ["--bind".to_string(), "it's".to_string()];
        let forget = ["/tmp/x y/dump.rdb".to_string()];
        let script = wrapper("/tmp/x y", "redis-server", &args, &[], &forget);
        assert!(script.starts_with("cd '/tmp/x y' || exit 97\n"), "{script}");
        let first = "\nrm -rf '/tmp/x y/dump.rdb'\nexec 3<&0\n";
        assert!(
            script.contains(first),
            "what a restart forgets goes first: {script}"
        );
        assert!(
            script.contains(r"'\''"),
            "an inner quote is escaped: {script}"
        );
        assert_eq!(parse_said("pid 42"), Some(Said::Pid(42)));
        assert_eq!(parse_said("exit 137"), Some(Said::Exit("signal: 9".into())));
        assert_eq!(
            parse_said("exit 1"),
            Some(Said::Exit("exit status: 1".into()))
        );
        assert_eq!(parse_said("hello"), None);
    }

    #[test]
    fn fetched_files_unpack_by_their_sizes_and_a_torn_answer_stops() {
        let answer = b"redis.log 6\nab\ncd\noutput.log 0\nsentinel.conf 3\nxyz";
        let files = unpack(answer);
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["redis.log", "output.log", "sentinel.conf"]);
        assert_eq!(files[0].1, b"ab\ncd\n");
        assert_eq!(unpack(b"redis.log 10\nshort").len(), 0);
        assert_eq!(
            unpack(b"../x 1\na").len(),
            0,
            "a name with a slash is refused"
        );
    }
}
