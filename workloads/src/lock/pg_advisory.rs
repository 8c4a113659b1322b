//! `pg-advisory` and `pg-advisory-fenced`: PostgreSQL's session-level
//! advisory lock, as leader elections and migrations use it. The lock
//! belongs to the worker's lock session; the counter is written on another
//! session (a pool's), so a holder whose lock session ended (terminated by
//! an operator or a pooler, timed out, cut off) does not notice and writes
//! on. Fenced, the lock comes with `nextval` of a sequence, which the
//! storage checks.

use super::{Grant, LockClient, LockParams};
use crate::pg::{self, Session};
use crate::Outcome;
use checker::history::error::NOT_HELD;

pub struct PgAdvisory {
    session: Session,
    fenced: bool,
}

impl PgAdvisory {
    pub fn new(params: &LockParams, fenced: bool) -> Self {
        let name = pg::lock_session_name(&checker::history::worker_name(params.worker));
        PgAdvisory {
            session: Session::new(&params.storage_node, &name, params.op_timeout),
            fenced,
        }
    }
}

impl LockClient for PgAdvisory {
    fn try_acquire(&mut self, _token: &str) -> Outcome<Option<Grant>> {
        let key = pg::ADVISORY_KEY;
        match self.fenced {
            false => self
                .session
                .run(|c| c.query_one(pg::ADVISORY_LOCK, &[&key]))
                .map(|row| row.get::<_, bool>(0).then(Grant::default)),
            true => self
                .session
                .run(|c| c.query_one(pg::ADVISORY_LOCK_FENCED, &[&key]))
                .map(|row| {
                    row.get::<_, Option<i64>>(0).map(|fence| Grant {
                        fence: Some(fence as u64),
                        ..Grant::default()
                    })
                }),
        }
    }

    fn release(&mut self, _token: &str) -> Outcome<()> {
        let key = pg::ADVISORY_KEY;
        match self
            .session
            .run(|c| c.query_one(pg::ADVISORY_UNLOCK, &[&key]))
        {
            Outcome::Ok(row) if row.get::<_, bool>(0) => Outcome::Ok(()),
            Outcome::Ok(_) => Outcome::Fail(NOT_HELD.into()),
            Outcome::Fail(e) => Outcome::Fail(e),
            Outcome::Info(e) => Outcome::Info(e),
        }
    }

    /// The session's own view: does it still hold an advisory lock?
    fn own_view(&mut self) -> Option<Outcome<bool>> {
        Some(
            self.session
                .run(|c| c.query_one(pg::ADVISORY_HELD, &[]))
                .map(|row| row.get(0)),
        )
    }
}
