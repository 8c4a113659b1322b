//! Making a lab and taking it down: `ip` for the bridge, namespaces and
//! links, `ssh-keygen` for the keys, one `sshd` per host. Every command runs
//! under a deadline; `up` that fails half-way takes down what it made.

use super::{clashing_route, home, key, sshd_config, Host, Lab, BRIDGE, BRIDGE_ADDR, SUBNET};
use crate::error::{doing, Error, Result};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long one `ip`, `ssh-keygen` or `sshd` start may take.
const COMMAND_WITHIN: Duration = Duration::from_secs(10);
/// How long a host's `sshd` has to answer on port 22.
const SSHD_READY_WITHIN: Duration = Duration::from_secs(10);
const RUN_SSHD: &str = "/run/sshd";

/// Makes a lab of `n` hosts and returns it: every host's `sshd` answers.
pub fn up(n: usize, bare: &[String]) -> Result<Lab> {
    let mut lab = Lab::plan(n, bare).map_err(Error::Usage)?;
    let sshd = programs()?;
    refuse_unless_free()?;
    let home = home();
    std::fs::create_dir_all(&home).map_err(doing(format!("creating {}", home.display())))?;
    lab.made_run_sshd = !Path::new(RUN_SSHD).exists();
    // The record first: `down` then finds whatever a failed `up` left.
    write_record(&home, &lab)?;
    let made = make(&lab, &home, &sshd);
    if let Err(e) = made {
        let _ = down();
        return Err(e);
    }
    Ok(lab)
}

/// What `down` found and took apart.
#[derive(Debug, PartialEq, Eq)]
pub enum Down {
    /// The hosts of the lab that was up.
    Removed(Vec<String>),
    NoneWasUp,
}

/// Takes down the lab that is up: each host's `sshd` (by the pid it wrote,
/// if that process is still an `sshd`), its namespace and link, the bridge,
/// `/run/sshd` if `up` made it and no `sshd` is left, and the lab's home.
pub fn down() -> Result<Down> {
    let home = home();
    let Some(lab) = read_record(&home)? else {
        return Ok(Down::NoneWasUp);
    };
    let mut left = Vec::new();
    for host in &lab.hosts {
        stop_sshd(host, &home);
        if netns_exists(&host.netns) {
            if let Err(e) = ip(&["netns", "del", &host.netns]) {
                left.push(e.to_string());
            }
        }
        // The namespace, and its end of the link with it, goes once its
        // last process has: deleting this end takes both now.
        if link_exists(&host.veth) {
            let deleted = ip(&["link", "del", &host.veth]);
            // Gone meanwhile with its namespace is gone all the same.
            if let (Err(e), true) = (deleted, link_exists(&host.veth)) {
                left.push(e.to_string());
            }
        }
    }
    if link_exists(BRIDGE) {
        if let Err(e) = ip(&["link", "del", BRIDGE]) {
            left.push(e.to_string());
        }
    }
    if lab.made_run_sshd && !any_sshd() {
        let _ = std::fs::remove_dir(RUN_SSHD);
    }
    if !left.is_empty() {
        return Err(Error::Usage(format!(
            "lab down left: {} (the record stays in {})",
            left.join("; "),
            home.display()
        )));
    }
    std::fs::remove_dir_all(&home).map_err(doing(format!("removing {}", home.display())))?;
    Ok(Down::Removed(
        lab.hosts.into_iter().map(|h| h.name).collect(),
    ))
}

fn make(lab: &Lab, home: &Path, sshd: &Path) -> Result<()> {
    let bridge_addr = format!("{BRIDGE_ADDR}/{}", SUBNET.1);
    ip(&["link", "add", BRIDGE, "type", "bridge"])?;
    ip(&["addr", "add", &bridge_addr, "dev", BRIDGE])?;
    ip(&["link", "set", BRIDGE, "up"])?;
    let key = key(home);
    keygen(&key, "lockstorm-lab")?;
    let public = key.with_extension("pub");
    std::fs::copy(&public, home.join("authorized_keys"))
        .map_err(doing(format!("copying {}", public.display())))?;
    if lab.made_run_sshd {
        std::fs::create_dir_all(RUN_SSHD).map_err(doing(format!("creating {RUN_SSHD}")))?;
    }
    for host in &lab.hosts {
        make_host(host, lab.is_bare(host), home, sshd)?;
    }
    for host in &lab.hosts {
        await_sshd(host, home)?;
    }
    write_known_hosts(lab, home)?;
    Ok(())
}

