//! `matrix --shard K/N`: the pairs split across N CI runners. Pair i of the
//! whole matrix (in the order the matrix lists them) goes to shard
//! `i mod N + 1`, so every pair runs exactly once across the shards and
//! neighbours (a config's slow nemeses sit together) are spread out.

use serde::{Deserialize, Serialize};

/// Shard `k` of `n` (1-based, as CI job matrices count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub k: u32,
    pub n: u32,
}

impl Shard {
    /// Whether pair `index` (0-based, in the whole matrix) is this shard's.
    pub fn keeps(&self, index: usize) -> bool {
        index % self.n as usize == (self.k - 1) as usize
    }

    /// This shard's items, each with its index in the whole list.
    pub fn take<T>(&self, items: Vec<T>) -> Vec<(usize, T)> {
        items
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.keeps(*i))
            .collect()
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("--shard {s}: give K/N with 1 ≤ K ≤ N, e.g. 2/3 for the second of three");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (u32, u32) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        match (1..=n).contains(&k) {
            true => Ok(Shard { k, n }),
            false => Err(bad()),
        }
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_disjoint_complete_and_even() {
        for n in 1..=8u32 {
            for pairs in 0..60usize {
                let mut seen = vec![0u32; pairs];
                let mut sizes = Vec::new();
                for k in 1..=n {
                    let mine = Shard { k, n }.take((0..pairs).collect());
                    sizes.push(mine.len());
                    for (i, item) in mine {
                        assert_eq!(i, item, "an index is its place in the whole list");
                        seen[i] += 1;
                    }
                }
                assert!(
                    seen.iter().all(|&s| s == 1),
                    "n={n} pairs={pairs}: {seen:?}"
                );
                let (min, max) = (sizes.iter().min(), sizes.iter().max());
                assert!(max.unwrap() - min.unwrap() <= 1, "uneven: {sizes:?}");
            }
        }
    }

    #[test]
    fn a_shard_reads_as_k_of_n() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { k: 2, n: 3 }));
        assert_eq!(Shard { k: 2, n: 3 }.to_string(), "2/3");
        assert_eq!("1/1".parse::<Shard>(), Ok(Shard { k: 1, n: 1 }));
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", "-1/2", ""] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains("K/N"), "{bad}: {err}");
        }
    }
}
