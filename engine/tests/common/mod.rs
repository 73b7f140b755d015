//! Sources and operators shared by the engine's integration tests.
#![allow(dead_code)]

use lockgate::*;
use lockgate::{state::KeyedFold, tuning::now_ns};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Keeps the largest sum seen per key (sums only grow, so the largest is
/// the last), across runs that share the map.
pub(crate) struct MaxSink(pub Arc<Mutex<HashMap<u64, u64>>>);

impl Sink<(u64, u64)> for MaxSink {
    fn write(&mut self, input: &mut Vec<(u64, u64)>) -> Result<(), BoxError> {
        let mut m = self.0.lock().unwrap();
        for (k, s) in input.drain(..) {
            let e = m.entry(k).or_default();
            *e = (*e).max(s);
        }
        Ok(())
    }
}

impl Checkpointed for MaxSink {}

/// Emits `next, next+step, ...` below `end` (`end = u64::MAX`: forever),
/// at most `per_poll` records a poll, then idles `pause_ns` if not 0; its
/// position is its state. With `hold` set, it idles at `end` (checkpoints
/// go on) until the flag is true, then finishes.
pub(crate) struct Counter {
    pub next: u64,
    pub end: u64,
    pub step: u64,
    pub per_poll: usize,
    pub pause_ns: u64,
    pub hold: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Counter {
    /// Subtask `i` of `p` emits the numbers `x < end` with `x % p == i`.
    pub(crate) fn part(i: usize, p: usize, end: u64) -> Self {
        Counter {
            next: i as u64,
            end,
            step: p as u64,
            per_poll: usize::MAX,
            pause_ns: 0,
            hold: None,
        }
    }

    /// As [`Counter::part`], `per_poll` records every `pause_ns`.
    pub(crate) fn paced(i: usize, p: usize, end: u64, per_poll: usize, pause_ns: u64) -> Self {
        Counter {
            per_poll,
            pause_ns,
            ..Counter::part(i, p, end)
        }
    }

    /// Idles at its end until `release` is true, then finishes.
    pub(crate) fn held(mut self, release: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.hold = Some(release);
        self
    }
}

impl Source<u64> for Counter {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
        let max = max.min(self.per_poll);
        while out.len() < max && self.next < self.end {
            out.push(self.next);
            self.next += self.step;
        }
        let held = self
            .hold
            .as_ref()
            .is_some_and(|r| !r.load(std::sync::atomic::Ordering::Acquire));
        Ok(if self.next >= self.end && held {
            SourcePoll::Idle {
                wake_at_ns: Some(now_ns() + 1_000_000),
            }
        } else if self.next >= self.end {
            SourcePoll::Finished
        } else if self.pause_ns > 0 {
            SourcePoll::Idle {
                wake_at_ns: Some(now_ns() + self.pause_ns),
            }
        } else {
            SourcePoll::Ready
        })
    }
}

impl Checkpointed for Counter {
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(self.next.to_le_bytes().to_vec()))
    }

    fn restore_state(&mut self, s: &[u8]) -> Result<(), BoxError> {
        self.next = u64::from_le_bytes(s.try_into()?);
        Ok(())
    }
}

/// Running sum per key `x % keys`; emits `(key, sum)`; its state (the
/// sums, in managed keyed state) is snapshotted incrementally.
pub(crate) fn keyed_sum(keys: u64) -> impl Operator<u64, (u64, u64)> + 'static {
    Managed::new(KeyedFold::new(
        move |x: &u64| x % keys,
        move |sum: &mut u64, x: u64| {
            *sum += x;
            (x % keys, *sum)
        },
    ))
}

/// The closed form of [`keyed_sum`] over `0..n`.
pub(crate) fn expected_sums(n: u64, keys: u64) -> HashMap<u64, u64> {
    let mut m = HashMap::new();
    for x in 0..n {
        *m.entry(x % keys).or_default() += x;
    }
    m
}

/// Polls `cond` every 5 ms for up to `secs` seconds.
pub(crate) fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    cond()
}

use lockgate::storage::{
    CheckpointHandle, CheckpointMetadata, CheckpointStorage, LatestValid, LoadedCheckpoint,
    PartHandle, StorageError, TaskStateKey,
};

