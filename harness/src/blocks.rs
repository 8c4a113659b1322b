//! Loopback address blocks: a run's nodes and workers take the addresses
//! `127.0.<block>.x`, so runs at once on one machine (a matrix's cells, the
//! test suite's runs, two users' runs) need blocks of their own. A run
//! claims its block for its life with an exclusive `flock` on the block's
//! lock file; the kernel lets go of it when the claiming process ends, however
//! it ends, so a crashed run leaves no block taken.

use crate::error::{Context, Error, Result};
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Every block there is: `127.0.0.0/24` to `127.0.255.0/24`.
const BLOCKS: usize = 256;

/// A block this process holds until the claim is dropped.
#[derive(Debug)]
pub struct Claim {
    block: u8,
    _lock: Flock<File>,
}

impl Claim {
    pub fn block(&self) -> u8 {
        self.block
    }
}

/// Where the blocks' lock files live: one folder for every user of the
/// machine (the addresses are the machine's), writable by all like /tmp.
fn dir() -> PathBuf {
    std::env::temp_dir().join("lockstorm-blocks")
}

/// Block `block`, if no other run holds it now.
fn try_claim(block: u8) -> Result<Option<Claim>> {
    let dir = dir();
    if !dir.exists() {
        std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        // Sticky and open to all, so another user's run can add its files.
        let _ = std::fs::set_permissions(&dir, Permissions::from_mode(0o1777));
    }
    let path = dir.join(format!("block-{block}.lock"));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .context(|| format!("opening {}", path.display()))?;
    let _ = file.set_permissions(Permissions::from_mode(0o666));
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(Claim { block, _lock: lock })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::Io {
            context: format!("locking {}", path.display()),
            source: e.into(),
        }),
    }
}

/// `n` blocks: from `first` on, each of which must be free (`--address-block`
/// given), or else the lowest free ones.
pub fn claim(first: Option<u8>, n: usize) -> Result<Vec<Claim>> {
    match first {
        Some(first) => {
            let room = BLOCKS - usize::from(first);
            if n > room {
                return Err(Error::Usage(format!(
                    "--address-block {first} leaves room for {room} runs at once, and {n} are asked for: give a lower block or fewer --jobs"
                )));
            }
            (0..n)
                .map(|k| {
                    let block = first + k as u8;
                    try_claim(block)?.ok_or_else(|| Error::Usage(format!(
                        "--address-block {block} is held by another lockstorm run on this machine: give another block, or leave --address-block out to take a free one"
                    )))
                })
                .collect()
        }
        None => {
            let mut claims = Vec::with_capacity(n);
            for block in 0..=u8::MAX {
                if claims.len() == n {
                    break;
                }
                claims.extend(try_claim(block)?);
            }
            if claims.len() < n {
                return Err(Error::Usage(format!(
                    "{n} address block(s) are needed and only {} of {BLOCKS} are free (other lockstorm runs on this machine hold the rest): wait for some to end, or ask for fewer --jobs",
                    claims.len()
                )));
            }
            Ok(claims)
        }
    }
}

/// One block, as [`claim`] takes them.
pub fn claim_one(first: Option<u8>) -> Result<Claim> {
    Ok(claim(first, 1)?.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_block_is_not_handed_out_again_until_it_is_let_go() {
        // A high block: runs elsewhere on the machine take the lowest free.
        let held = claim_one(Some(201)).expect("block 201 is free");
        let again = claim_one(Some(201));
        assert!(
            matches!(&again, Err(Error::Usage(m)) if m.contains("held by another")),
            "{again:?}"
        );
        drop(held);
        let again = claim_one(Some(201)).expect("a block let go is free");
        assert_eq!(again.block(), 201);
        let [a, b] = <[Claim; 2]>::try_from(claim(None, 2).unwrap()).unwrap();
        assert_ne!(a.block(), b.block(), "two free blocks, not one twice");
    }

    #[test]
    fn blocks_asked_from_a_first_one_must_fit_below_256() {
        let e = claim(Some(250), 10).unwrap_err();
        assert!(e.to_string().contains("room for 6"), "{e}");
    }
}
