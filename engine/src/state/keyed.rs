//! [`KeyedState`]: a value per key, snapshotted incrementally by key
//! group through a replica the snapshot thread owns.

use super::{key_group, StateError, StateKey, StateMap};
use crate::operator::{EncodedState, SnapshotRequest, StateSnapshot};
use crate::types::element::CheckpointId;
use crate::types::key_groups::{key_group_of, KeyGroupRange, Rescale, DEFAULT_MAX_PARALLELISM};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

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
/// use lockgate::{CheckpointId, KeyedState, state::SnapshotRequest};
/// let mut sums: KeyedState<u64, u64> = KeyedState::new();
/// for k in 0..100 {
///     *sums.get_or_default(k) += 5;
/// }
/// let full = sums.snapshot_async().run(&SnapshotRequest::full(CheckpointId(1))).unwrap();
/// *sums.get_or_default(7) += 1;
/// sums.remove(&8);
/// // Checkpoint 1 completed: checkpoint 2 may hold only what changed.
/// let req = SnapshotRequest::delta(CheckpointId(2), CheckpointId(1));
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
    // Always: the per-record call of a keyed operator. With `#[inline]`
    // alone LLVM stopped inlining it into the chain's loop once keyed
    // state moved to a module of its own (W1: +12 instructions a record,
    // callgrind).
    #[inline(always)]
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

    /// The value of `key`, to change in place (e.g. a window's
    /// accumulator); the key counts as changed. `None` when missing.
    #[inline]
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let slot = self.map.get_mut(key)?;
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(key.clone());
        }
        Some(&mut slot.value)
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

/// One encoded snapshot of keyed state, full or delta, in the layout of
/// [`KEYED_FORMAT`] 2: the entries by key group (ascending, empty groups
/// left out, except a group rewritten empty); `None` marks a key removed
/// since the base (deltas only).
///
/// A delta also rewrites some key groups whole (`rewritten`: the group's
/// entries replace everything older parts hold for it), the groups whose
/// last rewrite is oldest, so that every group is rewritten once every
/// [`SnapshotRequest::spread`] checkpoints and the chain needs no part
/// older than `from` (the oldest last rewrite of a group with entries).
/// A full part writes `id` and `from` as 0 and every group `rewritten`.
#[derive(Serialize, Deserialize)]
struct KeyedPart<K, V> {
    format: u8,
    delta: bool,
    id: u64,
    from: u64,
    groups: Vec<KeyGroupPart<K, V>>,
}

/// One key group of a part: `(group, rewritten, [(key, value or removed)])`.
type KeyGroupPart<K, V> = (u16, bool, Vec<(K, Option<V>)>);

/// The layout of format 1 (builds before rolling rewrites): no ids, no
/// rewritten groups (a delta builds on the chain back to its full part).
#[derive(Deserialize)]
struct KeyedPartV1<K, V> {
    delta: bool,
    groups: Vec<KeyGroupEntriesV1<K, V>>,
}

/// A key group of format 1: `(group, [(key, value or removed)])`.
type KeyGroupEntriesV1<K, V> = (u16, Vec<(K, Option<V>)>);

/// The version of [`KeyedPart`]'s layout written now; 1 still restores.
const KEYED_FORMAT: u8 = 2;

/// Entries a snapshot thread handles between two
/// [`yield_point`](crate::tuning::yield_point)s while it applies or groups
/// changes: ~1,000 hash-map operations, some tens of µs.
const YIELD_EVERY_ENTRIES: usize = 1024;

