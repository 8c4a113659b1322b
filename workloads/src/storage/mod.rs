//! The shared counter that workers increment under the lock. It lives on its
//! own node, which no lock fault touches: a Redis key (`--storage redis`)
//! or a PostgreSQL row (`--storage postgres`). Fenced storage refuses a
//! token lower than the highest it has seen, on reads and writes; either
//! way the history is the same, so every checker reads both alike. A
//! storage adapter (`--storage-cmd`) puts a team's own storage in their
//! place, with the same history.

mod adapter;
mod postgres_row;
mod redis_key;

pub use adapter::AdapterStorage;
pub use postgres_row::PostgresStorage;
pub use redis_key::{RedisStorage, MODE_ARG, READ_MODE, WRITE_MODE};

use crate::Outcome;
use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

/// Where the counter lives (`--storage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(VariantArray, IntoStaticStr, Display, EnumString)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown_storage)]
pub enum StorageKind {
    /// A key on a Redis node of its own.
    #[default]
    Redis,
    /// A row in a PostgreSQL server of its own.
    Postgres,
}

impl StorageKind {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

fn unknown_storage(s: &str) -> String {
    let names: Vec<&str> = StorageKind::VARIANTS.iter().map(|k| k.name()).collect();
    format!("unknown storage '{s}': choose {}", names.join(" or "))
}

/// The counter, as a worker reads and writes it. `fence` is the holder's
/// token on a fenced storage (ignored by a plain one).
pub trait Storage: Send {
    fn read(&mut self, fence: Option<u64>) -> Outcome<i64>;
    fn write(&mut self, value: i64, fence: Option<u64>) -> Outcome<()>;
}

/// Opens the counter on `addr` for the worker named `worker`: fenced
/// storage checks the tokens its reads and writes carry.
pub fn open(
    kind: StorageKind,
    addr: &str,
    keys: &crate::Keys,
    op_timeout: std::time::Duration,
    login: Option<crate::conn::Login>,
    fenced: bool,
    worker: &str,
) -> Box<dyn Storage> {
    match kind {
        StorageKind::Redis => Box::new(
            match fenced {
                true => RedisStorage::fenced(addr, keys, op_timeout),
                false => RedisStorage::plain(addr, keys, op_timeout),
            }
            .with_login(login),
        ),
        StorageKind::Postgres => {
            let name = crate::pg::storage_session_name(worker);
            let session = crate::pg::Session::new(addr, &name, op_timeout);
            Box::new(PostgresStorage::new(
                std::sync::Arc::new(std::sync::Mutex::new(session)),
                fenced,
            ))
        }
    }
}
