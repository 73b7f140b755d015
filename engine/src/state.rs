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

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::Hash;

/// Why state could not be encoded or decoded.
#[derive(thiserror::Error, Debug)]
#[error("state {what}: {source}")]
pub struct StateError {
    what: &'static str,
    #[source]
    source: postcard::Error,
}

/// Keyed state: one value per key of the operator's subtask (Flink's
/// `MapState`/`ValueState` under a keyed stream). Memory: a `HashMap` of the
/// keys this subtask has seen; a snapshot costs O(keys) to encode.
///
/// # Examples
/// ```
/// use lockgate::KeyedState;
/// let mut sums: KeyedState<u64, u64> = KeyedState::new();
/// *sums.get_or_default(7) += 5;
/// *sums.get_or_default(7) += 1;
/// let bytes = sums.snapshot().unwrap();
/// let back: KeyedState<u64, u64> = KeyedState::restore(&bytes).unwrap();
/// assert_eq!(back.get(&7), Some(&6));
/// assert!(KeyedState::<u64, u64>::restore(b"\xff\xff").is_err());
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize + Eq + Hash, V: Serialize",
    deserialize = "K: DeserializeOwned + Eq + Hash, V: DeserializeOwned"
))]
pub struct KeyedState<K, V> {
    map: HashMap<K, V>,
}

impl<K: Eq + Hash, V: PartialEq> PartialEq for KeyedState<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        KeyedState {
            map: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash, V> KeyedState<K, V> {
    /// Empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// The value of `key`, inserted with `V::default()` first if missing.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        self.map.entry(key).or_default()
    }

    /// Sets the value of `key`; returns the old one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.map.insert(key, value)
    }

    /// Removes `key` (e.g. when its window fired); returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
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
        self.map.iter()
    }
}

impl<K: Serialize + DeserializeOwned + Eq + Hash, V: Serialize + DeserializeOwned>
    KeyedState<K, V>
{
    /// The state as bytes, for [`crate::Checkpointed::snapshot_state`].
    ///
    /// # Errors
    /// When a key or value cannot be encoded.
    pub fn snapshot(&self) -> Result<Vec<u8>, StateError> {
        postcard::to_allocvec(self).map_err(|source| StateError {
            what: "does not encode",
            source,
        })
    }

    /// The state from bytes of [`KeyedState::snapshot`].
    ///
    /// # Errors
    /// When the bytes are not such a snapshot (corrupt, or of other types).
    pub fn restore(bytes: &[u8]) -> Result<Self, StateError> {
        postcard::from_bytes(bytes).map_err(|source| StateError {
            what: "does not decode",
            source,
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

impl<T: Serialize + DeserializeOwned> ValueState<T> {
    /// The value as bytes.
    ///
    /// # Errors
    /// When it cannot be encoded.
    pub fn snapshot(&self) -> Result<Vec<u8>, StateError> {
        postcard::to_allocvec(&self.0).map_err(|source| StateError {
            what: "does not encode",
            source,
        })
    }

    /// The value from bytes of [`ValueState::snapshot`].
    ///
    /// # Errors
    /// When the bytes are not such a snapshot.
    pub fn restore(bytes: &[u8]) -> Result<Self, StateError> {
        postcard::from_bytes(bytes)
            .map(ValueState)
            .map_err(|source| StateError {
                what: "does not decode",
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
