//! How the worker sees an adapter's library mid-acquisition: a thread that
//! reads the lock nodes' string keys in a tight loop while the acquire is
//! in flight, and freezes the adapter (the worker's own child) the moment a
//! lock value that was not there before appears, before the library can
//! act on its reply. The worker then parks at `acquiring` and the nemesis
//! strikes the whole group.

use crate::conn::Conn;
use crate::Outcome;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

/// Every string key and its value, in one round trip.
const VALUES: &str = r#"
local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  if redis.call('TYPE', k).ok == 'string' then
    table.insert(out, k)
    table.insert(out, redis.call('GET', k))
  end
end
return out
"#;

/// (node, key, value).
pub type Seen = (String, String, String);

/// The lock values on every node now.
pub fn values(nodes: &mut [(String, Conn)]) -> HashSet<Seen> {
    let mut seen = HashSet::new();
    let script = redis::Script::new(VALUES);
    for (node, conn) in nodes.iter_mut() {
        let Outcome::Ok(flat) = conn.run(|c| script.invoke::<Vec<String>>(c)) else {
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
    before: &HashSet<Seen>,
    adapter: u32,
    done: &AtomicBool,
    found: Sender<Seen>,
) {
    while !done.load(Ordering::SeqCst) {
        let now = values(nodes);
        if let Some(new) = now.difference(before).next() {
            let _ = process::suspend(adapter);
            let _ = found.send(new.clone());
            return;
        }
    }
}