/// Where a test steps into a storage's calls: each does nothing unless a
/// test's hooks say otherwise.
pub(crate) trait StorageHooks: Send + Sync {
    /// Before a part is written; an error fails the write instead.
    fn before_write(&self, _id: CheckpointId, _key: &TaskStateKey) -> Result<(), StorageError> {
        Ok(())
    }
    /// After a part was written; an error fails the write all the same.
    fn after_write(&self, _part: &PartHandle) -> Result<(), StorageError> {
        Ok(())
    }
    /// Before a checkpoint is published.
    fn before_publish(&self, _meta: &CheckpointMetadata) {}
    /// Before a checkpoint's parts are discarded.
    fn before_discard(&self, _id: CheckpointId) {}
    /// After a retention pass deleted checkpoints.
    fn after_remove_many(&self) {}
    /// Before the publisher reads a checkpoint's parts back.
    fn before_verify(&self) {}
}

/// `inner` with a test's `hooks`: every call of [`CheckpointStorage`]
/// goes to `inner`, the hooks around it.
pub(crate) struct Hooked<S, H> {
    pub(crate) inner: S,
    pub(crate) hooks: H,
}

impl<S: CheckpointStorage, H: StorageHooks> CheckpointStorage for Hooked<S, H> {
    fn is_empty(&self) -> Result<bool, StorageError> {
        self.inner.is_empty()
    }
    fn write_part(
        &self,
        id: CheckpointId,
        key: &TaskStateKey,
        bytes: &[u8],
    ) -> Result<PartHandle, StorageError> {
        self.hooks.before_write(id, key)?;
        let part = self.inner.write_part(id, key, bytes)?;
        self.hooks.after_write(&part)?;
        Ok(part)
    }
    fn write_part_blocks(&self) -> bool {
        // A test's hooks may wait in `before_write` (a hung disk).
        true
    }
    fn publish(
        &self,
        meta: &CheckpointMetadata,
        parts: &[PartHandle],
    ) -> Result<CheckpointHandle, StorageError> {
        self.hooks.before_publish(meta);
        self.inner.publish(meta, parts)
    }
    fn check_part(&self, part: &PartHandle) -> Result<(), StorageError> {
        self.inner.check_part(part)
    }
    fn verify_part(&self, part: &PartHandle) -> Result<(), StorageError> {
        self.inner.verify_part(part)
    }
    fn verify_parts(&self, parts: &[PartHandle]) -> Vec<Result<(), StorageError>> {
        self.hooks.before_verify();
        self.inner.verify_parts(parts)
    }
    fn discard(&self, id: CheckpointId) -> Result<(), StorageError> {
        self.hooks.before_discard(id);
        self.inner.discard(id)
    }
    fn list(&self) -> Result<Vec<CheckpointId>, StorageError> {
        self.inner.list()
    }
    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint, StorageError> {
        self.inner.load(id)
    }
    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata, StorageError> {
        self.inner.load_metadata(id)
    }
    fn load_latest_valid(&self) -> Result<LatestValid, StorageError> {
        self.inner.load_latest_valid()
    }
    fn part_bases(
        &self,
        id: CheckpointId,
    ) -> Result<Vec<(TaskStateKey, lockgate::storage::PartLink)>, StorageError> {
        self.inner.part_bases(id)
    }
    fn retain(&self, keep: usize) -> Result<Vec<CheckpointId>, StorageError> {
        self.inner.retain(keep)
    }
    fn remove_many(&self, ids: &[CheckpointId]) -> Result<(), StorageError> {
        let r = self.inner.remove_many(ids);
        self.hooks.after_remove_many();
        r
    }
    fn remove(&self, id: CheckpointId) -> Result<(), StorageError> {
        self.inner.remove(id)
    }
    fn set_aside(&self, id: CheckpointId) -> Result<Option<String>, StorageError> {
        self.inner.set_aside(id)
    }
    fn clean_temporaries(&self) -> Result<usize, StorageError> {
        self.inner.clean_temporaries()
    }
    fn traces(&self) -> Result<Vec<String>, StorageError> {
        self.inner.traces()
    }
}
