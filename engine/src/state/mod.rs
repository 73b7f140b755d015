//! Operator state and its snapshot/restore contract.
//!
//! An operator's state is whatever it returns from
//! [`crate::Checkpointed::snapshot_state`] (bytes) and gets back in
//! [`crate::Checkpointed::restore_state`]. The snapshot is taken on the task
//! thread between two batches (after every record before the barrier, before
//! any record after it), so it must be a cheap synchronous copy; the bytes
//! are written to storage by the task's snapshot thread, off the record
//! path (and [`crate::Checkpointed::snapshot_state_async`] moves the
//! encoding there too).
//!
//! [`KeyedState`] (a value per key, e.g. a running sum) and [`ValueState`]
//! (one value per subtask, e.g. a source's read offset, Flink's operator
//! state) do the encoding with serde (postcard, a compact binary format),
//! so an operator only forwards their bytes.

use crate::operator::{
    Checkpointed, Context, EncodedState, Operator, SnapshotRequest, StateSnapshot,
};
use crate::types::element::{CheckpointId, Watermark};
use crate::types::error::BoxError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

/// The hash map of keyed state: foldhash's fast hasher, seeded per map
/// (the one `hashbrown` defaults to), instead of `std`'s SipHash-1-3: a
/// `u64` key costs a few instructions to hash, not about 130 (callgrind,
/// W1; see BENCHMARKS.md).
type StateMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use crate::types::key_groups::{key_group_of, KeyGroupRange, Rescale, DEFAULT_MAX_PARALLELISM};

/// Why state could not be encoded or decoded.
#[derive(thiserror::Error, Debug)]
#[error("state {what}: {source}")]
pub struct StateError {
    what: &'static str,
    #[source]
    source: postcard::Error,
}

/// A key of [`KeyedState`]: the routing key its records are partitioned
/// by, so that a key's state is stored in the key group its records go to
/// ([`crate::key_group_of`]) and, after a restore at another parallelism,
/// restored at the subtask that now receives them. The stream's `key_by`
/// must return the same `u64`: the key itself for integer keys
/// (`.key_by(|r| r.id)` with `KeyedState<u64, _>`), [`crate::hash_key`]
/// for strings and tuples (`.key_by(|r| hash_key(&r.name))` with
/// `KeyedState<String, _>`).
///
/// # Examples
/// ```
/// use lockgate::{hash_key, StateKey};
/// assert_eq!(42u64.routing_key(), 42);
/// assert_eq!(String::from("EWR").routing_key(), hash_key("EWR"));
/// assert_eq!((1u8, 'x').routing_key(), hash_key(&(1u8, 'x')));
/// ```
pub trait StateKey {
    /// The `u64` the job's `key_by` returns for this key's records.
    fn routing_key(&self) -> u64;
}

macro_rules! integer_state_keys {
    ($($t:ty),*) => {$(
        /// The value itself, as `u64` (negative values wrap, as `as u64`).
        impl StateKey for $t {
            #[inline]
            fn routing_key(&self) -> u64 {
                *self as u64
            }
        }
    )*};
}
integer_state_keys!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// The character's code point.
impl StateKey for char {
    fn routing_key(&self) -> u64 {
        u64::from(u32::from(*self))
    }
}

/// [`crate::hash_key`] of the string.
impl StateKey for str {
    fn routing_key(&self) -> u64 {
        crate::types::key_groups::hash_key(self)
    }
}

/// [`crate::hash_key`] of the string.
impl StateKey for String {
    fn routing_key(&self) -> u64 {
        crate::types::key_groups::hash_key(self.as_str())
    }
}

/// [`crate::hash_key`] of the pair.
impl<A: Hash, B: Hash> StateKey for (A, B) {
    fn routing_key(&self) -> u64 {
        crate::types::key_groups::hash_key(self)
    }
}

impl<T: StateKey + ?Sized> StateKey for &T {
    fn routing_key(&self) -> u64 {
        (**self).routing_key()
    }
}

/// The key group `key`'s entry is stored in: [`crate::key_group_of`] its
/// [`StateKey::routing_key`] among [`DEFAULT_MAX_PARALLELISM`] groups (the
/// layout of [`KeyedState`]'s snapshots; a job with another
/// `max_parallelism` routes by its own, and a rescale filters by key).
///
/// # Examples
/// ```
/// use lockgate::{key_group, key_group_of};
/// assert_eq!(key_group(&7u64), key_group_of(7, 128));
/// ```
pub fn key_group<K: StateKey + ?Sized>(key: &K) -> u16 {
    crate::types::key_groups::key_group_of(key.routing_key(), DEFAULT_MAX_PARALLELISM)
}

/// Keyed state: one value per key of the operator's subtask (Flink's
/// `MapState`/`ValueState` under a keyed stream), snapshotted
/// incrementally.
///
/// Memory: a `HashMap` of the keys this subtask has seen, plus, once a
/// checkpoint was taken with [`KeyedState::snapshot_async`], a replica of
/// the state owned by the snapshot thread (so twice the state). Costs: a
/// change marks its key once per checkpoint interval (a flag test and, the
/// first time, a push); [`KeyedState::snapshot_async`]'s synchronous part
/// copies only the keys changed since the last snapshot, O(changes), and
/// its asynchronous part applies them to the replica and encodes either
/// the changes since the base checkpoint (a delta, O(changes)) or the
/// whole replica (a full snapshot, O(state)), grouped by key group
/// ([`key_group`]). [`KeyedState::snapshot`] encodes everything at once.
///
/// # Examples
/// ```
/// use lockgate::{CheckpointId, KeyedState, SnapshotRequest};
/// let mut sums: KeyedState<u64, u64> = KeyedState::new();
/// for k in 0..100 {
///     *sums.get_or_default(k) += 5;
/// }
/// let full = sums.snapshot_async().run(&SnapshotRequest::full(CheckpointId(1))).unwrap();
/// *sums.get_or_default(7) += 1;
/// sums.remove(&8);
/// // Checkpoint 1 completed: checkpoint 2 may hold only what changed.
/// let req = SnapshotRequest { id: CheckpointId(2), base: Some(CheckpointId(1)) };
/// let delta = sums.snapshot_async().run(&req).unwrap();
/// assert!(delta.delta && delta.bytes.len() < 20);
/// let back = KeyedState::<u64, u64>::restore_chain(&[&full.bytes, &delta.bytes]).unwrap();
/// assert_eq!((back.get(&7), back.get(&8), back.len()), (Some(&6), None, 99));
/// assert!(KeyedState::<u64, u64>::restore(b"\xff\xff").is_err());
/// ```
pub struct KeyedState<K, V> {
    map: StateMap<K, Slot<V>>,
    /// Keys changed since the last snapshot, each once (see `Slot::dirty`).
    dirty: Vec<K>,
    /// Keys removed since the last snapshot.
    removed: Vec<K>,
    /// The snapshot thread's copy, created by the first `snapshot_async`.
    replica: Option<Arc<Mutex<Replica<K, V>>>>,
}

