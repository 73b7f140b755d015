//! Channel state of unaligned checkpoints: the in-flight elements a task
//! persists with its snapshot (records batches, watermarks, idle markers of
//! each input channel, in channel order; see `barrier/unaligned.rs`), and
//! their encoding in the task's checkpoint part.
//!
//! The state travels as one more operator snapshot of the task's part,
//! named [`CHANNEL_STATE_OPERATOR`] (a name no operator can have: operator
//! names are checked against it when a job is built), encoded with
//! postcard on the snapshot thread. It carries its checkpoint's id: an
//! incremental part's restore chain also holds the channel state of the
//! checkpoints it builds on, which must not be replayed again, so only the
//! state whose id is the restored checkpoint's is used.

use crate::operator::StateSnapshot;
use crate::transport::input_gate::ChannelState;
use crate::types::element::{CheckpointId, StreamElement, Watermark};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The reserved operator name of a task's channel state in its part.
pub(crate) const CHANNEL_STATE_OPERATOR: &str = "#channel-state";

/// One persisted element.
#[derive(Serialize, Deserialize)]
enum Item<T> {
    Records(Vec<T>),
    Watermark(i64),
    Idle(bool),
}

/// The encoded channel state of one task for one checkpoint.
#[derive(Serialize, Deserialize)]
struct Persisted<T> {
    checkpoint: u64,
    channels: Vec<Vec<Item<T>>>,
}

/// The snapshot of `state` for checkpoint `id`: encoded on the snapshot
/// thread (the asynchronous part), into a buffer of the exact size, kept
/// from an earlier part of this thread when it has one
/// ([`crate::util::buffers::snapshot_buffer`]: under sustained backpressure
/// every unaligned checkpoint encodes megabytes).
pub(crate) fn snapshot<T: Serialize + Send + 'static>(
    id: CheckpointId,
    state: ChannelState<T>,
) -> StateSnapshot {
    StateSnapshot::deferred(move || {
        let channels = state
            .into_iter()
            .map(|items| {
                items
                    .into_iter()
                    .filter_map(|el| match el {
                        StreamElement::Records(b) => Some(Item::Records(b)),
                        StreamElement::Watermark(w) => Some(Item::Watermark(w.0)),
                        StreamElement::Idle(i) => Some(Item::Idle(i)),
                        // Never recorded (`crate::transport::channel::takes_credit`).
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let persisted = Persisted {
            checkpoint: id.get(),
            channels,
        };
        let size = postcard::experimental::serialized_size(&persisted)?;
        Ok(postcard::to_extend(
            &persisted,
            crate::util::buffers::snapshot_buffer(size),
        )?)
    })
}

/// Decodes the channel state stored for checkpoint `restored`; `None` when
/// `bytes` belong to another checkpoint (an earlier one of an incremental
/// chain).
///
/// # Errors
/// When the bytes are not a channel state of records of type `T`.
pub(crate) fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    restored: CheckpointId,
) -> Result<Option<ChannelState<T>>, postcard::Error> {
    let persisted: Persisted<T> = postcard::from_bytes(bytes)?;
    if persisted.checkpoint != restored.get() {
        return Ok(None);
    }
    Ok(Some(
        persisted
            .channels
            .into_iter()
            .map(|items| {
                items
                    .into_iter()
                    .map(|item| match item {
                        Item::Records(b) => StreamElement::Records(b),
                        Item::Watermark(w) => StreamElement::Watermark(Watermark(w)),
                        Item::Idle(i) => StreamElement::Idle(i),
                    })
                    .collect()
            })
            .collect(),
    ))
}

/// True when `bytes`, a channel state stored for checkpoint `restored`,
/// hold at least one element (read without knowing the record type: the
/// checkpoint id and each channel's length are postcard varints at the
/// front). False for another checkpoint's state or unreadable bytes (the
/// restore then reports those when it decodes them).
pub(crate) fn holds_records(bytes: &[u8], restored: CheckpointId) -> bool {
    fn varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = bytes.split_first()?;
            *bytes = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    let mut rest = bytes;
    if varint(&mut rest) != Some(restored.get()) {
        return false;
    }
    let Some(channels) = varint(&mut rest) else {
        return false;
    };
    for _ in 0..channels {
        match varint(&mut rest) {
            Some(0) => {}
            Some(_) => return true,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::SnapshotRequest;

    #[test]
    fn channel_state_round_trips_and_a_stale_one_is_not_used() {
        let state: ChannelState<u64> = vec![
            vec![
                StreamElement::Records(vec![1, 2]),
                StreamElement::Watermark(Watermark(7)),
            ],
            vec![],
            vec![StreamElement::Idle(true), StreamElement::Records(vec![3])],
        ];
        let bytes = snapshot(CheckpointId(4), state.clone())
            .run(&SnapshotRequest::full(CheckpointId(4)))
            .unwrap()
            .bytes;
        assert!(holds_records(&bytes, CheckpointId(4)));
        assert!(!holds_records(&bytes, CheckpointId(5)));
        let empty = snapshot::<u64>(CheckpointId(4), vec![vec![], vec![]])
            .run(&SnapshotRequest::full(CheckpointId(4)))
            .unwrap()
            .bytes;
        assert!(!holds_records(&empty, CheckpointId(4)));
        assert_eq!(decode::<u64>(&bytes, CheckpointId(4)).unwrap(), Some(state));
        assert_eq!(decode::<u64>(&bytes, CheckpointId(5)).unwrap(), None);
        assert!(decode::<u64>(&bytes[..bytes.len() - 1], CheckpointId(4)).is_err());
    }
}
