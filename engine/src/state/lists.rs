//! Operator state of one value per subtask ([`ValueState`]) and lists
//! redistributed on a rescale ([`ListState`], [`UnionListState`]).

use super::managed::ManagedState;
use super::StateError;
use crate::operator::StateSnapshot;
use crate::types::error::BoxError;
use crate::types::key_groups::Rescale;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

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
/// use lockgate::{ListState, keys::Rescale};
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
/// use lockgate::{keys::Rescale, state::UnionListState};
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