#[derive(Clone, Debug)]
struct Slot<V> {
    value: V,
    /// True once the key is in `dirty` (until the next snapshot).
    dirty: bool,
}

impl<K: Eq + Hash + Clone, V: Clone> Clone for KeyedState<K, V> {
    /// A copy of the values; the copy has its own (empty) snapshot history.
    fn clone(&self) -> Self {
        KeyedState {
            map: self.map.clone(),
            dirty: Vec::new(),
            removed: Vec::new(),
            replica: None,
        }
        .all_dirty()
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for KeyedState<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.map.iter().map(|(k, s)| (k, &s.value)))
            .finish()
    }
}

impl<K: Eq + Hash, V: PartialEq> PartialEq for KeyedState<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map.len() == other.map.len()
            && self
                .map
                .iter()
                .all(|(k, s)| other.map.get(k).is_some_and(|o| o.value == s.value))
    }
}

impl<K, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        KeyedState {
            map: StateMap::default(),
            dirty: Vec::new(),
            removed: Vec::new(),
            replica: None,
        }
    }
}

impl<K: Eq + Hash + Clone, V> KeyedState<K, V> {
    /// Empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks every key changed (after a restore or a copy: the next
    /// snapshot of this value starts a chain of its own).
    fn all_dirty(mut self) -> Self {
        self.dirty = self.map.keys().cloned().collect();
        for s in self.map.values_mut() {
            s.dirty = true;
        }
        self
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|s| &s.value)
    }

    /// The value of `key`, inserted with `V::default()` first if missing;
    /// the key counts as changed.
    #[inline]
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        let dirty = &mut self.dirty;
        let slot = match self.map.entry(key) {
            Entry::Occupied(o) => {
                if !o.get().dirty {
                    dirty.push(o.key().clone());
                }
                o.into_mut()
            }
            Entry::Vacant(v) => {
                dirty.push(v.key().clone());
                v.insert(Slot {
                    value: V::default(),
                    dirty: false,
                })
            }
        };
        slot.dirty = true;
        &mut slot.value
    }

    /// Sets the value of `key`; returns the old one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let old = match self.map.get_mut(&key) {
            Some(s) if s.dirty => return Some(std::mem::replace(&mut s.value, value)),
            Some(s) => {
                s.dirty = true;
                Some(std::mem::replace(&mut s.value, value))
            }
            None => {
                self.map.insert(key.clone(), Slot { value, dirty: true });
                None
            }
        };
        self.dirty.push(key);
        old
    }

    /// Removes `key` (e.g. when its window fired); returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let s = self.map.remove(key)?;
        self.removed.push(key.clone());
        Some(s.value)
    }

    /// Keeps only the keys for which `keep(key, value)` is true; the others
    /// are removed (as [`KeyedState::remove`]: a delta records them).
    ///
    /// # Examples
    /// ```
    /// let mut s = lockgate::KeyedState::<u64, u64>::new();
    /// for k in 0..10 {
    ///     s.insert(k, k * k);
    /// }
    /// s.retain(|k, _| k % 2 == 0);
    /// assert_eq!((s.len(), s.get(&4), s.get(&5)), (5, Some(&16), None));
    /// ```
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let removed = &mut self.removed;
        self.map.retain(|k, s| {
            let kept = keep(k, &s.value);
            if !kept {
                removed.push(k.clone());
            }
            kept
        });
    }

    /// Keys with a value.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no key has a value.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every key and value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, s)| (k, &s.value))
    }
}

/// One encoded snapshot of keyed state, full or delta: the entries by key
/// group (ascending, empty groups left out); `None` marks a key removed
/// since the base (deltas only). `format` is [`KEYED_FORMAT`].
#[derive(Serialize, Deserialize)]
struct KeyedPart<K, V> {
    format: u8,
    delta: bool,
    groups: Vec<KeyGroupEntries<K, V>>,
}

/// The entries of one key group: `(group, [(key, value or removed)])`.
type KeyGroupEntries<K, V> = (u16, Vec<(K, Option<V>)>);

/// The version of [`KeyedPart`]'s layout.
const KEYED_FORMAT: u8 = 1;

/// Entries a snapshot thread handles between two
/// [`yield_point`](crate::yield_point)s while it applies or groups
/// changes: ~1,000 hash-map operations, some tens of µs.
const YIELD_EVERY_ENTRIES: usize = 1024;

/// What a snapshot's synchronous part hands over: the changed keys, or,
/// when most keys changed, every entry (a plain copy, cheaper than one
/// hash lookup per changed key, and a full snapshot is no bigger than such
/// a delta).
enum Changes<K, V> {
    Some(Vec<(K, Option<V>)>),
    All(Vec<(K, V)>),
}

/// The snapshot thread's copy of a [`KeyedState`], with what it needs to
/// write deltas: which keys changed in each snapshot since the last
/// completed one, and the exact size of a full encoding, kept up to date.
struct Replica<K, V> {
    /// The state as of the last snapshot: a map once a delta was applied
    /// to it, else the plain copy of the last full change set (W2 with
    /// 10,000 keys changes most keys between checkpoints and never needs
    /// the map).
    map: StateMap<K, V>,
    copy: Option<Vec<(K, V)>>,
    /// Entries per key group.
    counts: Vec<u64>,
    /// The sum of the encoded sizes of `(key, Some(value))`, bytes.
    entry_bytes: u64,
    /// Keys changed by each snapshot taken after `first`, by checkpoint;
    /// `None`: all.
    log: BTreeMap<CheckpointId, Option<Vec<K>>>,
    /// The last snapshot encoded full: no delta for an older base (the
    /// log holds every snapshot's changes since).
    first: Option<CheckpointId>,
}

