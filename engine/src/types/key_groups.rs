//! Key groups: how keys map to subtasks, so that keyed state can move
//! between subtasks when a job is restored at another parallelism (Flink's
//! `KeyGroupRangeAssignment`).
//!
//! A key's *key group* is `key_hash(key) % max_parallelism` (a fixed
//! number of groups, 128 by default, part of the job's configuration and
//! of its checkpoints); at parallelism `P` key group `g` belongs to subtask
//! `g * P / max_parallelism`, so each subtask owns a contiguous range of
//! groups ([`KeyGroupRange`]). Routing ([`key_to_subtask`], the engine's
//! hash exchange) and keyed state ([`crate::KeyedState`], which stores its
//! entries by key group) use these same functions, so after a rescale
//! every key's state is restored where its records now go.

/// The multiplier of the reference workloads' key hash (`workloads.md`):
/// 2^64 / φ, Knuth's multiplicative hashing constant.
pub const KEY_HASH_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// The routing hash of a key: `(key * 0x9E3779B97F4A7C15) >> 32` (wrapping
/// multiply), as `docs/workloads.md` defines it. The reference workloads'
/// oracle and baselines call this same function, so they cannot drift from
/// the engine.
///
/// # Examples
/// ```
/// use lockgate::keys::key_hash;
/// assert_eq!(key_hash(0), 0);
/// assert_eq!(key_hash(1), 0x9E37_79B9);
/// ```
#[inline]
pub fn key_hash(key: u64) -> u64 {
    key.wrapping_mul(KEY_HASH_MULTIPLIER) >> 32
}

/// A `u64` key for [`crate::Stream::key_by`] from any hashable value (a
/// string, a tuple): 64-bit FNV-1a over the bytes the value's `Hash`
/// writes. Unlike `std`'s randomly keyed `HashMap` hasher it is the same
/// from run to run and process to process of one build, so keyed state
/// restored from a checkpoint meets its keys again.
///
/// # Examples
/// ```
/// use lockgate::keys::hash_key;
/// assert_eq!(hash_key("EWR"), hash_key(&String::from("EWR")));
/// assert_ne!(hash_key("EWR"), hash_key("JFK"));
/// ```
pub fn hash_key<K: std::hash::Hash + ?Sized>(key: &K) -> u64 {
    /// FNV-1a, 64-bit (Fowler, Noll, Vo; the offset basis and prime are
    /// the published 64-bit parameters).
    struct Fnv(u64);
    impl std::hash::Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01B3);
            }
        }
    }
    let mut h = Fnv(0xCBF2_9CE4_8422_2325);
    key.hash(&mut h);
    std::hash::Hasher::finish(&h)
}

/// The number of key groups unless [`crate::JobConfig::max_parallelism`]
/// says otherwise: Flink's default `maxParallelism` for small jobs, 128.
/// A job's parallelism can grow up to it on restore.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The largest `max_parallelism` a job may have: key groups are `u16`,
/// and Flink's upper bound is the same, 2^15.
pub const UPPER_MAX_PARALLELISM: u32 = 1 << 15;

/// The key group of routing key `key` among `max_parallelism` groups:
/// [`key_hash`]`(key) % max_parallelism`.
///
/// # Panics
/// When `max_parallelism` is 0 (validated to be at least 1 before a job
/// starts).
///
/// # Examples
/// ```
/// use lockgate::{keys::key_group_of, keys::key_hash};
/// assert_eq!(key_group_of(7, 128), (key_hash(7) % 128) as u16);
/// ```
#[inline]
pub fn key_group_of(key: u64, max_parallelism: u32) -> u16 {
    (key_hash(key) % u64::from(max_parallelism)) as u16
}

