//! The clock nemesis's node side: a project-owned LD_PRELOAD time shim
//! (`shim/timeshim.c`, built by `build.rs` and embedded here) and the
//! memory-mapped control file through which the harness moves a node's wall
//! clock while the node runs.
//!
//! Only the node's `CLOCK_REALTIME`-derived time moves (`clock_gettime` with
//! `CLOCK_REALTIME`/`_COARSE`/`_ALARM`/`CLOCK_TAI`, `gettimeofday`, `time`,
//! `timespec_get`); `CLOCK_MONOTONIC` and the history clock never do (see
//! ARCHITECTURE.md, `workloads`).
//!
//! Usage: [`install_shim`] once, one [`TimeControl`] per
//! node created *before* the node starts, [`env_for`] added to the node's
//! environment and [`REDIS_NODE_ARGS`] to its arguments, then
//! [`TimeControl::set`] to jump or drift its clock.
//!
//! # Control file layout (version 1, 64 bytes, little-endian)
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0  | u32 | magic `0x54534B4C` (bytes `"LKST"`) |
//! | 4  | u32 | version `1` |
//! | 8  | u64 | seqlock counter, odd while the writer updates the fields below |
//! | 16 | i64 | `offset_ns` |
//! | 24 | f64 | `rate` (1.0 = normal speed) |
//! | 32 | i64 | `anchor_real_ns`: real `CLOCK_REALTIME` at which `rate` took effect |
//! | 40 | —   | reserved, zero |
//!
//! shifted = real + offset_ns + (real − anchor_real_ns)·(rate − 1).
//! A reader retries while the counter is odd or changed during its read.

// The control page is shared memory the node's shim also maps: reading and
// writing it, and the raw clock calls in the tests, are unsafe by nature.
#![allow(unsafe_code)]

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::ffi::c_void;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::num::NonZeroUsize;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The shim, compiled for this host by `build.rs`.
pub const TIME_SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libtimeshim.so"));
/// The file name [`install_shim`] gives the shim (in a folder named by its hash).
pub const SHIM_FILE_NAME: &str = "libtimeshim.so";
/// The environment variable through which the shim finds its control file.
pub const CONTROL_ENV: &str = "LOCKSTORM_TIME_CONTROL";
/// Arguments every `redis-server` (or sentinel) run under the shim should get.
/// jemalloc's background thread computes absolute `pthread_cond_timedwait`
/// deadlines from `gettimeofday` (shifted) while the kernel waits on the real
/// `CLOCK_REALTIME`, so after a backward jump it spins a core until real time
/// catches up (measured: ~90% of a core at −30 s). Without that thread the
/// node has no such wait left.
pub const REDIS_NODE_ARGS: [&str; 2] = ["--jemalloc-bg-thread", "no"];
/// Set (to anything) in a node's environment, makes the shim read the clocks
/// through system calls instead of the vDSO (for debugging; ~10× slower).
pub const NO_VDSO_ENV: &str = "LOCKSTORM_TIME_NO_VDSO";
/// Size of the control file in bytes.
pub const CONTROL_LEN: usize = 64;
/// First four bytes of a control file (`"LKST"` read as a little-endian u32).
pub const CONTROL_MAGIC: u32 = 0x5453_4B4C;
/// Layout version written at byte 4.
pub const CONTROL_VERSION: u32 = 1;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 4;
const SEQ_AT: usize = 8;
const OFFSET_AT: usize = 16;
const RATE_AT: usize = 24;
const ANCHOR_AT: usize = 32;

// The mapped file is read and written with native-endian atomics; the layout
// is little-endian, so they agree only on little-endian hosts.
const _: () = assert!(cfg!(target_endian = "little"));

/// A node clock's skew: what the control file holds besides its header and
/// sequence counter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Skew {
    pub offset_ns: i64,
    /// Speed of the node's clock relative to real time; 1.0 = normal.
    pub rate: f64,
    /// Real `CLOCK_REALTIME` (ns since the epoch) at which `rate` took effect.
    pub anchor_real_ns: i64,
}

impl Skew {
    /// No skew at all.
    pub const NONE: Skew = Skew {
        offset_ns: 0,
        rate: 1.0,
        anchor_real_ns: 0,
    };

    /// What the shim adds to the real time `real_ns`; the same arithmetic as
    /// `shift_ns` in `timeshim.c`.
    pub fn shift_ns(&self, real_ns: i64) -> i64 {
        let drift = if self.rate.is_finite() && self.rate != 1.0 {
            (real_ns.wrapping_sub(self.anchor_real_ns) as f64 * (self.rate - 1.0)) as i64
        } else {
            0
        };
        self.offset_ns.wrapping_add(drift)
    }

