//! What a Redis Cluster says of itself: `CLUSTER NODES`, which names who
//! is master of which slots and under which epoch (what a failover
//! changes, and what shows that it did). Pure; read by the harness's
//! topology, its faults, and `audit` on a deployment's cluster.

/// A cluster's hash slots.
pub const SLOTS: u32 = 16384;

/// One node, as a line of `CLUSTER NODES` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: String,
    /// `ip:port` (without the bus port).
    pub addr: String,
    pub master: bool,
    /// Flagged `fail` by the cluster (not only `fail?`, one node's doubt).
    pub failed: bool,
    /// The master it replicates, for a replica.
    pub master_id: Option<String>,
    pub config_epoch: u64,
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u32, u32)>,
}

/// Every line of a `CLUSTER NODES` reply; lines it cannot read are left
/// out (a slot being migrated, `[…]`, is not a slot served).
pub fn parse_nodes(text: &str) -> Vec<Seen> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Seen> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [id, addr, flags, master, _, _, epoch, _, slots @ ..] = fields.as_slice() else {
        return None;
    };
    let flags: Vec<&str> = flags.split(',').collect();
    let range = |s: &&str| -> Option<(u32, u32)> {
        match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        }
    };
    Some(Seen {
        id: id.to_string(),
        addr: addr.split('@').next()?.to_string(),
        master: flags.contains(&"master"),
        failed: flags.contains(&"fail"),
        master_id: (*master != "-").then(|| master.to_string()),
        config_epoch: epoch.parse().ok()?,
        slots: slots
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(range)
            .collect(),
    })
}

/// Who serves `slot` in a view: the master that claims it under the
/// highest epoch (a node that has not yet heard of a failover still
/// shows the old master, under the older epoch).
pub fn master_of(view: &[Seen], slot: u32) -> Option<&Seen> {
    view.iter()
        .filter(|n| n.master && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .max_by_key(|n| n.config_epoch)
}

/// Who serves `slot` by the cluster's say: the master that more than half
/// of the `views` name ([`master_of`] in each). A node's own claim is not
/// enough: a replica that took the slots by `TAKEOVER` under its master's
/// epoch, or a master cut off from the rest, names itself, and the others
/// keep the claim they had; `None` while no majority agrees.
pub fn agreed_master(views: &[Vec<Seen>], slot: u32) -> Option<&Seen> {
    let named: Vec<&Seen> = views.iter().filter_map(|v| master_of(v, slot)).collect();
    named
        .iter()
        .find(|n| named.iter().filter(|m| m.addr == n.addr).count() * 2 > views.len())
        .copied()
}

/// The other node of a master–replica pair, by 0-based index among
/// `2 × masters` nodes: master `i`'s replica is node `i + masters` (a
/// failover swaps their parts, never the pairs).
pub fn partner(i: usize, masters: usize) -> Option<usize> {
    match i {
        i if i < masters => Some(i + masters),
        i if i < 2 * masters => Some(i - masters),
        _ => None,
    }
}

/// Master `i`'s share of the slots, of `masters`.
pub fn share(i: usize, masters: usize) -> (u32, u32) {
    let at = |i: usize| (SLOTS as usize * i / masters) as u32;
    (at(i), at(i + 1) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host.example replica e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master - 0 1426238316232 7 connected 0-5459 5460 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master,fail - 0 0 1 connected 0-5460
";

    #[test]
    fn a_view_names_each_slots_master_under_the_highest_epoch() {
        let view = parse_nodes(VIEW);
        assert_eq!(view.len(), 5);
        assert_eq!(
            view[0].master_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(view[0].addr, "127.0.0.1:30004");
        assert!(view[4].failed && view[4].master);
        // The promoted replica (epoch 7) and the failed master (epoch 1)
        // both claim slot 100: the newer claim wins.
        assert_eq!(master_of(&view, 100).unwrap().addr, "127.0.0.1:30005");
        assert_eq!(master_of(&view, 5460).unwrap().addr, "127.0.0.1:30005");
        assert_eq!(
            view[3].slots,
            vec![(0, 5459), (5460, 5460)],
            "a migrating slot is not served"
        );
        assert_eq!(master_of(&view, 16383).unwrap().addr, "127.0.0.1:30003");
        assert!(master_of(&[], 0).is_none());
    }

    #[test]
    fn the_slots_master_is_the_one_most_views_name_not_a_lone_claim() {
        let master = |addr: &str, epoch: u64| Seen {
            id: addr.into(),
            addr: addr.into(),
            master: true,
            failed: false,
            master_id: None,
            config_epoch: epoch,
            slots: vec![(0, 100)],
        };
        let old = vec![master("a:1", 3)];
        // The replica claims the slot under the same epoch: only its own
        // view names it.
        let lone = vec![master("a:1", 3), master("b:1", 3)];
        let views = [old.clone(), old.clone(), old.clone(), lone.clone()];
        assert_eq!(agreed_master(&views, 5).unwrap().addr, "a:1");
        // Once most views have taken the newer claim, it is the master.
        let newer = vec![master("a:1", 3), master("b:1", 7)];
        let views = [newer.clone(), newer.clone(), newer, old.clone()];
        assert_eq!(agreed_master(&views, 5).unwrap().addr, "b:1");
        // Split evenly, or a slot nobody serves: no master agreed.
        assert!(agreed_master(&[old.clone(), lone], 5).is_none());
        assert!(agreed_master(&[old], 500).is_none());
    }

    #[test]
    fn masters_and_replicas_pair_off_both_ways() {
        assert_eq!((partner(0, 3), partner(2, 3)), (Some(3), Some(5)));
        assert_eq!((partner(3, 3), partner(5, 3)), (Some(0), Some(2)));
        assert_eq!(partner(6, 3), None);
    }

    #[test]
    fn three_masters_share_every_slot_once() {
        let shares: Vec<_> = (0..3).map(|i| share(i, 3)).collect();
        assert_eq!(shares[0].0, 0);
        assert_eq!(shares[2].1, SLOTS - 1);
        assert_eq!(shares[0].1 + 1, shares[1].0);
        assert_eq!(shares[1].1 + 1, shares[2].0);
    }
}
