//! The counter as a row of a PostgreSQL table. Fenced, each read and write
//! is one conditional statement (`… WHERE fence <= $token`): the database
//! checks the token where the data lives, as the material asks.

use super::Storage;
use crate::pg::{self, Session};
use crate::Outcome;
use checker::history::error::STALE_FENCE;
use std::sync::{Arc, Mutex};

pub struct PostgresStorage {
    /// Shared with the lock when the lock is the storage's own transaction
    /// (`pg-row-lock`): its reads and writes happen inside it.
    session: Arc<Mutex<Session>>,
    fenced: bool,
}

impl PostgresStorage {
    pub fn new(session: Arc<Mutex<Session>>, fenced: bool) -> Self {
        PostgresStorage { session, fenced }
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Storage for PostgresStorage {
    fn read(&mut self, fence: Option<u64>) -> Outcome<i64> {
        match (self.fenced, fence) {
            (true, Some(fence)) => {
                let fence = fence.to_string();
                let row = self
                    .session()
                    .run(|c| c.query_opt(pg::FENCED_READ, &[&fence]));
                match row {
                    Outcome::Ok(Some(row)) => Outcome::Ok(row.get(0)),
                    Outcome::Ok(None) => Outcome::Fail(STALE_FENCE.into()),
                    Outcome::Fail(e) => Outcome::Fail(e),
                    Outcome::Info(e) => Outcome::Info(e),
                }
            }
            _ => self
                .session()
                .run(|c| c.query_one(pg::READ, &[]))
                .map(|row| row.get(0)),
        }
    }

    fn write(&mut self, value: i64, fence: Option<u64>) -> Outcome<()> {
        let updated = match (self.fenced, fence) {
            (true, Some(fence)) => {
                let fence = fence.to_string();
                self.session()
                    .run(|c| c.execute(pg::FENCED_WRITE, &[&value, &fence]))
            }
            _ => self.session().run(|c| c.execute(pg::WRITE, &[&value])),
        };
        match updated {
            Outcome::Ok(1) => Outcome::Ok(()),
            Outcome::Ok(_) if self.fenced => Outcome::Fail(STALE_FENCE.into()),
            Outcome::Ok(n) => {
                Outcome::Fail(format!("the counter row is missing ({n} rows updated)"))
            }
            Outcome::Fail(e) => Outcome::Fail(e),
            Outcome::Info(e) => Outcome::Info(e),
        }
    }
}