    /// The node's time when the real time is `real_ns`.
    pub fn apply(&self, real_ns: i64) -> i64 {
        real_ns.wrapping_add(self.shift_ns(real_ns))
    }
}

/// The control file's 64 bytes for sequence counter `seq` and `skew`.
pub fn encode(seq: u64, skew: &Skew) -> [u8; CONTROL_LEN] {
    let mut b = [0u8; CONTROL_LEN];
    b[MAGIC_AT..MAGIC_AT + 4].copy_from_slice(&CONTROL_MAGIC.to_le_bytes());
    b[VERSION_AT..VERSION_AT + 4].copy_from_slice(&CONTROL_VERSION.to_le_bytes());
    b[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_le_bytes());
    b[OFFSET_AT..OFFSET_AT + 8].copy_from_slice(&skew.offset_ns.to_le_bytes());
    b[RATE_AT..RATE_AT + 8].copy_from_slice(&skew.rate.to_bits().to_le_bytes());
    b[ANCHOR_AT..ANCHOR_AT + 8].copy_from_slice(&skew.anchor_real_ns.to_le_bytes());
    b
}

/// Parses a control file's bytes into its sequence counter and skew; `None`
/// when they are too short or carry another magic or version (the shim then
/// leaves time alone). An odd counter means a write was in progress.
pub fn decode(bytes: &[u8]) -> Option<(u64, Skew)> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    if bytes.len() < CONTROL_LEN
        || u32_at(MAGIC_AT) != CONTROL_MAGIC
        || u32_at(VERSION_AT) != CONTROL_VERSION
    {
        return None;
    }
    let skew = Skew {
        offset_ns: u64_at(OFFSET_AT) as i64,
        rate: f64::from_bits(u64_at(RATE_AT)),
        anchor_real_ns: u64_at(ANCHOR_AT) as i64,
    };
    Some((u64_at(SEQ_AT), skew))
}

/// Real `CLOCK_REALTIME` in ns since the epoch (this process never has the
/// shim loaded).
pub fn real_now_ns() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is before 1970");
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Installs the shim where `LD_PRELOAD` can name it and returns its path:
/// `<private folder>/<content hash>/libtimeshim.so`. `LD_PRELOAD` splits on
/// spaces and colons and expands `$` tokens, with no way to escape them, so
/// the shim never lives in the results folder (whose path the user chooses)
/// but in [`private_dir`]; an unsafe path is refused, never handed on.
pub fn install_shim() -> io::Result<PathBuf> {
    install_shim_in(&private_dir()?)
}

/// Writes the shim into `dir/<content hash>/` as [`SHIM_FILE_NAME`] unless an
/// identical copy is already there. The hash keeps two lockstorm builds from
/// replacing each other's shim; the file is replaced by an atomic rename,
/// never rewritten in place, so processes that have a copy mapped keep running.
fn install_shim_in(dir: &Path) -> io::Result<PathBuf> {
    let unsafe_path = |path: &Path| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the time shim cannot be preloaded from {}: LD_PRELOAD splits paths on spaces and colons and expands $",
                path.display()
            ),
        )
    };
    let home = std::path::absolute(dir)?.join(format!("{:016x}", shim_digest()));
    if !preload_safe(&home.join(SHIM_FILE_NAME)) {
        return Err(unsafe_path(&home.join(SHIM_FILE_NAME)));
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&home)?;
    // The path without symlinks, as the node's memory map will show it.
    let path = home.canonicalize()?.join(SHIM_FILE_NAME);
    if !preload_safe(&path) {
        return Err(unsafe_path(&path));
    }
    if fs::read(&path).is_ok_and(|have| have == TIME_SHIM) {
        return Ok(path);
    }
    write_atomically(&path, TIME_SHIM)?;
    Ok(path)
}

/// Names the shim's content; stable for one build, which is all it must be.
fn shim_digest() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    TIME_SHIM.hash(&mut h);
    h.finish()
}

/// Whether the dynamic loader reads `path` in `LD_PRELOAD` as this one path.
fn preload_safe(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.is_absolute()
        && !path
            .as_os_str()
            .as_bytes()
            .iter()
            .any(|b| b" :$\t\n".contains(b))
}

/// A folder only this user can write: `$TMPDIR/lockstorm-<uid>`, or
/// `/tmp/lockstorm-<uid>` when `$TMPDIR` is not [`preload_safe`]. An existing
/// folder of that name that is not ours alone is refused: whoever can write
/// it can replace the library every node loads.
pub fn private_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let tmp = std::env::temp_dir();
    let base = match preload_safe(&tmp) {
        true => tmp,
        false => PathBuf::from("/tmp"),
    };
    let dir = base.join(format!("lockstorm-{uid}"));
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a folder only this user can write (for the time shim): remove it",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