/// The subtask that owns key group `group` at `parallelism`:
/// `group * parallelism / max_parallelism` (Flink's
/// `computeOperatorIndexForKeyGroup`).
///
/// # Examples
/// ```
/// use lockgate::keys::subtask_of_key_group;
/// assert_eq!(subtask_of_key_group(0, 3, 128), 0);
/// assert_eq!(subtask_of_key_group(43, 3, 128), 1);
/// assert_eq!(subtask_of_key_group(127, 3, 128), 2);
/// ```
#[inline]
pub fn subtask_of_key_group(group: u16, parallelism: usize, max_parallelism: u32) -> usize {
    (u64::from(group) * parallelism as u64 / u64::from(max_parallelism)) as usize
}

/// The subtask a key goes to under hash partitioning over `parallelism`
/// subtasks with the default [`DEFAULT_MAX_PARALLELISM`] key groups: its
/// key group, then that group's subtask. The engine's hash exchange
/// computes the same with a table (one division and one load a record).
///
/// # Panics
/// When `parallelism` is 0.
///
/// # Examples
/// ```
/// use lockgate::{keys::key_group_of, keys::key_to_subtask, keys::subtask_of_key_group};
/// let g = key_group_of(7, 128);
/// assert_eq!(key_to_subtask(7, 4), subtask_of_key_group(g, 4, 128));
/// assert_eq!(key_to_subtask(7, 1), 0);
/// ```
#[inline]
pub fn key_to_subtask(key: u64, parallelism: usize) -> usize {
    assert!(parallelism > 0, "a parallelism is at least 1");
    subtask_of_key_group(
        key_group_of(key, DEFAULT_MAX_PARALLELISM),
        parallelism,
        DEFAULT_MAX_PARALLELISM,
    )
}

/// The key groups of one subtask: `start..end` (end exclusive), Flink's
/// `computeKeyGroupRangeForOperatorIndex`: subtask `i` of `P` owns the
/// groups `g` with `g * P / max_parallelism == i`, which are
/// `ceil(i * max / P) .. ceil((i + 1) * max / P)`. Empty when `P` exceeds
/// `max_parallelism` and the subtask gets none.
///
/// # Examples
/// ```
/// use lockgate::keys::KeyGroupRange;
/// let r = KeyGroupRange::of_subtask(1, 3, 128);
/// assert_eq!((r.start, r.end), (43, 86));
/// assert!(r.contains(43) && !r.contains(86));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyGroupRange {
    /// The first key group.
    pub start: u16,
    /// One past the last key group.
    pub end: u16,
}

impl KeyGroupRange {
    /// The range of subtask `subtask` of `parallelism`.
    ///
    /// # Panics
    /// When `parallelism` is 0.
    pub fn of_subtask(subtask: usize, parallelism: usize, max_parallelism: u32) -> Self {
        assert!(parallelism > 0, "a parallelism is at least 1");
        let (m, p) = (u64::from(max_parallelism), parallelism as u64);
        let bound = |i: u64| (i * m).div_ceil(p).min(m) as u16;
        KeyGroupRange {
            start: bound(subtask as u64),
            end: bound(subtask as u64 + 1),
        }
    }

    /// Whether `group` is in the range.
    #[inline]
    pub fn contains(&self, group: u16) -> bool {
        (self.start..self.end).contains(&group)
    }

    /// The number of key groups in the range.
    pub fn len(&self) -> usize {
        usize::from(self.end.saturating_sub(self.start))
    }

    /// Whether the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A restore at another parallelism, as an operator's
/// [`crate::Checkpointed::restore_rescaled`] sees it: which subtask this
/// is now, of how many, how many there were, and the job's key groups.
///
/// # Examples
/// ```
/// use lockgate::keys::Rescale;
/// let r = Rescale { subtask: 0, parallelism: 1, old_parallelism: 2, max_parallelism: 128 };
/// assert_eq!(r.key_groups().len(), 128);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rescale {
    /// This subtask's index, below `parallelism`.
    pub subtask: usize,
    /// The operator's parallelism now.
    pub parallelism: usize,
    /// Its parallelism in the restored checkpoint.
    pub old_parallelism: usize,
    /// The job's number of key groups (the same before and after).
    pub max_parallelism: u32,
}

