//! `no-lock` (negative control): every acquisition succeeds at once, so the
//! checker must find overlaps and lost updates.

use super::{Grant, LockClient};
use crate::Outcome;

pub struct NoLock;

impl LockClient for NoLock {
    fn try_acquire(&mut self, _token: &str) -> Outcome<Option<Grant>> {
        Outcome::Ok(Some(Grant::default()))
    }

    fn release(&mut self, _token: &str) -> Outcome<()> {
        Outcome::Ok(())
    }
}
