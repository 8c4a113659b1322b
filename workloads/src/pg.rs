//! PostgreSQL as lockstorm uses it: one session (connection) with the
//! failures classified as the history needs them, the schema a fresh server
//! gets, and every statement lockstorm sends (the storage's row, the locks
//! the database gives, the harness's reads and its ending of a session).
//! The SQL lives here and nowhere else.

use crate::Outcome;
use postgres::{Client, Config, NoTls};
use std::time::Duration;

/// The role lockstorm's own server is created with (`initdb -U`), and the
/// one database its template keeps ([`slim_cluster`]).
pub const USER: &str = "lockstorm";
pub const DATABASE: &str = "lockstorm";

/// The counter row (id 1) with the highest fence it has seen (-1: none),
/// and the sequence `pg-advisory-fenced` takes its fences from.
pub const SCHEMA: &str = "CREATE TABLE counter (id int PRIMARY KEY, value bigint NOT NULL, \
     fence numeric(20) NOT NULL DEFAULT -1);\n\
     INSERT INTO counter (id, value) VALUES (1, 0);\n\
     CREATE SEQUENCE fence;";

pub const READ: &str = "SELECT value FROM counter WHERE id = 1";
pub const WRITE: &str = "UPDATE counter SET value = $1 WHERE id = 1";
/// The material's conditional update: it lands only if no higher fence was
/// seen. A fence is any u64 (an adapter's library may hand out 2^64 − 1),
/// so it travels as text and is compared as a number.
pub const FENCED_WRITE: &str = "UPDATE counter SET value = $1, fence = $2::text::numeric \
     WHERE id = 1 AND fence <= $2::text::numeric";
/// A read that carries its fence: refused (no row) after a higher one,
/// and itself fences off every lower one.
pub const FENCED_READ: &str = "UPDATE counter SET fence = $1::text::numeric \
     WHERE id = 1 AND fence <= $1::text::numeric RETURNING value";

/// `pg-row-lock`: the row lock is the transaction's, taken by its read.
pub const ROW_LOCK: &str = "SELECT value FROM counter WHERE id = 1 FOR UPDATE";

/// `pg-row-lock`'s transaction: opened with the acquire's wait for the row,
/// committed by the release (with the write inside it), rolled back when the
/// acquisition failed.
pub fn begin_waiting(wait: Duration) -> String {
    format!("BEGIN; SET LOCAL lock_timeout = {}", wait.as_millis())
}
pub const COMMIT: &str = "COMMIT";
pub const ROLLBACK: &str = "ROLLBACK";
/// A statement that only asks whether the session is still there.
pub const ALIVE: &str = "SELECT 1";

/// The advisory lock's key (one lock per server: lockstorm owns it).
pub const ADVISORY_KEY: i64 = 1;
pub const ADVISORY_LOCK: &str = "SELECT pg_try_advisory_lock($1)";
/// `pg-advisory-fenced`: the fence is taken with the lock, on its session.
pub const ADVISORY_LOCK_FENCED: &str =
    "SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('fence') END";
pub const ADVISORY_UNLOCK: &str = "SELECT pg_advisory_unlock($1)";
/// The session's own view: does it still hold the advisory lock?
pub const ADVISORY_HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks \
     WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted)";

/// `terminate-session`: ends the backends whose `application_name` is the
/// given one and that hold a lock (an advisory lock, or a transaction that
/// has locked a row); waits up to 5 s for each to be gone. Returns the
/// ended backends' pids.
pub const TERMINATE_HOLDER: &str = "SELECT pid FROM pg_stat_activity \
     WHERE application_name = $1 \
     AND (backend_xid IS NOT NULL OR pid IN (SELECT pid FROM pg_locks \
          WHERE locktype = 'advisory' AND granted)) \
     AND pg_terminate_backend(pid, 5000)";

/// SQLSTATE `lock_not_available`: `lock_timeout` ran out.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE `cannot_connect_now`: the server is starting up.
const CANNOT_CONNECT_NOW: &str = "57P03";
/// SQLSTATE `query_canceled`: `statement_timeout` ran out (a wait for a row
/// that changed hands on the way restarts `lock_timeout`, not this).
const QUERY_CANCELED: &str = "57014";