impl Rescale {
    /// The key groups this subtask owns now.
    pub fn key_groups(&self) -> KeyGroupRange {
        KeyGroupRange::of_subtask(self.subtask, self.parallelism, self.max_parallelism)
    }

    /// Whether this subtask owns routing key `key` now.
    pub fn owns_key(&self, key: u64) -> bool {
        self.key_groups()
            .contains(key_group_of(key, self.max_parallelism))
    }
}

/// The hash exchange's routing table: key group → consumer subtask, built
/// once per output, so a record costs a hash, a mask (or a `%` when the
/// group count is not a power of two) and one load.
#[derive(Clone, Debug)]
pub(crate) struct KeyGroupRouter {
    table: Box<[u16]>,
    groups: u64,
    /// `groups - 1` when `groups` is a power of two (the default 128 is),
    /// else 0: then `hash & mask` is `hash % groups`. A 64-bit `%` by a
    /// value known only at run time is a division: callgrind counted the
    /// route at 15 instructions a record with it, 5 with the mask (W1,
    /// 500,000 records).
    mask: u64,
}

impl KeyGroupRouter {
    /// The table for `parallelism` consumers and `max_parallelism` groups.
    pub(crate) fn new(parallelism: usize, max_parallelism: u32) -> Self {
        let table = (0..max_parallelism)
            .map(|g| subtask_of_key_group(g as u16, parallelism, max_parallelism) as u16)
            .collect();
        let groups = u64::from(max_parallelism);
        KeyGroupRouter {
            table,
            groups,
            mask: if groups.is_power_of_two() {
                groups - 1
            } else {
                0
            },
        }
    }

    /// The consumer subtask of routing key `key`.
    #[inline]
    pub(crate) fn route(&self, key: u64) -> usize {
        let h = key_hash(key);
        let group = if self.mask != 0 {
            h & self.mask
        } else {
            h % self.groups
        };
        usize::from(self.table[group as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every key group has exactly one owner at every parallelism,
        /// the ranges agree with the routing formula, and after any
        /// rescale a key's owner is the subtask its records go to.
        #[test]
        fn every_key_group_has_one_owner_and_state_follows_records(
            max in 1u32..=512,
            p_old in 1usize..=512,
            p_new in 1usize..=512,
            keys in proptest::collection::vec(any::<u64>(), 1..64),
        ) {
            let (p_old, p_new) = (p_old.min(max as usize), p_new.min(max as usize));
            for p in [p_old, p_new] {
                let ranges: Vec<KeyGroupRange> =
                    (0..p).map(|i| KeyGroupRange::of_subtask(i, p, max)).collect();
                for g in 0..max as u16 {
                    let owners: Vec<usize> =
                        (0..p).filter(|i| ranges[*i].contains(g)).collect();
                    prop_assert_eq!(owners, vec![subtask_of_key_group(g, p, max)]);
                }
                prop_assert_eq!(ranges.iter().map(KeyGroupRange::len).sum::<usize>(), max as usize);
            }
            let router = KeyGroupRouter::new(p_new, max);
            for k in keys {
                let owner: Vec<usize> = (0..p_new)
                    .filter(|i| Rescale { subtask: *i, parallelism: p_new, old_parallelism: p_old, max_parallelism: max }.owns_key(k))
                    .collect();
                prop_assert_eq!(owner, vec![router.route(k)]);
                if max == DEFAULT_MAX_PARALLELISM {
                    prop_assert_eq!(router.route(k), key_to_subtask(k, p_new));
                }
            }
        }
    }

    #[test]
    fn a_parallelism_above_the_groups_leaves_some_subtasks_without_any() {
        let empty = (0..5)
            .filter(|i| KeyGroupRange::of_subtask(*i, 5, 3).is_empty())
            .count();
        assert_eq!(empty, 2);
    }
}