/// The key groups of [`key_group`].
const GROUPS: usize = DEFAULT_MAX_PARALLELISM as usize;

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
/// completed one, which key group each part of the chain rewrote, and the
/// exact size of a full encoding, kept up to date.
struct Replica<K, V> {
    /// The state as of the last snapshot, one map per key group (a group
    /// rewritten is one map walked), once a delta was applied to it; else
    /// the plain copy of the last full change set (W2 with 10,000 keys
    /// changes most keys between checkpoints and never needs the maps).
    groups: Vec<StateMap<K, V>>,
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
    /// For each part written from the newest possible base on: per key
    /// group, the checkpoint whose part last rewrote it in that part's
    /// chain (a full part rewrites every group).
    rewrites: BTreeMap<CheckpointId, Vec<CheckpointId>>,
    /// Per key group, the last snapshot that changed one of its keys.
    changed: Vec<CheckpointId>,
    /// Bytes of rewrites earned and not yet spent (see `encode_delta`).
    credit: u64,
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

/// The bytes of a full [`KeyedPart`]'s fixed fields and group headers for
/// `counts` entries per group: format, flag, id and from (0), group count,
/// then per non-empty group its id, its flag and its entry count.
fn headers_size(counts: &[u64]) -> u64 {
    let groups = counts.iter().filter(|c| **c > 0).count() as u64;
    let headers: u64 = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(g, c)| varint_len(g as u64) + 1 + varint_len(*c))
        .sum();
    4 + varint_len(groups) + headers
}

fn encode_error(source: postcard::Error) -> StateError {
    StateError {
        what: "does not encode",
        source,
    }
}

/// Entries of one key group to encode: borrowed from the replica.
type GroupEntries<'a, K, V> = (u16, bool, Vec<(&'a K, Option<&'a V>)>);

/// [`KeyedPart`]'s bytes for `groups` (ascending), written field by field
/// and group by group (postcard is a plain concatenation: a struct is its
/// fields in order, a sequence its length then its elements; tested
/// against encoding the whole part), with a yield point between groups: a
/// full part of 1,000,000 keys takes tens of ms on a snapshot thread,
/// which must not hold a core that long ([`crate::tuning::yield_point`]).
fn encode_part<K: Serialize, V: Serialize>(
    delta: bool,
    id: u64,
    from: u64,
    groups: &[GroupEntries<'_, K, V>],
) -> Result<Vec<u8>, StateError> {
    let mut bytes = postcard::to_extend(&(KEYED_FORMAT, delta, id, from, groups.len()), Vec::new())
        .map_err(encode_error)?;
    for g in groups {
        bytes = postcard::to_extend(g, bytes).map_err(encode_error)?;
        crate::util::background::yield_point();
    }
    Ok(bytes)
}

/// `entries` by key group, ascending, empty groups left out, each marked
/// `rewritten`.
fn by_group<'a, K: StateKey + 'a, V: 'a>(
    rewritten: bool,
    entries: impl Iterator<Item = (&'a K, Option<&'a V>)>,
) -> Vec<GroupEntries<'a, K, V>> {
    let mut groups: Vec<Vec<(&K, Option<&V>)>> = (0..GROUPS).map(|_| Vec::new()).collect();
    for (i, (k, v)) in entries.enumerate() {
        groups[key_group(k) as usize].push((k, v));
        if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
            crate::util::background::yield_point();
        }
    }
    groups
        .into_iter()
        .enumerate()
        .filter(|(_, e)| !e.is_empty())
        .map(|(g, e)| (g as u16, rewritten, e))
        .collect()
}

