//! `unsafe-get-del` (negative control): acquires like `single` but releases
//! in two round trips, `GET` the key, compare the token in the client, then
//! a plain `DEL`. Between the two the key can expire and another worker
//! acquire it; the `DEL` then deletes that worker's lock.

use super::single::Single;
use super::{first_node, released, Grant, LockClient, LockParams};
use crate::conn::Conn;
use crate::strike::Hook;
use crate::Outcome;
use checker::history::error::NOT_HELD;
use checker::Point;

pub struct UnsafeGetDel {
    /// The lock's key, the run's.
    key: String,
    conn: Conn,
    ttl_ms: u64,
    strike: Hook,
}

impl UnsafeGetDel {
    pub fn new(params: &LockParams) -> Self {
        UnsafeGetDel {
            key: params.keys.lock(),
            conn: params.connect(first_node(params), params.op_timeout),
            ttl_ms: params.ttl.as_millis() as u64,
            strike: params.strike.clone(),
        }
    }

    /// The first round trip: who holds the key now.
    fn get(&mut self) -> Outcome<Option<String>> {
        self.conn
            .run(|c| redis::cmd("GET").arg(&self.key).query::<Option<String>>(c))
    }

    /// The second round trip: deletes the key whoever holds it now.
    fn del(&mut self) -> Outcome<()> {
        released(self.conn.run(|c| redis::cmd("DEL").arg(&self.key).query(c)))
    }
}

impl LockClient for UnsafeGetDel {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        Single::set_nx_px(&mut self.conn, &self.key, token, self.ttl_ms)
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        match self.get() {
            Outcome::Ok(Some(held)) if held == token => {}
            Outcome::Ok(_) => return Outcome::Fail(NOT_HELD.into()),
            // A lost GET deleted nothing: the release did not happen.
            Outcome::Fail(e) | Outcome::Info(e) => return Outcome::Fail(e),
        }
        // The race window: the key was ours at the GET, but the DEL below
        // acts on whatever the key holds when it arrives: `releasing` strikes here.
        self.strike.at(Point::Releasing);
        self.del()
    }

    fn marks(&self) -> &'static [Point] {
        &[Point::Releasing]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_nodes::Nodes;
    use redis::Commands;
    use std::time::Duration;

    #[test]
    fn releases_only_its_own_token_but_deletes_whatever_the_del_finds() {
        let nodes = Nodes::start(1);
        let mut a = UnsafeGetDel::new(&nodes.params(Duration::from_secs(10)));
        assert_eq!(a.try_acquire("A"), Outcome::Ok(Some(Grant::default())));
        // The compare in the client refuses a token that is not ours...
        assert_eq!(a.release("X"), Outcome::Fail(NOT_HELD.into()));
        // ...but once it has passed, the DEL takes the key as it is then.
        assert_eq!(a.get(), Outcome::Ok(Some("A".into())));
        let _: () = nodes
            .client(0)
            .set(crate::Keys::default().lock(), "B")
            .unwrap();
        assert_eq!(a.del(), Outcome::Ok(()), "B's lock deleted");
        let left: Option<String> = nodes.client(0).get(crate::Keys::default().lock()).unwrap();
        assert_eq!(left, None);
        assert_eq!(a.release("A"), Outcome::Fail(NOT_HELD.into()));
    }
}
