//! [`MemoryStorage`]: checkpoints kept in memory, for tests.

use super::api::{
    validate_input, CheckpointHandle, CheckpointMetadata, CheckpointStorage, LoadedCheckpoint,
    Result, StorageError, TaskStateKey,
};
use super::local::CHK_PREFIX;
use crate::element::CheckpointId;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One checkpoint held by [`MemoryStorage`].
#[derive(Clone, Debug)]
struct MemoryEntry {
    metadata: CheckpointMetadata,
    states: BTreeMap<TaskStateKey, Vec<u8>>,
    total_bytes: u64,
}

/// An in-memory store for tests: same rules as [`LocalDirStorage`](crate::LocalDirStorage) (ids,
/// duplicates, retention), no durability, no checksums. It can be told to
/// fail writes, to test a coordinator's handling of storage failures.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    checkpoints: Mutex<BTreeMap<CheckpointId, MemoryEntry>>,
    fail_writes: AtomicBool,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// While `fail` is true, every [`CheckpointStorage::write_checkpoint`]
    /// fails with a [`StorageError::Io`] and stores nothing.
    pub fn set_fail_writes(&self, fail: bool) {
        self.fail_writes.store(fail, Ordering::SeqCst);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<CheckpointId, MemoryEntry>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (every update is a single insert/remove), so poisoning is ignored.
        self.checkpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn location(id: CheckpointId) -> PathBuf {
        PathBuf::from(format!("<memory>/{CHK_PREFIX}{}", id.get()))
    }
}

impl CheckpointStorage for MemoryStorage {
    fn write_checkpoint(
        &self,
        meta: &CheckpointMetadata,
        states: &[(TaskStateKey, Vec<u8>)],
    ) -> Result<CheckpointHandle> {
        validate_input(meta, states)?;
        let path = Self::location(meta.id);
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(StorageError::io(
                "writing",
                &path,
                io::Error::other("injected failure (MemoryStorage::set_fail_writes)"),
            ));
        }
        let mut map = self.map();
        if map.contains_key(&meta.id) {
            return Err(StorageError::AlreadyExists { id: meta.id, path });
        }
        let total_bytes = states.iter().map(|(_, b)| b.len() as u64).sum();
        map.insert(
            meta.id,
            MemoryEntry {
                metadata: meta.clone(),
                states: states.iter().cloned().collect(),
                total_bytes,
            },
        );
        Ok(CheckpointHandle {
            id: meta.id,
            path,
            total_bytes,
        })
    }

    fn list(&self) -> Result<Vec<CheckpointId>> {
        Ok(self.map().keys().copied().collect())
    }

    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint> {
        let map = self.map();
        let entry = map.get(&id).ok_or_else(|| StorageError::NotFound {
            id,
            root: PathBuf::from("<memory>"),
        })?;
        Ok(LoadedCheckpoint {
            metadata: entry.metadata.clone(),
            states: entry.states.clone(),
            handle: CheckpointHandle {
                id,
                path: Self::location(id),
                total_bytes: entry.total_bytes,
            },
        })
    }

    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata> {
        self.map()
            .get(&id)
            .map(|e| e.metadata.clone())
            .ok_or_else(|| StorageError::NotFound {
                id,
                root: PathBuf::from("<memory>"),
            })
    }

    fn remove(&self, id: CheckpointId) -> Result<()> {
        self.map()
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| StorageError::NotFound {
                id,
                root: PathBuf::from("<memory>"),
            })
    }
}