/// The error of a statement refused because its transaction's session is gone.
pub const SESSION_GONE: &str = "session-gone";

/// The `application_name` of a worker's lock session, which
/// `terminate-session` looks for.
pub fn lock_session_name(worker: &str) -> String {
    format!("lockstorm-lock {worker}")
}

/// The `application_name` of a worker's storage session.
pub fn storage_session_name(worker: &str) -> String {
    format!("lockstorm-storage {worker}")
}

/// Why a statement did not return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No connection: nothing was sent.
    Connect(String),
    /// The server answered with an error: the statement (and its
    /// transaction) did not happen.
    Refused { code: String, message: String },
    /// The connection broke: the statement may or may not have happened.
    Lost(String),
    /// The session a transaction was pinned to is gone: nothing was sent
    /// (the server rolled the transaction back when the session ended).
    Gone,
}

impl Failure {
    /// A wait for a lock ran out of time (`lock_timeout` or
    /// `statement_timeout`): the lock stayed someone else's.
    pub fn waited_out(&self) -> bool {
        matches!(self, Failure::Refused { code, .. }
            if code == LOCK_NOT_AVAILABLE || code == QUERY_CANCELED)
    }

    pub fn outcome<T>(self) -> Outcome<T> {
        match self {
            Failure::Connect(e) => Outcome::Fail(format!("connection error: {e}")),
            Failure::Refused { code, message } => Outcome::Fail(format!("{code}: {message}")),
            Failure::Lost(e) => Outcome::Info(format!("connection lost: {e}")),
            Failure::Gone => Outcome::Fail(format!(
                "{SESSION_GONE}: the transaction's session ended, and the transaction with it"
            )),
        }
    }
}

/// One PostgreSQL session, opened when first needed and again after it
/// broke. Statements time out on the server after the op timeout.
pub struct Session {
    config: Config,
    client: Option<Client>,
    /// How many connections it has opened.
    opened: u64,
    /// The connection a transaction in progress lives on ([`Session::pin`]):
    /// no statement may go to another, which would run outside it.
    pinned: Option<u64>,
}

impl Session {
    /// A session to `addr` (`ip:port`) named `name` (its `application_name`).
    pub fn new(addr: &str, name: &str, op_timeout: Duration) -> Self {
        Self::to_database(addr, DATABASE, name, op_timeout)
    }

    fn to_database(addr: &str, database: &str, name: &str, op_timeout: Duration) -> Self {
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "5432"));
        let mut config = Config::new();
        config
            .host(host)
            .port(port.parse().unwrap_or(5432))
            .user(USER)
            .dbname(database)
            .application_name(name)
            .connect_timeout(op_timeout)
            .options(&format!("-c statement_timeout={}", op_timeout.as_millis()));
        Session {
            config,
            client: None,
            opened: 0,
            pinned: None,
        }
    }

    /// A transaction began on the current connection: until [`Session::unpin`],
    /// statements go to it or fail ([`Failure::Gone`]), never to a new one.
    pub fn pin(&mut self) {
        self.pinned = Some(self.opened);
    }

    pub fn unpin(&mut self) {
        self.pinned = None;
    }

    /// Runs `f` on the session, opening it first if need be. A broken
    /// session is dropped, to be opened again by the next call.
    pub fn call<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, Failure> {
        let broken = self.client.as_ref().is_none_or(Client::is_closed);
        if self.pinned.is_some_and(|p| broken || p != self.opened) {
            self.client = None;
            return Err(Failure::Gone);
        }
        if broken {
            let client = self
                .config
                .connect(NoTls)
                .map_err(|e| Failure::Connect(e.to_string()))?;
            self.client = Some(client);
            self.opened += 1;
        }
        let client = self.client.as_mut().expect("opened above");
        let result = f(client);
        let closed = client.is_closed();
        if closed {
            self.client = None;
        }
        result.map_err(|e| match e.as_db_error() {
            Some(db) if !closed => Failure::Refused {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
            },
            // A FATAL error (the session was ended) closes it: whatever
            // was sent with it may have happened.
            _ => {
                self.client = None;
                Failure::Lost(e.to_string())
            }
        })
    }

    /// [`Session::call`] as a history outcome.
    pub fn run<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Outcome<T> {
        match self.call(f) {
            Ok(v) => Outcome::Ok(v),
            Err(failure) => failure.outcome(),
        }
    }

    /// Closes the session: the server ends its transaction and its
    /// session locks.
    pub fn close(&mut self) {
        self.client = None;
    }
}