impl<K, V> Replica<K, V>
where
    K: Serialize + Eq + Hash + Clone + StateKey,
    V: Serialize,
{
    fn new() -> Self {
        Replica {
            groups: (0..GROUPS).map(|_| StateMap::default()).collect(),
            copy: None,
            counts: vec![0; GROUPS],
            entry_bytes: 0,
            log: BTreeMap::new(),
            first: None,
            rewrites: BTreeMap::new(),
            changed: vec![CheckpointId(0); GROUPS],
            credit: 0,
        }
    }

    /// The exact size of a full encoding, bytes.
    fn full_size(&self) -> u64 {
        headers_size(&self.counts) + self.entry_bytes
    }

    /// Entries in the maps (the copy once built).
    fn len(&mut self) -> usize {
        self.maps().iter().map(|m| m.len()).sum()
    }

    /// The maps, built from the plain copy first if there is one.
    fn maps(&mut self) -> &mut [StateMap<K, V>] {
        if let Some(copy) = self.copy.take() {
            for (g, m) in self.groups.iter_mut().enumerate() {
                m.clear();
                m.reserve(self.counts[g] as usize);
            }
            for (i, (k, v)) in copy.into_iter().enumerate() {
                self.groups[key_group(&k) as usize].insert(k, v);
                if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
                    crate::util::background::yield_point();
                }
            }
        }
        &mut self.groups
    }

    /// Applies snapshot `id`'s changes; returns the keys changed.
    fn apply(
        &mut self,
        id: CheckpointId,
        changes: Vec<(K, Option<V>)>,
    ) -> Result<Vec<K>, StateError> {
        let mut keys = Vec::with_capacity(changes.len());
        self.maps();
        for (i, (k, v)) in changes.into_iter().enumerate() {
            if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
                crate::util::background::yield_point();
            }
            let g = key_group(&k) as usize;
            self.changed[g] = id;
            let map = &mut self.groups[g];
            if let Some(old) = map.get(&k) {
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
                    map.insert(k.clone(), v);
                }
                None => {
                    map.remove(&k);
                }
            }
            keys.push(k);
        }
        Ok(keys)
    }

    /// Encodes everything; the counters are taken from the encoding.
    fn encode_full(&mut self) -> Result<EncodedState, StateError> {
        let groups = match &self.copy {
            Some(c) => by_group(true, c.iter().map(|(k, v)| (k, Some(v)))),
            None => self
                .groups
                .iter()
                .enumerate()
                .filter(|(_, m)| !m.is_empty())
                .map(|(g, m)| {
                    (
                        g as u16,
                        true,
                        m.iter().map(|(k, v)| (k, Some(v))).collect(),
                    )
                })
                .collect(),
        };
        let mut counts = vec![0; GROUPS];
        for (g, _, e) in &groups {
            counts[*g as usize] = e.len() as u64;
        }
        let bytes = encode_part(false, 0, 0, &groups)?;
        drop(groups);
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
            Changes::Some(c) => Some(self.apply(req.id, c)?),
            Changes::All(all) => {
                for m in &mut self.groups {
                    m.clear();
                }
                self.copy = Some(all);
                None
            }
        };
        self.log.insert(req.id, logged);
        let base = req
            .base
            .filter(|b| self.first.is_some_and(|f| f <= *b) && self.rewrites.contains_key(b));
        if let Some(base) = base {
            // Changes at or before the base are in the base's chain, and
            // no later request builds on an older base.
            self.log = self.log.split_off(&base.next());
            self.rewrites = self.rewrites.split_off(&base);
            if let Some(delta) = self.encode_delta(req, base)? {
                return Ok(delta);
            }
            // Full, but the log since the base stays: until this part is
            // a verified base, the next ones still build on `base`, as
            // deltas. (Restarting the log here made them full too, one
            // after another while each waited to be read back: 4 full
            // parts of 3.7 MB in a row after 1.8 s without checkpoints,
            // W2 with 1,000,000 keys under `loadgen --ab`.)
            self.rewrites.insert(req.id, vec![req.id; GROUPS]);
            return self.encode_full();
        }
        // A full part: the log restarts here. A later delta needs a base at
        // or after this snapshot (`first`), else that part is full too;
        // without this, every part full (`incremental` off, or no storage)
        // let the log grow by a snapshot's changed keys at every
        // checkpoint.
        self.log.clear();
        self.first = Some(req.id);
        self.rewrites.clear();
        self.rewrites.insert(req.id, vec![req.id; GROUPS]);
        self.credit = 0;
        self.encode_full()
    }

    /// The delta of the snapshots in the log (those after `base`), with
    /// the key groups whose turn it is rewritten whole; `None` when it
    /// would not be smaller than the state (or the log holds a snapshot
    /// that changed everything).
    fn encode_delta(
        &mut self,
        req: &SnapshotRequest,
        base: CheckpointId,
    ) -> Result<Option<EncodedState>, StateError> {
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
        let total = self.len();
        if keys.len() >= total {
            return Ok(None);
        }
        let full_bytes = self.full_size();
        let mut at = self.rewrites[&base].clone();
        // A group must be in the chain from its last rewrite on while it
        // has entries or changed since: an empty group untouched since its
        // last rewrite was empty then, so older parts hold nothing of it.
        let live: Vec<usize> = (0..GROUPS)
            .filter(|&g| self.counts[g] > 0 || self.changed[g] > at[g])
            .collect();
        // The others are empty and no part since their last rewrite holds
        // an entry of theirs: they count as rewritten (empty) here, so
        // that one filled later does not pull the chain back to a part
        // dropped from it meanwhile (found by the proptest).
        for (g, a) in at.iter_mut().enumerate() {
            if self.counts[g] == 0 && self.changed[g] <= *a {
                *a = req.id;
            }
        }
        let mut turn = live.clone();
        turn.sort_by_key(|&g| at[g]);
        // Each part earns 1/spread of the state's bytes and spends them on
        // whole groups, oldest rewrite first: the state is rewritten about
        // once every `spread` parts, a little at each. A group not
        // rewritten for twice that goes anyway (parts of aborted
        // checkpoints spent credit on rewrites no chain kept).
        let spread = u64::from(req.spread.max(1));
        self.credit = (self.credit + self.entry_bytes.div_ceil(spread)).min(self.entry_bytes);
        let per_entry = self.entry_bytes / (total as u64).max(1);
        let mut rewritten = [false; GROUPS];
        for g in turn {
            let size = self.counts[g] * per_entry;
            let overdue = at[g].get().saturating_add(2 * spread) <= req.id.get();
            if size > self.credit && !overdue {
                break;
            }
            self.credit = self.credit.saturating_sub(size);
            rewritten[g] = true;
            at[g] = req.id;
        }
        let from = live.iter().map(|&g| at[g]).min().unwrap_or(req.id);
        let mut changed: Vec<Vec<(&K, Option<&V>)>> = (0..GROUPS).map(|_| Vec::new()).collect();
        for (i, k) in keys.iter().enumerate() {
            let g = key_group(k) as usize;
            if !rewritten[g] {
                changed[g].push((k, self.groups[g].get(k)));
            }
            if i % YIELD_EVERY_ENTRIES == YIELD_EVERY_ENTRIES - 1 {
                crate::util::background::yield_point();
            }
        }
        let groups: Vec<GroupEntries<'_, K, V>> = changed
            .into_iter()
            .enumerate()
            .filter_map(|(g, e)| {
                if rewritten[g] {
                    let all = self.groups[g].iter().map(|(k, v)| (k, Some(v))).collect();
                    Some((g as u16, true, all))
                } else {
                    (!e.is_empty()).then_some((g as u16, false, e))
                }
            })
            .collect();
        let bytes = encode_part(true, req.id.get(), from.get(), &groups)?;
        if bytes.len() as u64 >= full_bytes {
            // Removals can make a delta of fewer keys as big as the state.
            return Ok(None);
        }
        self.rewrites.insert(req.id, at);
        Ok(Some(EncodedState::rolling(bytes, full_bytes, from)))
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
        encode_part(
            false,
            0,
            0,
            &by_group(true, self.map.iter().map(|(k, s)| (k, Some(&s.value)))),
        )
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
    /// use lockgate::{KeyedState, keys::Rescale};
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

    /// Applies `chain` to `map`, the entries of the keys `keep` accepts
    /// only: from its newest full part, or, when the newest part is a
    /// delta that needs only the parts from checkpoint `from` on (a
    /// rolling rewrite), from that part; each key group from its last
    /// rewrite on.
    fn apply_chain(
        chain: &[&[u8]],
        map: &mut StateMap<K, Slot<V>>,
        keep: impl Fn(&K) -> bool,
    ) -> Result<(), StateError> {
        let bad = |what| StateError {
            what,
            source: postcard::Error::DeserializeBadEncoding,
        };
        let mut parts = Vec::with_capacity(chain.len());
        for bytes in chain {
            parts.push(decode_part::<K, V>(bytes)?);
        }
        let full = parts.iter().rposition(|p| !p.delta);
        let start = match parts.last() {
            None => return Ok(()),
            Some(last) if last.delta && last.from > 0 => {
                // `from` is a delta of the chain, or its full part.
                match parts.iter().rposition(|p| p.delta && p.id == last.from) {
                    Some(i) => Some(i.max(full.unwrap_or(0))),
                    None => full,
                }
                .ok_or(bad(
                    "misses the parts its newest delta builds on (no full snapshot, no part of the checkpoint it names)",
                ))?
            }
            Some(_) => full.ok_or(bad("has no full snapshot to start from (only deltas)"))?,
        };
        let parts = &mut parts[start..];
        // Per key group, the last part that rewrote it: older entries of
        // the group are superseded.
        let mut last_rewrite: std::collections::HashMap<u16, usize> = Default::default();
        for (i, p) in parts.iter().enumerate() {
            for (g, rewritten, _) in &p.groups {
                if *rewritten {
                    last_rewrite.insert(*g, i);
                }
            }
        }
        for (i, part) in parts.iter_mut().enumerate() {
            for (g, _, entries) in std::mem::take(&mut part.groups) {
                if last_rewrite.get(&g).is_some_and(|&r| r > i) {
                    continue;
                }
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

/// A part of either format as [`KeyedPart`] (format 1: ids 0, no group
/// rewritten, except that a full part's groups all are).
fn decode_part<K: DeserializeOwned, V: DeserializeOwned>(
    bytes: &[u8],
) -> Result<KeyedPart<K, V>, StateError> {
    let err = |source| StateError {
        what: "does not decode",
        source,
    };
    let (format, rest) = postcard::take_from_bytes::<u8>(bytes).map_err(err)?;
    match format {
        1 => {
            let p: KeyedPartV1<K, V> = postcard::from_bytes(rest).map_err(err)?;
            Ok(KeyedPart {
                format,
                delta: p.delta,
                id: 0,
                from: 0,
                groups: p
                    .groups
                    .into_iter()
                    .map(|(g, e)| (g, !p.delta, e))
                    .collect(),
            })
        }
        KEYED_FORMAT => postcard::from_bytes(bytes).map_err(err),
        _ => Err(StateError {
            what: "has an unknown format version",
            source: postcard::Error::DeserializeBadEncoding,
        }),
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
        let changes = if (self.dirty.len() + self.removed.len()) * 4 > self.map.len() * 3 {
            // Most keys changed: one pass over the table beats a hash
            // lookup per changed key (W2 with 10,000 keys changes 86 % of
            // them every 100 ms), and the copy goes to the snapshot thread
            // as it is. Not below three quarters: the copy makes the part
            // full (at a quarter, 1.8 s without checkpoints made W2 with
            // 1,000,000 keys copy 470,000 entries, 50 ms, and write 3.7
            // MB where a delta of a third of it would do).
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
    pub(super) fn with_replica(mut self) -> Result<Self, StateError> {
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
        r.apply(CheckpointId(0), entries)?;
        self.dirty.clear();
        self.removed.clear();
        self.replica = Some(Arc::new(Mutex::new(r)));
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ManagedState, ValueState};

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
        let req = SnapshotRequest::delta(CheckpointId(5), CheckpointId(4));
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
            spread: SnapshotRequest::DEFAULT_SPREAD,
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
                let bytes =
                    encode_part(delta, 77, 5, &by_group(!delta, chosen.iter().copied())).unwrap();
                let mut groups: Vec<Vec<(&u64, Option<&V>)>> =
                    (0..DEFAULT_MAX_PARALLELISM).map(|_| Vec::new()).collect();
                for (k, v) in &chosen {
                    groups[key_group(*k) as usize].push((k, *v));
                }
                let whole = KeyedPart {
                    format: KEYED_FORMAT,
                    delta,
                    id: 77,
                    from: 5,
                    groups: groups
                        .into_iter()
                        .enumerate()
                        .filter(|(_, e)| !e.is_empty())
                        .map(|(g, e)| (g as u16, !delta, e))
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
        assert!(err.to_string().contains("unknown format version"), "{err}");
        let err = KeyedState::<u64, (u64, String)>::restore(&[KEYED_FORMAT, 0xff]).unwrap_err();
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
