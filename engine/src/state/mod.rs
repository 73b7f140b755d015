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

mod keyed;
mod lists;
mod managed;

pub(crate) use keyed::varint_len;
pub use keyed::KeyedState;
pub use lists::{ListState, UnionListState, ValueState};
pub use managed::{KeyedFold, Managed, ManagedState, StatefulOperator};

/// What [`Checkpointed`](crate::Checkpointed) hands the snapshot thread.
pub use crate::operator::{EncodedState, SnapshotRequest, StateSnapshot};

use std::collections::HashMap;

/// The hash map of keyed state: foldhash's fast hasher, seeded per map
/// (the one `hashbrown` defaults to), instead of `std`'s SipHash-1-3: a
/// `u64` key costs a few instructions to hash, not about 130 (callgrind,
/// W1; see docs/benchmarks-history.md).
pub(crate) type StateMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::hash::Hash;

use crate::types::key_groups::DEFAULT_MAX_PARALLELISM;

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
/// ([`crate::keys::key_group_of`]) and, after a restore at another parallelism,
/// restored at the subtask that now receives them. The stream's `key_by`
/// must return the same `u64`: the key itself for integer keys
/// (`.key_by(|r| r.id)` with `KeyedState<u64, _>`), [`crate::keys::hash_key`]
/// for strings and tuples (`.key_by(|r| hash_key(&r.name))` with
/// `KeyedState<String, _>`).
///
/// # Examples
/// ```
/// use lockgate::{keys::hash_key, state::StateKey};
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

/// [`crate::keys::hash_key`] of the string.
impl StateKey for str {
    fn routing_key(&self) -> u64 {
        crate::types::key_groups::hash_key(self)
    }
}

/// [`crate::keys::hash_key`] of the string.
impl StateKey for String {
    fn routing_key(&self) -> u64 {
        crate::types::key_groups::hash_key(self.as_str())
    }
}

/// [`crate::keys::hash_key`] of the pair.
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

/// The key group `key`'s entry is stored in: [`crate::keys::key_group_of`] its
/// [`StateKey::routing_key`] among [`DEFAULT_MAX_PARALLELISM`] groups (the
/// layout of [`KeyedState`]'s snapshots; a job with another
/// `max_parallelism` routes by its own, and a rescale filters by key).
///
/// # Examples
/// ```
/// use lockgate::{state::key_group, keys::key_group_of};
/// assert_eq!(key_group(&7u64), key_group_of(7, 128));
/// ```
pub fn key_group<K: StateKey + ?Sized>(key: &K) -> u16 {
    crate::types::key_groups::key_group_of(key.routing_key(), DEFAULT_MAX_PARALLELISM)
}