/// Leaves a fresh cluster (`initdb`'s `template0`, `template1` and
/// `postgres`) one database, `lockstorm`: two thirds of a data folder's
/// files are the two others, and copying those files is most of what a
/// PostgreSQL node costs a run. Each statement alone: `DROP DATABASE` runs
/// in no transaction block.
pub fn slim_cluster(addr: &str, timeout: Duration) -> Result<(), Failure> {
    let mut initial = Session::to_database(addr, "postgres", "lockstorm-template", timeout);
    // The server was just started: wait until it takes connections.
    let deadline = std::time::Instant::now() + timeout;
    while let Err(e) = initial.call(|c| c.batch_execute(ALIVE)) {
        let starting = matches!(&e, Failure::Connect(_))
            || matches!(&e, Failure::Refused { code, .. } if code == CANNOT_CONNECT_NOW);
        if !starting || std::time::Instant::now() > deadline {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for statement in [
        "UPDATE pg_database SET datistemplate = false WHERE datname IN ('template0', 'template1')",
        "DROP DATABASE template0",
        "ALTER DATABASE template1 RENAME TO lockstorm",
    ] {
        initial.call(|c| c.batch_execute(statement))?;
    }
    initial.close();
    let mut ours = Session::new(addr, "lockstorm-template", timeout);
    for statement in ["DROP DATABASE postgres", "CHECKPOINT"] {
        ours.call(|c| c.batch_execute(statement))?;
    }
    Ok(())
}

/// Gives a fresh server its schema (the harness, once the server is up).
pub fn create_schema(addr: &str, timeout: Duration) -> Result<(), Failure> {
    Session::new(addr, "lockstorm-harness", timeout).call(|c| c.batch_execute(SCHEMA))
}

/// Who answers on `addr`: its data folder and when its postmaster started
/// (a restarted server answers with a new time).
pub fn identify(addr: &str, timeout: Duration) -> Result<(String, String), Failure> {
    Session::new(addr, "lockstorm-harness", timeout).call(|c| {
        let row = c.query_one(
            "SELECT current_setting('data_directory'), pg_postmaster_start_time()::text",
            &[],
        )?;
        Ok((row.get(0), row.get(1)))
    })
}

/// `terminate-session`: ends `worker`'s lock session if it holds a lock.
/// Returns the pids of the backends ended (none: it held nothing).
pub fn terminate_lock_session(
    addr: &str,
    worker: &str,
    timeout: Duration,
) -> Result<Vec<i32>, Failure> {
    let name = lock_session_name(worker);
    Session::new(addr, "lockstorm-nemesis", timeout).call(|c| {
        let rows = c.query(TERMINATE_HOLDER, &[&name])?;
        Ok(rows.iter().map(|r| r.get::<_, i32>(0)).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_say_whether_the_statement_may_have_happened() {
        let refused = Failure::Refused {
            code: LOCK_NOT_AVAILABLE.into(),
            message: "canceling statement due to lock timeout".into(),
        };
        assert!(refused.waited_out());
        assert!(matches!(refused.outcome::<()>(), Outcome::Fail(e) if e.starts_with("55P03")));
        assert!(matches!(
            Failure::Connect("refused".into()).outcome::<()>(),
            Outcome::Fail(_)
        ));
        assert!(matches!(
            Failure::Lost("closed".into()).outcome::<()>(),
            Outcome::Info(_)
        ));
    }
}