/// The size of a varint (LEB128, postcard's encoding of lengths and
/// integers): 7 bits a byte, bytes.
pub(crate) fn varint_len(v: u64) -> u64 {
    u64::from(64 - v.max(1).leading_zeros()).div_ceil(7)
}

fn encoded_size<T: Serialize + ?Sized>(v: &T) -> Result<u64, StateError> {
    postcard::experimental::serialized_size(v)
        .map(|n| n as u64)
        .map_err(|source| StateError {
            what: "does not encode",
            source,
        })
}

/// The bytes of [`KeyedPart`]'s fixed fields and group headers for
/// `counts` entries per group: format, flag, group count, then per
/// non-empty group its id and its entry count.
fn headers_size(counts: &[u64]) -> u64 {
    let groups = counts.iter().filter(|c| **c > 0).count() as u64;
    let headers: u64 = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(g, c)| varint_len(g as u64) + varint_len(*c))
        .sum();
    2 + varint_len(groups) + headers
}

impl<K, V> Replica<K, V>
where
    K: Serialize + Eq + Hash + Clone + StateKey,
    V: Serialize,
{
    fn new() -> Self {
        Replica {
            map: StateMap::default(),
            copy: None,
            counts: vec![0; DEFAULT_MAX_PARALLELISM as usize],
            entry_bytes: 0,
            log: BTreeMap::new(),
            first: None,
        }
    }

    /// The exact size of a full encoding, bytes.
    fn full_size(&self) -> u64 {
        headers_size(&self.counts) + self.entry_bytes
    }

    /// The map, built from the plain copy first if there is one.
    fn map(&mut self) -> &mut StateMap<K, V> {
        if let Some(copy) = self.copy.take() {
            let mut map = StateMap::default();
            map.reserve(copy.len());
            for (i, (k, v)) in copy.into_iter().enumerate() {
                map.insert(k, v);
                if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
                    crate::util::background::yield_point();
                }
            }
            self.map = map;
        }
        &mut self.map
    }

    fn apply(&mut self, changes: Vec<(K, Option<V>)>) -> Result<Vec<K>, StateError> {
        let mut keys = Vec::with_capacity(changes.len());
        self.map();
        for (i, (k, v)) in changes.into_iter().enumerate() {
            if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
                crate::util::background::yield_point();
            }
            let g = key_group(&k) as usize;
            if let Some(old) = self.map.get(&k) {
                self.entry_bytes -= encoded_size(&(&k, Some(old)))?;
                if v.is_none() {
                    self.counts[g] -= 1;
                }
            } else if v.is_some() {
                self.counts[g] += 1;
            }
            match v {
                Some(v) => {
                    self.entry_bytes += encoded_size(&(&k, Some(&v)))?;
                    self.map.insert(k.clone(), v);
                }
                None => {
                    self.map.remove(&k);
                }
            }
            keys.push(k);
        }
        Ok(keys)
    }

    /// Encodes `entries` by key group; also returns the entries per group.
    fn encode<'a>(
        delta: bool,
        entries: impl Iterator<Item = (&'a K, Option<&'a V>)>,
    ) -> Result<(Vec<u8>, Vec<u64>), StateError>
    where
        K: 'a,
        V: 'a,
    {
        let mut groups: Vec<Vec<(&K, Option<&V>)>> =
            (0..DEFAULT_MAX_PARALLELISM).map(|_| Vec::new()).collect();
        for (i, (k, v)) in entries.enumerate() {
            groups[key_group(k) as usize].push((k, v));
            if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
                crate::util::background::yield_point();
            }
        }
        let counts = groups.iter().map(|g| g.len() as u64).collect();
        // [`KeyedPart`]'s bytes, written field by field and group by group
        // (postcard is a plain concatenation: a struct is its fields in
        // order, a sequence its length then its elements; tested against
        // encoding the whole part), with a yield point between groups: a
        // full part of 1,000,000 keys takes tens of ms on a snapshot
        // thread, which must not hold a core that long
        // ([`crate::yield_point`]).
        let err = |source| StateError {
            what: "does not encode",
            source,
        };
        let present = groups.iter().filter(|e| !e.is_empty()).count();
        let mut bytes =
            postcard::to_extend(&(KEYED_FORMAT, delta, present), Vec::new()).map_err(err)?;
        for (g, e) in groups.iter().enumerate().filter(|(_, e)| !e.is_empty()) {
            bytes = postcard::to_extend(&(g as u16, e), bytes).map_err(err)?;
            crate::util::background::yield_point();
        }
        Ok((bytes, counts))
    }

    /// Encodes everything; the counters are taken from the encoding.
    fn encode_full(&mut self) -> Result<EncodedState, StateError> {
        let (bytes, counts) = match &self.copy {
            Some(c) => Self::encode(false, c.iter().map(|(k, v)| (k, Some(v))))?,
            None => Self::encode(false, self.map.iter().map(|(k, v)| (k, Some(v))))?,
        };
        self.entry_bytes = bytes.len() as u64 - headers_size(&counts);
        self.counts = counts;
        Ok(EncodedState::full(bytes))
    }

    /// Applies checkpoint `req.id`'s changes and encodes the snapshot it
    /// asks for: a delta since `req.base` when this replica has every
    /// change since then and the delta is smaller than the state, else
    /// everything.
    fn snapshot(
        &mut self,
        req: &SnapshotRequest,
        changes: Changes<K, V>,
    ) -> Result<EncodedState, StateError> {
        let logged = match changes {
            Changes::Some(c) => Some(self.apply(c)?),
            Changes::All(all) => {
                self.map.clear();
                self.copy = Some(all);
                None
            }
        };
        self.log.insert(req.id, logged);
        if let Some(base) = req.base.filter(|b| self.first.is_some_and(|f| f <= *b)) {
            // Changes at or before the base are in the base's chain.
            self.log = self.log.split_off(&base.next());
            if let Some(delta) = self.encode_delta()? {
                return Ok(delta);
            }
        }
        // A full part: the log restarts here. A later delta needs a base at
        // or after this snapshot (`first`), else that part is full too;
        // without this, every part full (`incremental` off, or no storage)
        // let the log grow by a snapshot's changed keys at every
        // checkpoint.
        self.log.clear();
        self.first = Some(req.id);
        self.encode_full()
    }

    /// The delta of the snapshots in the log (those after the request's
    /// base), `None` when it would not be smaller than the state (or the
    /// log holds a snapshot that changed everything).
    fn encode_delta(&mut self) -> Result<Option<EncodedState>, StateError> {
        if self.log.values().any(Option::is_none) {
            return Ok(None);
        }
        let mut seen = std::collections::HashSet::new();
        let keys: Vec<K> = self
            .log
            .values()
            .flatten()
            .flatten()
            .filter(|k| seen.insert(*k))
            .cloned()
            .collect();
        let map = self.map();
        if keys.len() >= map.len() {
            return Ok(None);
        }
        let full_bytes = self.full_size();
        let (bytes, _) = Self::encode(true, keys.iter().map(|k| (k, self.map.get(k))))?;
        if bytes.len() as u64 >= full_bytes {
            // Removals can make a delta of fewer keys as big as the state.
            return Ok(None);
        }
        Ok(Some(EncodedState {
            bytes,
            delta: true,
            full_bytes,
        }))
    }
}