/// Writes `bytes` to a fresh file beside `path` and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// The environment that makes a node's process load the shim and follow
/// `control`: `LD_PRELOAD` and [`CONTROL_ENV`]. Both paths are made absolute
/// (nodes run in their own working directories). `shim` must be a path
/// [`install_shim`] returned: `LD_PRELOAD` cannot carry any other safely.
pub fn env_for(control: &Path, shim: &Path) -> [(String, String); 2] {
    let abs = |p: &Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .to_string_lossy()
            .into_owned()
    };
    [
        ("LD_PRELOAD".to_string(), abs(shim)),
        (CONTROL_ENV.to_string(), abs(control)),
    ]
}

/// The harness's handle on one node's control file: a shared read-write
/// mapping written with the seqlock protocol. Create it before the node
/// starts; a process that started before the file existed (or that has an
/// older file of the same name mapped) does not follow it. One `TimeControl`
/// per file: writers in other processes are not coordinated with.
pub struct TimeControl {
    path: PathBuf,
    map: NonNull<c_void>,
    writer: Mutex<()>,
}

// SAFETY: the mapping is owned by the value and only accessed through atomics;
// writers are serialised by `writer`.
unsafe impl Send for TimeControl {}
// SAFETY: as for `Send`: shared access goes through atomics and `writer`.
unsafe impl Sync for TimeControl {}

impl TimeControl {
    /// Creates (or atomically replaces) the control file at `path` with no
    /// skew and maps it.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        write_atomically(&path, &encode(0, &Skew::NONE))?;
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let map = Self::map(&file)?;
        Ok(TimeControl {
            path,
            map,
            writer: Mutex::new(()),
        })
    }

    /// Maps the control file at `path` that [`TimeControl::create`] made:
    /// the reader that serves a node's clock itself (a Go node, which the
    /// shim cannot reach) reads it as the shim does.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let map = Self::map(&file)?;
        let control = TimeControl {
            path,
            map,
            writer: Mutex::new(()),
        };
        match control.u32_at(MAGIC_AT).load(Ordering::Acquire) == CONTROL_MAGIC {
            true => Ok(control),
            false => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a time control file", control.path.display()),
            )),
        }
    }

    fn map(file: &File) -> io::Result<NonNull<c_void>> {
        let len = NonZeroUsize::new(CONTROL_LEN).unwrap();
        // SAFETY: a fresh shared mapping of a file we just wrote 64 bytes to;
        // it is only ever accessed through atomics.
        unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                file,
                0,
            )
        }
        .map_err(io::Error::from)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn u32_at(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is a 4-aligned offset inside the page-aligned 64-byte
        // mapping, which lives as long as `self`.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().cast::<u8>().add(at).cast()) }
    }

    fn u64_at(&self, at: usize) -> &AtomicU64 {
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().cast::<u8>().add(at).cast()) }
    }

    /// Sets the node's clock to real + `offset_ns`, running at `rate` times
    /// real speed from now on (the anchor is the current real time, so the
    /// clock reads exactly real + `offset_ns` at this instant). `rate` must be
    /// finite and positive.
    pub fn set(&self, offset_ns: i64, rate: f64) -> io::Result<()> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("clock rate must be finite and positive, got {rate}"),
            ));
        }
        self.write(&Skew {
            offset_ns,
            rate,
            anchor_real_ns: real_now_ns(),
        });
        Ok(())
    }

    /// Changes the rate without a jump: the offset accumulated so far is kept.
    pub fn set_rate(&self, rate: f64) -> io::Result<()> {
        let _held = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if !(rate.is_finite() && rate > 0.0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("clock rate must be finite and positive, got {rate}"),
            ));
        }
        let now = real_now_ns();
        let skew = Skew {
            offset_ns: self.get().shift_ns(now),
            rate,
            anchor_real_ns: now,
        };
        self.write_locked(&skew);
        Ok(())
    }

    /// Back to real time.
    pub fn reset(&self) {
        self.write(&Skew::NONE);
    }

    /// The stored offset (without the drift a rate ≠ 1 has accumulated since).
    pub fn offset_ns(&self) -> i64 {
        self.get().offset_ns
    }

    /// The node's clock minus real time right now, drift included.
    pub fn effective_offset_ns(&self) -> i64 {
        self.get().shift_ns(real_now_ns())
    }

    pub fn rate(&self) -> f64 {
        self.get().rate
    }

    /// The current skew, read with the same seqlock protocol as the shim.
    pub fn get(&self) -> Skew {
        let seq = self.u64_at(SEQ_AT);
        loop {
            let s1 = seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let skew = Skew {
                offset_ns: self.u64_at(OFFSET_AT).load(Ordering::Relaxed) as i64,
                rate: f64::from_bits(self.u64_at(RATE_AT).load(Ordering::Relaxed)),
                anchor_real_ns: self.u64_at(ANCHOR_AT).load(Ordering::Relaxed) as i64,
            };
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 {
                return skew;
            }
        }
    }

    /// The sequence counter (even when no write is in progress).
    pub fn seq(&self) -> u64 {
        self.u64_at(SEQ_AT).load(Ordering::Acquire)
    }

    fn write(&self, skew: &Skew) {
        let _held = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.write_locked(skew);
    }

    /// The seqlock writer; the caller holds `self.writer`.
    fn write_locked(&self, skew: &Skew) {
        debug_assert_eq!(self.u32_at(MAGIC_AT).load(Ordering::Relaxed), CONTROL_MAGIC);
        let seq = self.u64_at(SEQ_AT);
        // Even by construction; `& !1` recovers should it ever not be.
        let s = seq.load(Ordering::Relaxed) & !1;
        seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.u64_at(OFFSET_AT)
            .store(skew.offset_ns as u64, Ordering::Relaxed);
        self.u64_at(RATE_AT)
            .store(skew.rate.to_bits(), Ordering::Relaxed);
        self.u64_at(ANCHOR_AT)
            .store(skew.anchor_real_ns as u64, Ordering::Relaxed);
        seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

impl Drop for TimeControl {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `create` with this length and is
        // not referenced after this point.
        let _ = unsafe { munmap(self.map, CONTROL_LEN) };
    }
}