fn make_host(host: &Host, bare: bool, home: &Path, sshd: &Path) -> Result<()> {
    let ns = host.netns.as_str();
    let addr = format!("{}/{}", host.addr, SUBNET.1);
    ip(&["netns", "add", ns])?;
    ip(&[
        "link", "add", &host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
    ])?;
    ip(&["link", "set", &host.veth, "master", BRIDGE, "up"])?;
    ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"])?;
    ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    let dir = host.dir(home);
    std::fs::create_dir_all(&dir).map_err(doing(format!("creating {}", dir.display())))?;
    keygen(&dir.join("host_key"), &host.name)?;
    let config = dir.join("sshd_config");
    std::fs::write(&config, sshd_config(host, home))
        .map_err(doing(format!("writing {}", config.display())))?;
    let log = dir.join("sshd.log");
    // Its own PID namespace too, so a host's PIDs are not this machine's
    // (a fault that signalled a host's PID here would miss): `sshd` is its
    // PID 1, in the foreground under `unshare`, which kills it, and with
    // it every process of the host, when `down` kills `unshare`.
    let mut start = Command::new("ip");
    start.args(["netns", "exec", ns]).args([
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ]);
    // Its own mount namespace (`--mount-proc` makes one): what is mounted
    // there is this host's alone.
    let setup = match bare {
        true => format!("{OWN_TMP}; {HIDE_REDIS}; exec \"$@\""),
        false => format!("{OWN_TMP}; exec \"$@\""),
    };
    start.args(["sh", "-c", &setup, "sh"]);
    start
        .arg(sshd)
        .args(["-D", "-f"])
        .arg(&config)
        .arg("-E")
        .arg(&log)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // Its own group: a Ctrl-C at `lab up`'s terminal does not reach it.
    std::os::unix::process::CommandExt::process_group(&mut start, 0);
    let holder = start
        .spawn()
        .map_err(doing(format!("starting sshd on {}", host.name)))?;
    let pidfile = holder_pid(host, home);
    std::fs::write(&pidfile, holder.id().to_string())
        .map_err(doing(format!("writing {}", pidfile.display())))
}

/// Where `up` notes the pid of the `unshare` that holds `host`'s processes.
fn holder_pid(host: &Host, home: &Path) -> PathBuf {
    host.dir(home).join("holder.pid")
}

/// A `/tmp` of the host's own.
const OWN_TMP: &str = "mount -t tmpfs -o size=512m,mode=1777 lockstorm-lab /tmp";

/// Hides Redis's programs: each covered by `/dev/null`, which no one can
/// execute.
const HIDE_REDIS: &str = "for p in redis-server redis-sentinel redis-cli; do f=$(command -v \"$p\") && mount --bind /dev/null \"$(readlink -f \"$f\")\" || true; done";

/// The lab's hosts' keys, for `ssh`'s `UserKnownHostsFile`: a run that
/// logs in to them accepts those keys and no others.
fn write_known_hosts(lab: &Lab, home: &Path) -> Result<()> {
    let mut lines = String::new();
    for host in &lab.hosts {
        let public = host.dir(home).join("host_key.pub");
        let key = std::fs::read_to_string(&public)
            .map_err(doing(format!("reading {}", public.display())))?;
        let key: Vec<&str> = key.split_whitespace().take(2).collect();
        lines.push_str(&format!("{} {}\n", host.addr, key.join(" ")));
    }
    let path = super::known_hosts(home);
    std::fs::write(&path, lines).map_err(doing(format!("writing {}", path.display())))
}

/// Waits until `host`'s `sshd` accepts a connection on port 22.
fn await_sshd(host: &Host, home: &Path) -> Result<()> {
    let addr = SocketAddr::from((host.addr, 22));
    let deadline = Instant::now() + SSHD_READY_WITHIN;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::Node {
        name: host.name.clone(),
        message: format!("sshd did not answer on {addr} within {SSHD_READY_WITHIN:?}"),
        log: host.dir(home).join("sshd.log"),
    })
}