impl<K, V> KeyedState<K, V>
where
    K: Serialize + DeserializeOwned + Eq + Hash + Clone + StateKey,
    V: Serialize + DeserializeOwned,
{
    /// The whole state as bytes, for [`crate::Checkpointed::snapshot_state`]
    /// (O(state) on the calling thread; [`KeyedState::snapshot_async`]
    /// is the cheap one).
    ///
    /// # Errors
    /// When a key or value cannot be encoded.
    pub fn snapshot(&self) -> Result<Vec<u8>, StateError> {
        Replica::<K, V>::encode(false, self.map.iter().map(|(k, s)| (k, Some(&s.value))))
            .map(|(bytes, _)| bytes)
    }

    /// The state from bytes of [`KeyedState::snapshot`] (or a full
    /// snapshot of [`KeyedState::snapshot_async`]).
    ///
    /// # Errors
    /// When the bytes are not such a snapshot (corrupt, of other types, or
    /// a delta).
    pub fn restore(bytes: &[u8]) -> Result<Self, StateError> {
        Self::restore_chain(&[bytes])
    }

    /// The state from a chain of snapshots of
    /// [`KeyedState::snapshot_async`], oldest first, as
    /// [`crate::Checkpointed::restore_state_chain`] gets it: the newest
    /// full one and the deltas after it are applied (older parts ignored).
    ///
    /// # Errors
    /// When a part does not decode, or no full snapshot starts the chain.
    pub fn restore_chain(chain: &[&[u8]]) -> Result<Self, StateError> {
        let mut map = StateMap::default();
        Self::apply_chain(chain, &mut map, |_| true)?;
        Ok(Self::of_map(map))
    }

    /// The state of one subtask after a restore at another parallelism
    /// (see [`crate::Checkpointed::restore_rescaled`]): the entries of the
    /// key groups it owns now, gathered from the chains of every old
    /// subtask (`chains[j]`: old subtask `j`'s parts, oldest first, as
    /// [`KeyedState::restore_chain`] takes them). O(state of all old
    /// subtasks) decoding; the key groups are disjoint, so no key is in
    /// two chains.
    ///
    /// # Errors
    /// As [`KeyedState::restore_chain`], for any chain.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{KeyedState, Rescale};
    /// let mut a: KeyedState<u64, u64> = KeyedState::new();
    /// for k in 0..100 { a.insert(k, k); }
    /// let bytes = a.snapshot().unwrap();
    /// let halves: Vec<KeyedState<u64, u64>> = (0..2)
    ///     .map(|i| {
    ///         let r = Rescale { subtask: i, parallelism: 2, old_parallelism: 1, max_parallelism: 128 };
    ///         KeyedState::restore_rescaled(&[vec![&bytes[..]]], &r).unwrap()
    ///     })
    ///     .collect();
    /// assert_eq!(halves[0].len() + halves[1].len(), 100);
    /// assert!(halves[0].len() > 0 && halves[1].len() > 0);
    /// ```
    pub fn restore_rescaled(chains: &[Vec<&[u8]>], rescale: &Rescale) -> Result<Self, StateError> {
        let groups: KeyGroupRange = rescale.key_groups();
        let max = rescale.max_parallelism;
        let mut map = StateMap::default();
        for chain in chains.iter().filter(|c| !c.is_empty()) {
            Self::apply_chain(chain, &mut map, |k| {
                groups.contains(key_group_of(k.routing_key(), max))
            })?;
        }
        Ok(Self::of_map(map))
    }

    fn of_map(map: StateMap<K, Slot<V>>) -> Self {
        KeyedState {
            map,
            dirty: Vec::new(),
            removed: Vec::new(),
            replica: None,
        }
        .all_dirty()
    }

    /// Applies `chain` (its newest full part and the deltas after it) to
    /// `map`, the entries of the keys `keep` accepts only.
    fn apply_chain(
        chain: &[&[u8]],
        map: &mut StateMap<K, Slot<V>>,
        keep: impl Fn(&K) -> bool,
    ) -> Result<(), StateError> {
        let mut parts = Vec::with_capacity(chain.len());
        for bytes in chain {
            let part: KeyedPart<K, V> =
                postcard::from_bytes(bytes).map_err(|source| StateError {
                    what: "does not decode",
                    source,
                })?;
            if part.format != KEYED_FORMAT {
                return Err(StateError {
                    what: "has an unknown format version",
                    source: postcard::Error::DeserializeBadEncoding,
                });
            }
            parts.push(part);
        }
        let Some(start) = parts.iter().rposition(|p| !p.delta) else {
            return Err(StateError {
                what: "has no full snapshot to start from (only deltas)",
                source: postcard::Error::DeserializeBadEncoding,
            });
        };
        for part in parts.into_iter().skip(start) {
            for (_, entries) in part.groups {
                for (k, v) in entries {
                    if !keep(&k) {
                        continue;
                    }
                    match v {
                        Some(v) => {
                            map.insert(
                                k,
                                Slot {
                                    value: v,
                                    dirty: true,
                                },
                            );
                        }
                        None => {
                            map.remove(&k);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl<K, V> KeyedState<K, V>
where
    K: Serialize + DeserializeOwned + Eq + Hash + Clone + StateKey + Send + 'static,
    V: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// An incremental snapshot, for
    /// [`crate::Checkpointed::snapshot_state_async`]: the synchronous part
    /// copies the keys changed since the last snapshot (O(changes)); the
    /// asynchronous part, on the snapshot thread, applies them to the
    /// replica and encodes a delta since the request's base, or a full
    /// snapshot when none is possible (no base, or a base older than this
    /// state's first snapshot).
    pub fn snapshot_async(&mut self) -> StateSnapshot {
        let changes = if (self.dirty.len() + self.removed.len()) * 4 > self.map.len() {
            // Most keys changed: one pass over the table beats a hash
            // lookup per changed key (W2 with 10,000 keys changes 86 % of
            // them every 100 ms), and the copy goes to the snapshot thread
            // as it is.
            self.dirty.clear();
            self.removed.clear();
            Changes::All(
                self.map
                    .iter_mut()
                    .map(|(k, s)| {
                        s.dirty = false;
                        (k.clone(), s.value.clone())
                    })
                    .collect(),
            )
        } else {
            let mut changes: Vec<(K, Option<V>)> =
                Vec::with_capacity(self.dirty.len() + self.removed.len());
            for k in self.removed.drain(..) {
                if !self.map.contains_key(&k) {
                    changes.push((k, None));
                }
            }
            for k in self.dirty.drain(..) {
                if let Some(s) = self.map.get_mut(&k) {
                    if s.dirty {
                        s.dirty = false;
                        changes.push((k, Some(s.value.clone())));
                    }
                }
            }
            Changes::Some(changes)
        };
        let replica = self
            .replica
            .get_or_insert_with(|| Arc::new(Mutex::new(Replica::new())))
            .clone();
        StateSnapshot::incremental(move |req| {
            // Only this state's snapshots, one at a time in checkpoint
            // order on one snapshot thread, take the lock; a panic in one
            // leaves the replica as good as the state it failed on.
            let mut r = replica.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(r.snapshot(req, changes)?)
        })
    }
}

/// Operator state: one value per subtask (Flink's operator state), e.g. a
/// source's read position.
///
/// # Examples
/// ```
/// use lockgate::ValueState;
/// let offset = ValueState(1_234u64);
/// let bytes = offset.snapshot().unwrap();
/// assert_eq!(ValueState::<u64>::restore(&bytes).unwrap().0, 1_234);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueState<T>(pub T);

/// Operator state as a list, redistributed evenly on a rescale (Flink's
/// `ListState` as operator state): the old subtasks' lists are
/// concatenated in subtask order and new subtask `i` of `P` gets the items
/// `i * n / P .. (i + 1) * n / P` of the `n`. For state that can be cut
/// anywhere (pending work items, buffered records).
///
/// # Examples
/// ```
/// use lockgate::{ListState, Rescale};
/// let (a, b) = (ListState(vec![1u32, 2, 3]), ListState(vec![4u32]));
/// let (a, b) = (a.snapshot().unwrap(), b.snapshot().unwrap());
/// let chains = [vec![&a[..]], vec![&b[..]]];
/// let share = |i| {
///     let r = Rescale { subtask: i, parallelism: 3, old_parallelism: 2, max_parallelism: 128 };
///     ListState::<u32>::restore_rescaled(&chains, &r).unwrap().0
/// };
/// assert_eq!((share(0), share(1), share(2)), (vec![1], vec![2], vec![3, 4]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListState<T>(pub Vec<T>);

/// Operator state as a list that every subtask gets whole on a rescale
/// (Flink's union list state): the old subtasks' lists concatenated in
/// subtask order; each new subtask keeps what it owns, e.g. the splits of
/// a source assigned to it.
///
/// # Examples
/// ```
/// use lockgate::{Rescale, UnionListState};
/// let (a, b) = (UnionListState(vec![(0u16, 10u64)]), UnionListState(vec![(1u16, 7u64)]));
/// let (a, b) = (a.snapshot().unwrap(), b.snapshot().unwrap());
/// let r = Rescale { subtask: 0, parallelism: 1, old_parallelism: 2, max_parallelism: 128 };
/// let all = UnionListState::<(u16, u64)>::restore_rescaled(&[vec![&a[..]], vec![&b[..]]], &r).unwrap();
/// assert_eq!(all.0, [(0, 10), (1, 7)]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnionListState<T>(pub Vec<T>);

/// The items of every old subtask's newest snapshot, in subtask order.
fn concat_lists<T: DeserializeOwned>(chains: &[Vec<&[u8]>]) -> Result<Vec<T>, StateError> {
    let mut all = Vec::new();
    for last in chains.iter().filter_map(|c| c.last()) {
        let items: Vec<T> = postcard::from_bytes(last).map_err(|source| StateError {
            what: "does not decode",
            source,
        })?;
        all.extend(items);
    }
    Ok(all)
}

/// `snapshot`/`restore` with postcard, for the operator states of one
/// value (the tuple struct's field).
macro_rules! postcard_state_codec {
    ($name:ident) => {
        impl<T: Serialize + DeserializeOwned> $name<T> {
            /// The state as bytes.
            ///
            /// # Errors
            /// When it cannot be encoded.
            pub fn snapshot(&self) -> Result<Vec<u8>, StateError> {
                postcard::to_allocvec(&self.0).map_err(|source| StateError {
                    what: "does not encode",
                    source,
                })
            }

            /// The state from bytes of its `snapshot`.
            ///
            /// # Errors
            /// When the bytes are not such a snapshot.
            pub fn restore(bytes: &[u8]) -> Result<Self, StateError> {
                postcard::from_bytes(bytes)
                    .map($name)
                    .map_err(|source| StateError {
                        what: "does not decode",
                        source,
                    })
            }
        }
    };
}
postcard_state_codec!(ValueState);
postcard_state_codec!(ListState);
postcard_state_codec!(UnionListState);

/// The managed state of one value snapshotted whole; with `rescaled`,
/// redistributed by its own `restore_rescaled` (the lists), else refused
/// on a rescale (the trait's default: [`ValueState`]).
macro_rules! managed_whole_state {
    ($name:ident $(, $rescaled:ident)?) => {
        impl<T: Serialize + DeserializeOwned + Send + 'static> ManagedState for $name<T> {
            fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError> {
                Ok(StateSnapshot::ready(self.snapshot()?))
            }

            fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError> {
                let last = chain.last().ok_or("no snapshot to restore")?;
                Ok($name::restore(last)?)
            }

            $(
            fn $rescaled(
                chains: &[Vec<&[u8]>],
                rescale: &Rescale,
            ) -> Result<Self, BoxError> {
                Ok($name::restore_rescaled(chains, rescale)?)
            }
            )?
        }
    };
}
managed_whole_state!(ValueState);
managed_whole_state!(ListState, restore_managed_rescaled);
managed_whole_state!(UnionListState, restore_managed_rescaled);

impl<T: DeserializeOwned> ListState<T> {
    /// This subtask's even share of the old subtasks' lists (see the
    /// type's doc).
    ///
    /// # Errors
    /// When a snapshot does not decode.
    pub fn restore_rescaled(chains: &[Vec<&[u8]>], rescale: &Rescale) -> Result<Self, StateError> {
        let all = concat_lists::<T>(chains)?;
        let (n, p, i) = (all.len(), rescale.parallelism.max(1), rescale.subtask);
        let (from, to) = (i * n / p, ((i + 1) * n / p).min(n));
        Ok(ListState(
            all.into_iter()
                .skip(from)
                .take(to.saturating_sub(from))
                .collect(),
        ))
    }
}

impl<T: DeserializeOwned> UnionListState<T> {
    /// Every old subtask's list, concatenated in subtask order.
    ///
    /// # Errors
    /// When a snapshot does not decode.
    pub fn restore_rescaled(chains: &[Vec<&[u8]>], _rescale: &Rescale) -> Result<Self, StateError> {
        Ok(UnionListState(concat_lists(chains)?))
    }
}

/// State the runtime snapshots and restores by itself (Flink's managed
/// state): [`KeyedState`] (incrementally), [`ValueState`], and pairs of
/// them. An operator that keeps its state in one (see [`Managed`]) writes
/// no snapshot or restore code, so it cannot forget any.
pub trait ManagedState: Send + Sized + 'static {
    /// The synchronous part of a snapshot (see
    /// [`crate::Checkpointed::snapshot_state_async`]).
    ///
    /// # Errors
    /// When the state cannot be encoded.
    fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError>;

    /// The state from a chain of snapshots, oldest first (see
    /// [`crate::Checkpointed::restore_state_chain`]).
    ///
    /// # Errors
    /// When the bytes do not decode.
    fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError>;

    /// The state of one subtask from the chains of every old subtask of
    /// a checkpoint taken at another parallelism (see
    /// [`crate::Checkpointed::restore_rescaled`]). Default: refused, for
    /// state with no rule to redistribute it (one value per subtask
    /// cannot be split or merged without knowing what it means).
    ///
    /// # Errors
    /// When the state has no redistribution rule, or the bytes do not
    /// decode.
    fn restore_managed_rescaled(
        _chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<Self, BoxError> {
        Err(Box::new(crate::types::error::FatalError(format!(
            "{} declares no rule to redistribute its state from parallelism {} to {}",
            std::any::type_name::<Self>(),
            rescale.old_parallelism,
            rescale.parallelism
        ))))
    }
}

impl<K, V> KeyedState<K, V>
where
    K: Serialize + Eq + Hash + Clone + StateKey,
    V: Serialize + Clone,
{
    /// After a restore, for [`KeyedState::snapshot_async`]: the snapshot
    /// thread's replica starts as a copy of the restored state and no key
    /// counts as changed, so the first snapshot's synchronous part is
    /// O(changes) like every other. (A restored state marks every key
    /// changed, so without a replica the first snapshot after a restore
    /// copied the whole state on the task thread, at a checkpoint, with
    /// records waiting.) O(state) here, on the restoring thread, before
    /// any record; the first snapshot is full all the same (the replica
    /// has no base). Managed state does it on every restore.
    ///
    /// # Errors
    /// When a key or value cannot be encoded (the replica counts sizes).
    fn with_replica(mut self) -> Result<Self, StateError> {
        let mut r = Replica::new();
        // The restored entries as one change set: the replica's own
        // bookkeeping (entries per group, encoded size) counts them.
        let entries = self
            .map
            .iter_mut()
            .map(|(k, slot)| {
                slot.dirty = false;
                (k.clone(), Some(slot.value.clone()))
            })
            .collect();
        r.apply(entries)?;
        self.dirty.clear();
        self.removed.clear();
        self.replica = Some(Arc::new(Mutex::new(r)));
        Ok(self)
    }
}

impl<K, V> ManagedState for KeyedState<K, V>
where
    K: Serialize + DeserializeOwned + Eq + Hash + Clone + StateKey + Send + 'static,
    V: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError> {
        Ok(self.snapshot_async())
    }

    fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError> {
        Ok(KeyedState::restore_chain(chain)?.with_replica()?)
    }

    fn restore_managed_rescaled(
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<Self, BoxError> {
        Ok(KeyedState::restore_rescaled(chains, rescale)?.with_replica()?)
    }
}

/// Two managed states side by side: one snapshot holds both, each part
/// full or a delta on its own.
impl<A: ManagedState, B: ManagedState> ManagedState for (A, B) {
    fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError> {
        let (a, b) = (self.0.snapshot_managed()?, self.1.snapshot_managed()?);
        Ok(StateSnapshot::incremental(move |req| {
            let (a, b) = (a.run(req)?, b.run(req)?);
            let pair: PairPart = (
                (a.delta, ByteBuf::from(a.bytes)),
                (b.delta, ByteBuf::from(b.bytes)),
            );
            let bytes = postcard::to_allocvec(&pair)?;
            let full = |n: u64| varint_len(n) + n + 1;
            Ok(EncodedState {
                full_bytes: full(a.full_bytes) + full(b.full_bytes),
                delta: pair.0 .0 || pair.1 .0,
                bytes,
            })
        }))
    }

    fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError> {
        let (a, b) = split_pair_chain(chain)?;
        Ok((
            A::restore_managed(&slices(&a))?,
            B::restore_managed(&slices(&b))?,
        ))
    }

    fn restore_managed_rescaled(
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<Self, BoxError> {
        let mut a = Vec::with_capacity(chains.len());
        let mut b = Vec::with_capacity(chains.len());
        for chain in chains {
            let (ca, cb) = split_pair_chain(chain)?;
            a.push(ca);
            b.push(cb);
        }
        let a: Vec<Vec<&[u8]>> = a.iter().map(|c| slices(c)).collect();
        let b: Vec<Vec<&[u8]>> = b.iter().map(|c| slices(c)).collect();
        Ok((
            A::restore_managed_rescaled(&a, rescale)?,
            B::restore_managed_rescaled(&b, rescale)?,
        ))
    }
}

/// The parts of one chain, oldest first.
type Parts = Vec<Vec<u8>>;

/// A chain of pair snapshots as the two halves' chains.
fn split_pair_chain(chain: &[&[u8]]) -> Result<(Parts, Parts), BoxError> {
    let mut a = Vec::with_capacity(chain.len());
    let mut b = Vec::with_capacity(chain.len());
    for bytes in chain {
        let ((_, pa), (_, pb)): PairPart = postcard::from_bytes(bytes)?;
        a.push(pa.into_vec());
        b.push(pb.into_vec());
    }
    Ok((a, b))
}

/// The parts of a chain as the slices the restore hooks take.
fn slices(parts: &[Vec<u8>]) -> Vec<&[u8]> {
    parts.iter().map(Vec::as_slice).collect()
}

/// One snapshot of a pair: (delta?, bytes) of each (`ByteBuf`: one
/// length and the raw bytes, not a sequence of bytes one by one).
type PairPart = ((bool, ByteBuf), (bool, ByteBuf));

/// An operator whose state the runtime manages: its calls get the state
/// as an argument, and [`Managed`] snapshots and restores it.
///
/// # Examples
/// ```
/// use lockgate::{BoxError, Context, KeyedState, Managed, Operator, StatefulOperator};
///
/// /// Counts records per key; no snapshot or restore code.
/// struct Count;
/// impl StatefulOperator<u64, (u64, u64)> for Count {
///     type State = KeyedState<u64, u64>;
///     fn process(
///         &mut self,
///         counts: &mut Self::State,
///         input: &mut Vec<u64>,
///         ctx: &mut Context<'_, (u64, u64)>,
///     ) -> Result<(), BoxError> {
///         for r in input.drain(..) {
///             let c = counts.get_or_default(r % 10);
///             *c += 1;
///             ctx.emit((r % 10, *c));
///         }
///         Ok(())
///     }
/// }
///
/// let mut op = Managed::new(Count);
/// let (mut out, mut timer) = (Vec::new(), None);
/// op.process(&mut vec![1, 11, 2], &mut Context::new(&mut out, None, &mut timer)).unwrap();
/// assert_eq!(out, [(1, 1), (1, 2), (2, 1)]);
/// assert_eq!(op.state().get(&1), Some(&2));
/// ```
pub trait StatefulOperator<I, O>: Send {
    /// The operator's state, managed by the runtime.
    type State: ManagedState + Default;

    /// As [`Operator::process`], with the state.
    ///
    /// # Errors
    /// As [`Operator::process`].
    fn process(
        &mut self,
        state: &mut Self::State,
        input: &mut Vec<I>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError>;

    /// As [`Operator::on_watermark`], with the state. Default: nothing.
    ///
    /// # Errors
    /// As [`Operator::on_watermark`].
    fn on_watermark(
        &mut self,
        _state: &mut Self::State,
        _watermark: Watermark,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// As [`Operator::on_processing_time`], with the state. Default:
    /// nothing.
    ///
    /// # Errors
    /// As [`Operator::on_processing_time`].
    fn on_processing_time(
        &mut self,
        _state: &mut Self::State,
        _now_ns: u64,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// As [`Operator::end_of_input`], with the state. Default: nothing.
    ///
    /// # Errors
    /// As [`Operator::end_of_input`].
    fn end_of_input(
        &mut self,
        _state: &mut Self::State,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A [`StatefulOperator`] with its state, as an [`Operator`] whose
/// snapshots and restores the runtime takes care of (incrementally for
/// [`KeyedState`]).
pub struct Managed<Op, S> {
    op: Op,
    state: S,
}

impl<Op, S> std::fmt::Debug for Managed<Op, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Managed { .. }")
    }
}

impl<Op, S: Default> Managed<Op, S> {
    /// `op` with an empty state.
    pub fn new(op: Op) -> Self {
        Managed {
            op,
            state: S::default(),
        }
    }
}

impl<Op, S> Managed<Op, S> {
    /// The state (for tests and inspection).
    pub fn state(&self) -> &S {
        &self.state
    }
}

impl<I, O, Op> Operator<I, O> for Managed<Op, Op::State>
where
    Op: StatefulOperator<I, O>,
{
    #[inline]
    fn process(&mut self, input: &mut Vec<I>, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.op.process(&mut self.state, input, ctx)
    }

    fn on_watermark(&mut self, w: Watermark, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.op.on_watermark(&mut self.state, w, ctx)
    }

    fn on_processing_time(
        &mut self,
        now_ns: u64,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        self.op.on_processing_time(&mut self.state, now_ns, ctx)
    }

    fn end_of_input(&mut self, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.op.end_of_input(&mut self.state, ctx)
    }
}

impl<Op: Send, S: ManagedState> Checkpointed for Managed<Op, S> {
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        Ok(Some(self.state.snapshot_managed()?))
    }

    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        self.state = S::restore_managed(chain)?;
        Ok(())
    }

    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        self.state = S::restore_managed_rescaled(chains, rescale)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A managed restore seeds the snapshot thread's replica, so the first
    /// snapshot after it copies only the keys changed since (not every
    /// restored key), and the replica is exact: the first part is full and
    /// restores the state, its reported full size is exact, and the next
    /// one is a small delta on it.
    #[test]
    fn a_managed_restore_leaves_the_first_snapshot_o_of_changes() {
        let mut s: KeyedState<u64, u64> = KeyedState::new();
        for k in 0..10_000 {
            s.insert(k, k);
        }
        let old = s.snapshot().unwrap();
        let mut s = <KeyedState<u64, u64> as ManagedState>::restore_managed(&[&old]).unwrap();
        assert!(s.dirty.is_empty(), "{} keys marked changed", s.dirty.len());
        assert!(s.map.values().all(|slot| !slot.dirty));
        *s.get_or_default(5) += 1;
        s.remove(&6);
        s.insert(20_000, 1);
        assert_eq!(s.dirty.len() + s.removed.len(), 3);
        let first = s
            .snapshot_async()
            .run(&SnapshotRequest::full(CheckpointId(4)))
            .unwrap();
        assert!(!first.delta);
        assert_eq!(first.full_bytes, s.snapshot().unwrap().len() as u64);
        let back = KeyedState::<u64, u64>::restore_chain(&[&first.bytes]).unwrap();
        assert_eq!(back, s);
        *s.get_or_default(7) += 1;
        let req = SnapshotRequest {
            id: CheckpointId(5),
            base: Some(CheckpointId(4)),
        };
        let delta = s.snapshot_async().run(&req).unwrap();
        assert!(delta.delta);
        assert!(delta.bytes.len() < 40, "{} bytes", delta.bytes.len());
        assert_eq!(delta.full_bytes, s.snapshot().unwrap().len() as u64);
        let back = KeyedState::<u64, u64>::restore_chain(&[&first.bytes, &delta.bytes]).unwrap();
        assert_eq!(back, s);
    }

    /// A full part restarts the replica's log of changed keys: with every
    /// part full it stays empty (it grew at every checkpoint before), and
    /// a delta on a base older than the last full part is written full
    /// (that log is gone), while one on the full part is a delta again.
    #[test]
    fn a_full_part_restarts_the_change_log() {
        let mut s: KeyedState<u64, u64> = KeyedState::new();
        for k in 0..1_000 {
            s.insert(k, k);
        }
        let req = |id, base: Option<u64>| SnapshotRequest {
            id: CheckpointId(id),
            base: base.map(CheckpointId),
        };
        for id in 1..=5 {
            *s.get_or_default(id) += 1;
            let part = s.snapshot_async().run(&req(id, None)).unwrap();
            assert!(!part.delta);
            let replica = s.replica.as_ref().unwrap().lock().unwrap();
            assert!(
                replica.log.is_empty(),
                "{} snapshots logged",
                replica.log.len()
            );
            assert_eq!(replica.first, Some(CheckpointId(id)));
        }
        // 5 is the last full part: a delta on 4 would miss 5's changes.
        *s.get_or_default(6) += 1;
        let on_4 = s.snapshot_async().run(&req(6, Some(4))).unwrap();
        assert!(!on_4.delta);
        assert_eq!(
            KeyedState::<u64, u64>::restore_chain(&[&on_4.bytes]).unwrap(),
            s
        );
        *s.get_or_default(7) += 1;
        let on_6 = s.snapshot_async().run(&req(7, Some(6))).unwrap();
        assert!(on_6.delta);
        let back = KeyedState::<u64, u64>::restore_chain(&[&on_4.bytes, &on_6.bytes]).unwrap();
        assert_eq!(back, s);
    }

    /// The encoding written group by group, with yield points between
    /// (on a background thread, where they yield), is exactly postcard's
    /// encoding of the whole [`KeyedPart`], for a full part and a delta
    /// with removals.
    #[test]
    fn keyed_parts_written_in_pieces_are_postcards_bytes() {
        std::thread::spawn(|| {
            crate::util::background::mark_background_thread();
            type V = (u64, String);
            let entries: Vec<(u64, Option<V>)> = (0..50_000u64)
                .map(|k| (k, (k % 7 != 0).then(|| (k * 3, format!("v{k}")))))
                .collect();
            for delta in [false, true] {
                let chosen: Vec<(&u64, Option<&V>)> = entries
                    .iter()
                    .filter(|(_, v)| delta || v.is_some())
                    .map(|(k, v)| (k, v.as_ref()))
                    .collect();
                let (bytes, counts) =
                    Replica::<u64, V>::encode(delta, chosen.iter().copied()).unwrap();
                let mut groups: Vec<Vec<(&u64, Option<&V>)>> =
                    (0..DEFAULT_MAX_PARALLELISM).map(|_| Vec::new()).collect();
                for (k, v) in &chosen {
                    groups[key_group(*k) as usize].push((k, *v));
                }
                assert_eq!(
                    counts,
                    groups.iter().map(|g| g.len() as u64).collect::<Vec<_>>()
                );
                let whole = KeyedPart {
                    format: KEYED_FORMAT,
                    delta,
                    groups: groups
                        .into_iter()
                        .enumerate()
                        .filter(|(_, e)| !e.is_empty())
                        .map(|(g, e)| (g as u16, e))
                        .collect(),
                };
                assert_eq!(
                    bytes,
                    postcard::to_allocvec(&whole).unwrap(),
                    "delta {delta}"
                );
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn keyed_state_round_trips_and_rejects_garbage() {
        let mut s: KeyedState<u64, (u64, String)> = KeyedState::new();
        *s.get_or_default(7) = (3, "x".into());
        s.insert(9, (1, "y".into()));
        assert_eq!(s.remove(&9), Some((1, "y".into())));
        let bytes = s.snapshot().unwrap();
        let back = KeyedState::<u64, (u64, String)>::restore(&bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.get(&7), Some(&(3, "x".into())));
        let err = KeyedState::<u64, (u64, String)>::restore(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(err.to_string().contains("does not decode"), "{err}");
    }

    #[test]
    fn value_state_round_trips() {
        let v = ValueState(123_456u64);
        assert_eq!(
            ValueState::<u64>::restore(&v.snapshot().unwrap()).unwrap(),
            v
        );
        assert!(ValueState::<u64>::restore(&[]).is_err());
    }
}