impl std::fmt::Debug for TimeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeControl")
            .field("path", &self.path)
            .field("skew", &self.get())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    const SEC: i64 = 1_000_000_000;
    const REDIS: &str = "/usr/bin/redis-server";

    #[test]
    fn encode_decode_round_trip() {
        let skew = Skew {
            offset_ns: -20 * SEC - 7,
            rate: 2.5,
            anchor_real_ns: 1_700_000_000 * SEC + 123,
        };
        let bytes = encode(42, &skew);
        assert_eq!(bytes.len(), CONTROL_LEN);
        assert_eq!(&bytes[0..4], b"LKST");
        assert_eq!(bytes[4..8], 1u32.to_le_bytes());
        assert_eq!(bytes[8..16], 42u64.to_le_bytes());
        assert_eq!(bytes[16..24], skew.offset_ns.to_le_bytes());
        assert_eq!(bytes[24..32], 2.5f64.to_le_bytes());
        assert_eq!(bytes[32..40], skew.anchor_real_ns.to_le_bytes());
        assert!(bytes[40..].iter().all(|&b| b == 0));
        assert_eq!(decode(&bytes), Some((42, skew)));
        // An odd counter (write in progress) still decodes; readers retry on it.
        assert_eq!(decode(&encode(7, &Skew::NONE)), Some((7, Skew::NONE)));
    }

    #[test]
    fn decode_rejects_foreign_bytes() {
        let good = encode(0, &Skew::NONE);
        assert_eq!(decode(&good[..CONTROL_LEN - 1]), None);
        assert_eq!(decode(&[0u8; CONTROL_LEN]), None);
        let mut bad_magic = good;
        bad_magic[0] ^= 1;
        assert_eq!(decode(&bad_magic), None);
        let mut bad_version = good;
        bad_version[4] = 2;
        assert_eq!(decode(&bad_version), None);
    }

    #[test]
    fn shift_arithmetic() {
        let anchor = 1_000 * SEC;
        let jump = Skew {
            offset_ns: 20 * SEC,
            rate: 1.0,
            anchor_real_ns: anchor,
        };
        assert_eq!(jump.shift_ns(anchor + 5 * SEC), 20 * SEC);
        assert_eq!(jump.apply(anchor + 5 * SEC), anchor + 25 * SEC);
        let fast = Skew {
            offset_ns: -SEC,
            rate: 2.0,
            anchor_real_ns: anchor,
        };
        assert_eq!(fast.apply(anchor), anchor - SEC);
        // Ten real seconds after the anchor the clock has moved twenty.
        assert_eq!(fast.apply(anchor + 10 * SEC), anchor + 19 * SEC);
        let slow = Skew { rate: 0.5, ..fast };
        assert_eq!(slow.apply(anchor + 10 * SEC), anchor + 4 * SEC);
        // Non-finite rates are ignored, as in the shim.
        let nan = Skew {
            rate: f64::NAN,
            ..jump
        };
        assert_eq!(nan.shift_ns(anchor + SEC), 20 * SEC);
    }

    #[test]
    fn time_control_writes_the_file_with_the_seqlock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.clock");
        let ctl = TimeControl::create(&path).unwrap();
        assert_eq!(ctl.path(), path);
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), CONTROL_LEN);
        assert_eq!(decode(&bytes), Some((0, Skew::NONE)));

        let before = real_now_ns();
        ctl.set(20 * SEC, 1.0).unwrap();
        let after = real_now_ns();
        let (seq, skew) = decode(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(seq, 2);
        assert_eq!(skew.offset_ns, 20 * SEC);
        assert_eq!(skew.rate, 1.0);
        assert!((before..=after).contains(&skew.anchor_real_ns));
        assert_eq!(ctl.offset_ns(), 20 * SEC);
        assert_eq!(ctl.get(), skew);

        assert!(ctl.set(0, 0.0).is_err());
        assert!(ctl.set(0, f64::NAN).is_err());
        assert!(ctl.set_rate(-1.0).is_err());
        assert_eq!(ctl.seq(), 2, "a refused set writes nothing");

        // A rate change keeps the offset accumulated so far.
        ctl.set(5 * SEC, 3.0).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let drifted = ctl.effective_offset_ns();
        assert!(drifted >= 5 * SEC + 100_000_000, "{drifted}");
        ctl.set_rate(1.0).unwrap();
        assert_eq!(ctl.rate(), 1.0);
        let kept = ctl.offset_ns();
        assert!((drifted..drifted + SEC / 10).contains(&kept), "{kept}");
        assert_eq!(ctl.seq(), 6);
        ctl.reset();
        assert_eq!(ctl.get(), Skew::NONE);

        // Creating again replaces the file (fresh inode) rather than truncating it.
        drop(ctl);
        let again = TimeControl::create(&path).unwrap();
        assert_eq!(again.get(), Skew::NONE);
    }

    #[test]
    fn concurrent_readers_never_see_a_torn_skew() {
        let dir = tempfile::tempdir().unwrap();
        let ctl = TimeControl::create(dir.path().join("c")).unwrap();
        // The file starts as `Skew::NONE`, which breaks the invariant below:
        // write once before the reader starts so it only ever sees our writes.
        ctl.set(1000, 1.0).unwrap();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                for _ in 0..200_000 {
                    let k = ctl.get();
                    // Every write below keeps offset == rate * 1000 ns.
                    assert_eq!(k.offset_ns as f64, k.rate * 1000.0, "{k:?}");
                }
            });
            let mut i = 1u32;
            while !reader.is_finished() {
                ctl.set(i64::from(i) * 1000, f64::from(i)).unwrap();
                i = i % 1000 + 1;
            }
        });
    }

    #[test]
    fn install_shim_writes_once() {
        assert!(TIME_SHIM.starts_with(b"\x7fELF"));
        let dir = tempfile::tempdir().unwrap();
        let path = install_shim_in(dir.path()).unwrap();
        assert_eq!(path.file_name().unwrap(), SHIM_FILE_NAME);
        let parent = path.parent().unwrap().parent().unwrap();
        assert_eq!(parent, dir.path().canonicalize().unwrap());
        assert_eq!(fs::read(&path).unwrap(), TIME_SHIM);
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let first = ino(&path);
        assert_eq!(install_shim_in(dir.path()).unwrap(), path);
        assert_eq!(ino(&path), first, "an identical shim is left alone");
        fs::write(&path, b"stale").unwrap();
        install_shim_in(dir.path()).unwrap();
        assert_eq!(fs::read(&path).unwrap(), TIME_SHIM);
        // No temporary files left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn the_shim_never_lands_where_ld_preload_would_split_its_path() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a b", "a:b", "a$b"] {
            let err = install_shim_in(&dir.path().join(name)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{name}: {err}");
        }
        let shim = install_shim().unwrap();
        assert!(preload_safe(&shim), "{}", shim.display());
        assert_eq!(fs::read(&shim).unwrap(), TIME_SHIM);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &fs::metadata(private_dir().unwrap()).unwrap().permissions(),
        );
        assert_eq!(
            mode & 0o022,
            0,
            "others can write the shim's folder ({mode:o})"
        );
    }

    #[test]
    fn env_for_names_both_variables_with_absolute_paths() {
        let env = env_for(Path::new("n1/clock"), Path::new("/r/libtimeshim.so"));
        assert_eq!(env[0], ("LD_PRELOAD".into(), "/r/libtimeshim.so".into()));
        assert_eq!(env[1].0, CONTROL_ENV);
        assert!(Path::new(&env[1].1).is_absolute());
        assert!(env[1].1.ends_with("n1/clock"));
    }

    /// `date +%s%N` (coreutils reads CLOCK_REALTIME through clock_gettime)
    /// under `env`, against the real time around it, in ns.
    fn date_minus_real(env: &[(String, String)]) -> i64 {
        let before = real_now_ns();
        let out = Command::new("date")
            .arg("+%s%N")
            .env_remove("LD_PRELOAD")
            .env_remove(CONTROL_ENV)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let after = real_now_ns();
        assert!(out.status.success(), "{out:?}");
        let shown: i64 = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        shown - (before + (after - before) / 2)
    }

    #[test]
    fn shim_shifts_a_plain_process_and_passes_through_without_control() {
        let dir = tempfile::tempdir().unwrap();
        let shim = install_shim_in(dir.path()).unwrap();
        let ctl = TimeControl::create(dir.path().join("clock")).unwrap();
        ctl.set(3600 * SEC, 1.0).unwrap();
        let shifted = date_minus_real(&env_for(ctl.path(), &shim));
        assert!((shifted - 3600 * SEC).abs() < SEC, "{shifted}");
        ctl.set(-3600 * SEC, 1.0).unwrap();
        let shifted = date_minus_real(&env_for(ctl.path(), &shim));
        assert!((shifted + 3600 * SEC).abs() < SEC, "{shifted}");

        let preload = [("LD_PRELOAD".to_string(), shim.display().to_string())];
        assert!(date_minus_real(&preload).abs() < SEC);
        let missing = env_for(&dir.path().join("no-such-file"), &shim);
        assert!(date_minus_real(&missing).abs() < SEC);
        fs::write(dir.path().join("short"), [0u8; 8]).unwrap();
        let short = env_for(&dir.path().join("short"), &shim);
        assert!(date_minus_real(&short).abs() < SEC);
    }

    /// Set by `shim_wrappers_behave_like_libc` for the copy of this test binary
    /// it runs under the shim: the offset (ns) the child should observe.
    const PROBE_ENV: &str = "LOCKSTORM_SHIM_PROBE";

    /// Runs `shim_probe_child` in a copy of this test binary with the shim
    /// preloaded, through the vDSO and through system calls.
    #[test]
    fn shim_wrappers_behave_like_libc() {
        let dir = tempfile::tempdir().unwrap();
        let shim = install_shim_in(dir.path()).unwrap();
        let ctl = TimeControl::create(dir.path().join("clock")).unwrap();
        for (offset, no_vdso) in [
            (-1000 * SEC - SEC / 4, false),
            (1000 * SEC + SEC / 4, true),
            (0, false),
        ] {
            ctl.set(offset, 1.0).unwrap();
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args(["--exact", "clock::tests::shim_probe_child"])
                .args(["--nocapture", "--test-threads=1"])
                .env_remove(NO_VDSO_ENV)
                .envs(env_for(ctl.path(), &shim).iter().map(|(k, v)| (k, v)))
                .env(PROBE_ENV, offset.to_string());
            if no_vdso {
                cmd.env(NO_VDSO_ENV, "1");
            }
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "probe at offset {offset} (no vDSO: {no_vdso}) failed:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Only does something when run by `shim_wrappers_behave_like_libc`.
    #[test]
    fn shim_probe_child() {
        use nix::libc;
        extern "C" {
            fn timespec_get(ts: *mut libc::timespec, base: libc::c_int) -> libc::c_int;
        }
        const TIME_UTC: libc::c_int = 1;
        let Ok(offset) = std::env::var(PROBE_ENV) else {
            return;
        };
        let offset: i64 = offset.parse().unwrap();
        let ns = |ts: &libc::timespec| ts.tv_sec * SEC + ts.tv_nsec;
        let zero = || libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // The kernel's clock, bypassing libc (and so the shim).
        let raw = |id: libc::clockid_t| {
            let mut ts = zero();
            // SAFETY: a valid clock id and timespec.
            let rc = unsafe { libc::syscall(libc::SYS_clock_gettime, id, &mut ts) };
            (rc == 0).then(|| ns(&ts))
        };
        let shimmed = |id: libc::clockid_t| {
            let mut ts = zero();
            // SAFETY: as above.
            let rc = unsafe { libc::clock_gettime(id, &mut ts) };
            let errno = io::Error::last_os_error().raw_os_error();
            assert!((0..SEC).contains(&ts.tv_nsec) || rc != 0);
            if rc == 0 {
                Ok(ns(&ts))
            } else {
                Err(errno)
            }
        };
        let coarse = 50_000_000; // coarse clocks tick every few ms; slack for a busy host
        for (id, shift, slack) in [
            (libc::CLOCK_REALTIME, offset, 0),
            (libc::CLOCK_REALTIME_COARSE, offset, coarse),
            (libc::CLOCK_TAI, offset, 0),
            (libc::CLOCK_REALTIME_ALARM, offset, 0),
            (libc::CLOCK_MONOTONIC, 0, 0),
            (libc::CLOCK_MONOTONIC_COARSE, 0, coarse),
            (libc::CLOCK_MONOTONIC_RAW, 0, 0),
            (libc::CLOCK_BOOTTIME, 0, 0),
        ] {
            let before = raw(id);
            let got = shimmed(id);
            let after = raw(id);
            match (before, after) {
                (Some(b), Some(a)) => {
                    let got = got.unwrap_or_else(|e| panic!("clock {id}: errno {e:?}"));
                    let window = b + shift - slack..=a + shift + slack;
                    assert!(window.contains(&got), "clock {id}: {got} not in {window:?}");
                }
                // A clock the kernel refuses is refused the same way.
                _ => assert_eq!(got, Err(Some(libc::EINVAL)), "clock {id}"),
            }
        }
        assert!(shimmed(libc::CLOCK_PROCESS_CPUTIME_ID).is_ok());
        assert_eq!(shimmed(1234), Err(Some(libc::EINVAL)));

        let real = || raw(libc::CLOCK_REALTIME).unwrap();
        let (before, mut tv) = (
            real(),
            libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
        );
        // SAFETY: valid pointers, or null where the API allows it.
        let rc = unsafe { libc::gettimeofday(&mut tv, std::ptr::null_mut()) };
        let after = real();
        assert_eq!(rc, 0);
        let got = tv.tv_sec * SEC + tv.tv_usec * 1000;
        assert!((before + offset - 1000..=after + offset).contains(&got));
        // struct timezone { int tz_minuteswest; int tz_dsttime; } (opaque in libc).
        let mut tz = [-1i32; 2];
        let tz_ptr = tz.as_mut_ptr().cast::<libc::timezone>();
        assert_eq!(
            // SAFETY: null is allowed for tv; tz points to two ints, as the struct has.
            unsafe { libc::gettimeofday(std::ptr::null_mut(), tz_ptr) },
            0
        );
        assert_ne!(tz, [-1, -1], "the timezone was not filled in");
        assert_eq!(
            // SAFETY: both may be null.
            unsafe { libc::gettimeofday(std::ptr::null_mut(), std::ptr::null_mut()) },
            0
        );

        let before = real();
        let mut stored: libc::time_t = 0;
        // SAFETY: a valid pointer, then null, which `time` allows.
        let returned = unsafe { libc::time(&mut stored) };
        // SAFETY: as above.
        let null = unsafe { libc::time(std::ptr::null_mut()) };
        let after = real();
        assert_eq!(returned, stored);
        assert!(((before + offset) / SEC..=(after + offset) / SEC).contains(&returned));
        assert!(((before + offset) / SEC..=(after + offset) / SEC).contains(&null));

        let mut ts = zero();
        let before = real();
        // SAFETY: `ts` is a valid timespec.
        assert_eq!(unsafe { timespec_get(&mut ts, TIME_UTC) }, TIME_UTC);
        let after = real();
        assert!((before + offset..=after + offset).contains(&ns(&ts)));
        // SAFETY: as above; base 0 is refused without a write.
        assert_eq!(unsafe { timespec_get(&mut ts, 0) }, 0);

        // Rust's own clock goes through the shim too.
        let std_now = real_now_ns();
        assert!((std_now - real() - offset).abs() < SEC / 10);
    }

    /// A redis-server started for a test, killed (SIGKILL by PID, then
    /// reaped) when dropped, whatever the test's outcome.
    struct RedisNode(testkit::Server);

    impl RedisNode {
        fn start(env: &[(String, String)], extra_args: &[&str]) -> RedisNode {
            let mut server = testkit::Builder::program(REDIS)
                .args(["--save", "", "--appendonly", "no"])
                .args(extra_args.iter().copied())
                .env_remove("LD_PRELOAD")
                .env_remove(CONTROL_ENV);
            for (name, value) in env {
                server = server.env(name, value);
            }
            RedisNode(server.start())
        }

        fn connect(&self) -> redis::Connection {
            self.0.client()
        }

        fn pid(&self) -> u32 {
            self.0.pid().expect("the node runs")
        }

        fn maps_shim(&self) -> bool {
            fs::read_to_string(format!("/proc/{}/maps", self.pid()))
                .unwrap()
                .contains(SHIM_FILE_NAME)
        }

        fn thread_names(&self) -> Vec<String> {
            fs::read_dir(format!("/proc/{}/task", self.pid()))
                .unwrap()
                .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|n| n.trim().to_string())
                .collect()
        }
    }

    /// Redis's `TIME` in ns since the epoch.
    fn redis_time_ns(con: &mut redis::Connection) -> i64 {
        let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
        s * SEC + us * 1000
    }

    /// Redis's `TIME` minus the real time around the call, in ns.
    fn redis_skew_ns(con: &mut redis::Connection) -> i64 {
        let before = real_now_ns();
        let t = redis_time_ns(con);
        let after = real_now_ns();
        t - (before + (after - before) / 2)
    }

    fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(con).unwrap()
    }

    #[test]
    fn redis_follows_the_shifted_clock() {
        let dir = tempfile::tempdir().unwrap();
        let shim = install_shim_in(dir.path()).unwrap();
        let ctl = TimeControl::create(dir.path().join("node.clock")).unwrap();
        let node = RedisNode::start(&env_for(ctl.path(), &shim), &REDIS_NODE_ARGS);
        assert!(node.maps_shim(), "redis-server did not load the shim");
        let threads = node.thread_names();
        assert!(
            !threads.iter().any(|t| t.starts_with("jemalloc_bg")),
            "{threads:?}"
        );
        let mut con = node.connect();
        let skew = redis_skew_ns(&mut con);
        assert!(skew.abs() < SEC / 2, "unshifted TIME is {skew} ns off");

        let set = |con: &mut redis::Connection, key: &str, px: u64| {
            let ok: String = redis::cmd("SET")
                .arg(key)
                .arg("v")
                .arg("PX")
                .arg(px)
                .query(con)
                .unwrap();
            assert_eq!(ok, "OK");
        };
        set(&mut con, "short", 10_000);
        set(&mut con, "long", 60_000);

        // Jump the node's clock 20 s forward: the 10 s key is expired, the
        // 60 s one has about 40 s left.
        ctl.set(20 * SEC, 1.0).unwrap();
        let got: Option<String> = redis::cmd("GET").arg("short").query(&mut con).unwrap();
        assert_eq!(got, None, "the 10 s key survived a 20 s jump");
        let got: Option<String> = redis::cmd("GET").arg("long").query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some("v"));
        let left = pttl(&mut con, "long");
        assert!(
            (39_000..=40_000).contains(&left),
            "PTTL after +20 s: {left}"
        );
        let skew = redis_skew_ns(&mut con);
        assert!(
            (skew - 20 * SEC).abs() < SEC / 2,
            "TIME after +20 s: {skew}"
        );

        // Back to real time: TIME agrees with the host again, and the key's
        // TTL is back near 60 s.
        ctl.set(0, 1.0).unwrap();
        let skew = redis_skew_ns(&mut con);
        assert!(skew.abs() < SEC / 2, "TIME after reset: {skew}");
        let left = pttl(&mut con, "long");
        assert!(
            (55_000..=60_000).contains(&left),
            "PTTL after reset: {left}"
        );

        // A backward jump lengthens what is left.
        ctl.set(-30 * SEC, 1.0).unwrap();
        let left = pttl(&mut con, "long");
        assert!(
            (85_000..=90_000).contains(&left),
            "PTTL after -30 s: {left}"
        );

        // Rate 2: the node's clock moves twice as fast as the host's.
        ctl.set(0, 2.0).unwrap();
        let (t0, r0) = (redis_time_ns(&mut con), Instant::now());
        std::thread::sleep(Duration::from_millis(1000));
        let (t1, r1) = (redis_time_ns(&mut con), Instant::now());
        let ratio = (t1 - t0) as f64 / r1.duration_since(r0).as_nanos() as f64;
        assert!(
            (1.9..2.1).contains(&ratio),
            "TIME advanced {ratio}x real time"
        );
        ctl.reset();
        let skew = redis_skew_ns(&mut con);
        assert!(skew.abs() < SEC / 2, "TIME after the rate reset: {skew}");
    }

    #[test]
    fn redis_runs_normally_with_the_shim_but_no_control() {
        let dir = tempfile::tempdir().unwrap();
        let shim = install_shim_in(dir.path()).unwrap();
        let env = [("LD_PRELOAD".to_string(), shim.display().to_string())];
        let node = RedisNode::start(&env, &[]);
        assert!(node.maps_shim(), "redis-server did not load the shim");
        let mut con = node.connect();
        let skew = redis_skew_ns(&mut con);
        assert!(skew.abs() < SEC / 2, "TIME is {skew} ns off");
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .arg("PX")
            .arg(200)
            .query(&mut con)
            .unwrap();
        let got: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some("v"));
        // Expiry still runs on real time.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
            if got.is_none() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "a 200 ms key still there after 5 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
