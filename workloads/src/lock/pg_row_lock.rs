//! `pg-row-lock`: the lock is a PostgreSQL transaction. The acquisition
//! opens it and locks the counter's row (`SELECT … FOR UPDATE`, waiting up
//! to the acquire timeout); the worker's read and write happen inside it;
//! the release commits. No token is needed: the material's "the work
//! happens in the same transaction that holds the lock". A holder whose
//! session dies (a crash, a terminated backend) has its transaction, and
//! its write, rolled back.

use super::{Grant, LockClient, LockParams};
use crate::pg::{self, Session};
use crate::storage::{PostgresStorage, Storage};
use crate::Outcome;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub struct PgRowLock {
    session: Arc<Mutex<Session>>,
    acquire_timeout: Duration,
}

impl PgRowLock {
    pub fn new(params: &LockParams) -> Self {
        let name = pg::lock_session_name(&checker::history::worker_name(params.worker));
        PgRowLock {
            // The op timeout bounds each statement; the row's wait is the
            // acquire's (its own `lock_timeout`), so it may run that long.
            session: Arc::new(Mutex::new(Session::new(
                &params.storage_node,
                &name,
                params.op_timeout.max(params.acquire_timeout) + params.op_timeout,
            ))),
            acquire_timeout: params.acquire_timeout,
        }
    }

    fn session(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LockClient for PgRowLock {
    fn try_acquire(&mut self, _token: &str) -> Outcome<Option<Grant>> {
        let begin = pg::begin_waiting(self.acquire_timeout);
        let mut session = self.session();
        session.unpin();
        let locked = session.call(|c| {
            c.batch_execute(&begin)?;
            c.query_one(pg::ROW_LOCK, &[])
        });
        match locked {
            Ok(_) => {
                // The read, the write and the commit go to this connection
                // or nowhere: on another they would run outside the lock.
                session.pin();
                Outcome::Ok(Some(Grant::default()))
            }
            Err(failure) => {
                // The transaction is aborted (or gone): end it either way.
                let _ = session.call(|c| c.batch_execute(pg::ROLLBACK));
                match failure.waited_out() {
                    true => Outcome::Ok(None),
                    false => failure.outcome(),
                }
            }
        }
    }

    /// The commit: the write takes effect and the row lock is released.
    /// After a failed statement the transaction is aborted, and the same
    /// `COMMIT` rolls it back, which releases the row as well.
    fn release(&mut self, _token: &str) -> Outcome<()> {
        let mut session = self.session();
        let committed = session.run(|c| c.batch_execute(pg::COMMIT));
        session.unpin();
        committed
    }

    /// Whether the transaction's session is still there (a careful holder
    /// asks before it writes).
    fn own_view(&mut self) -> Option<Outcome<bool>> {
        Some(
            self.session()
                .run(|c| c.query_one(pg::ALIVE, &[]))
                .map(|_| true),
        )
    }

    fn storage(&self) -> Option<Box<dyn Storage>> {
        Some(Box::new(PostgresStorage::new(self.session.clone(), false)))
    }
}
