//! How the worker sees an adapter's library mid-acquisition: a thread that
//! reads the lock key on the lock nodes in a tight loop while the acquire
//! is in flight, and freezes the adapter (the worker's own child) the
//! moment a lock value that was not there before appears, before the
//! library can act on its reply. Only the lock key counts, with whatever
//! prefix the library puts before it (`redlock:lockstorm:lock`): a library's
//! other keys (a fence counter, `lockstorm:lock-fence`) are not its grant. The worker then parks at `acquiring` and the nemesis
//! strikes the whole group.

use crate::conn::Conn;
use crate::Outcome;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

/// Every string key that ends with the lock key (ARGV[1]), and its value,
/// in one round trip.
const VALUES: &str = r#"
local out = {}
for _, k in ipairs(redis.call('KEYS', '*' .. ARGV[1])) do
  if redis.call('TYPE', k).ok == 'string' then
    table.insert(out, k)
    table.insert(out, redis.call('GET', k))
  end
end
return out
"#;

/// (node, key, value).
pub type Seen = (String, String, String);

/// The values of the lock key `key` (with any prefix) on every node now.
pub fn values(nodes: &mut [(String, Conn)], key: &str) -> HashSet<Seen> {
    let mut seen = HashSet::new();
    let script = redis::Script::new(VALUES);
    for (node, conn) in nodes.iter_mut() {
        let Outcome::Ok(flat) = conn.run(|c| script.arg(key).invoke::<Vec<String>>(c)) else {
            continue;
        };
        for pair in flat.chunks_exact(2) {
            seen.insert((node.clone(), pair[0].clone(), pair[1].clone()));
        }
    }
    seen
}

/// Watches until `done`, or until a value not in `before` appears: then
/// freezes `adapter` (SIGSTOP) and reports what it saw.
pub fn watch(
    nodes: &mut [(String, Conn)],
    key: &str,
    before: &HashSet<Seen>,
    adapter: u32,
    done: &AtomicBool,
    found: Sender<Seen>,
) {
    while !done.load(Ordering::SeqCst) {
        let now = values(nodes, key);
        if let Some(new) = now.difference(before).next() {
            let _ = process::suspend(adapter);
            let _ = found.send(new.clone());
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_nodes::Nodes;
    use redis::Commands;
    use std::time::Duration;

    #[test]
    fn only_the_lock_key_counts_with_any_prefix_not_a_fence_counter() {
        let nodes = Nodes::start(1);
        let mut conn = nodes.client(0);
        let _: () = conn.set("lockstorm:lock-fence", 4).unwrap();
        let _: () = conn.set("redlock:lockstorm:lock", "tok").unwrap();
        let _: () = conn.set("lockstorm:counter", 9).unwrap();
        let mut watched = vec![(
            "n1".to_string(),
            Conn::new(&nodes.addrs[0], Duration::from_secs(1)),
        )];
        let seen = values(&mut watched, "lockstorm:lock");
        let keys: Vec<&str> = seen.iter().map(|(_, k, _)| k.as_str()).collect();
        assert_eq!(keys, ["redlock:lockstorm:lock"]);
    }
}