/// SIGKILL to the `unshare` whose pid `host`'s folder holds, if that pid
/// is still an `unshare` (a pid reused by another program is left alone):
/// it kills the host's PID 1, its `sshd`, and the kernel every other
/// process of the host.
fn stop_sshd(host: &Host, home: &Path) {
    let Some(pid) = std::fs::read_to_string(holder_pid(host, home))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    else {
        return;
    };
    if comm(pid) == "unshare" {
        let _ = process::kill_now(pid);
        process::wait_gone(&[pid], Duration::from_secs(5));
    }
}

/// Whether any `sshd` runs on this machine (the lab's are gone by then).
fn any_sshd() -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| comm(pid) == "sshd" && process::state(pid) != Some('Z'))
    })
}

/// The command name of `pid`, empty once it is gone.
fn comm(pid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    comm.trim().to_string()
}

/// `sshd`'s path; the tools a lab needs, each named with its package if
/// missing; and root, which namespaces and a bridge need.
fn programs() -> Result<PathBuf> {
    let on_path = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    };
    for (program, package) in [("ip", "iproute2"), ("ssh-keygen", "openssh-client")] {
        if on_path(program).is_none() {
            return Err(Error::Usage(format!(
                "lab up needs {program}: install it with `apt-get install -y {package}`"
            )));
        }
    }
    let sshd = on_path("sshd").or_else(|| {
        let debian = PathBuf::from("/usr/sbin/sshd");
        debian.is_file().then_some(debian)
    });
    let sshd = sshd.ok_or_else(|| {
        Error::Usage(
            "lab up needs sshd (not on PATH, nor /usr/sbin/sshd): install it with `apt-get install -y openssh-server`".into(),
        )
    })?;
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::Usage(
            "lab up makes network namespaces and a bridge: run it as root".into(),
        ));
    }
    Ok(sshd)
}

/// A lab already up, or the lab's names or subnet taken on this machine,
/// is one line saying which.
fn refuse_unless_free() -> Result<()> {
    if read_record(&home())?.is_some() {
        return Err(Error::Usage(
            "a lab is up already: `lockstorm lab down` first".into(),
        ));
    }
    if link_exists(BRIDGE) {
        return Err(Error::Usage(format!(
            "an interface named {BRIDGE} exists and no lab of lockstorm's made it: remove it (`ip link del {BRIDGE}`) or leave the lab down"
        )));
    }
    let routes = output(&["-4", "route"])?;
    if let Some(route) = clashing_route(&routes) {
        return Err(Error::Usage(format!(
            "this machine routes part of the lab's {}/{} ({route}): the lab needs it free",
            SUBNET.0, SUBNET.1
        )));
    }
    Ok(())
}

fn record_path(home: &Path) -> PathBuf {
    home.join("lab.json")
}

fn write_record(home: &Path, lab: &Lab) -> Result<()> {
    let path = record_path(home);
    let text = serde_json::to_string_pretty(lab).expect("a lab serializes");
    std::fs::write(&path, text).map_err(doing(format!("writing {}", path.display())))
}

/// The lab that is up, as its record says (`None`: no lab is up).
pub fn read_record(home: &Path) -> Result<Option<Lab>> {
    let path = record_path(home);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(doing(format!("reading {}", path.display()))(e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Error::Usage(format!(
            "{} is not a lab's record ({e}): remove it after taking down what it names",
            path.display()
        ))
    })
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn keygen(path: &Path, comment: &str) -> Result<()> {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path);
    checked(&mut cmd, &format!("making the key {}", path.display())).map(drop)
}

fn ip(args: &[&str]) -> Result<()> {
    output(args).map(drop)
}

fn output(args: &[&str]) -> Result<String> {
    checked(
        Command::new("ip").args(args),
        &format!("ip {}", args.join(" ")),
    )
}

/// Runs `cmd` under [`COMMAND_WITHIN`] and returns its stdout; a failure
/// says `what` and the command's own words.
fn checked(cmd: &mut Command, what: &str) -> Result<String> {
    let out = process::output_within(cmd, COMMAND_WITHIN).map_err(doing(what.to_string()))?;
    let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_string();
    match out.status.success() {
        true => Ok(said(&out.stdout)),
        false => Err(Error::Usage(format!(
            "{what} failed: {}",
            said(&out.stderr)
        ))),
    }
}
