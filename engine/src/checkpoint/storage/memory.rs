//! [`MemoryStorage`]: checkpoints kept in memory. A job that checkpoints
//! without a folder or a storage of its own keeps them in one.

use super::api::{
    validate_id, validate_parts, CheckpointHandle, CheckpointMetadata, CheckpointStorage,
    LoadedCheckpoint, PartHandle, PartLink, Result, StorageError, TaskStateKey,
};
use super::local::CHK_PREFIX;
use crate::types::element::CheckpointId;
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
    /// The base of each delta part.
    bases: BTreeMap<TaskStateKey, PartLink>,
    total_bytes: u64,
}

/// An in-memory store: the same rules as
/// [`LocalDirStorage`](crate::storage::LocalDirStorage) (ids, duplicates, chains of
/// incremental parts, retention), no durability, no checksums. A job
/// without a checkpoint folder keeps its checkpoints in one; a test can
/// share one with a job to inspect what it wrote, or tell it to fail
/// writes, to test the handling of storage failures.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    checkpoints: Mutex<BTreeMap<CheckpointId, MemoryEntry>>,
    /// Parts written, not yet published, by checkpoint.
    staged: Mutex<BTreeMap<CheckpointId, BTreeMap<TaskStateKey, Vec<u8>>>>,
    fail_writes: AtomicBool,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// While `fail` is true, every [`CheckpointStorage::write_part`],
    /// [`CheckpointStorage::publish`] and
    /// [`CheckpointStorage::write_checkpoint`] fails with a
    /// [`StorageError::Io`] and stores nothing.
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

    fn staged(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<CheckpointId, BTreeMap<TaskStateKey, Vec<u8>>>> {
        // As `map`: every update is a single insert/remove.
        self.staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check_failing(&self, path: &std::path::Path) -> Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(StorageError::io(
                "writing",
                path,
                io::Error::other("injected failure (MemoryStorage::set_fail_writes)"),
            ));
        }
        Ok(())
    }

    fn location(id: CheckpointId) -> PathBuf {
        PathBuf::from(format!("<memory>/{CHK_PREFIX}{}", id.get()))
    }
}

impl CheckpointStorage for MemoryStorage {
    fn write_part(&self, id: CheckpointId, key: &TaskStateKey, bytes: &[u8]) -> Result<PartHandle> {
        validate_id(id)?;
        let file = format!("{}-{}", key.task, key.subtask);
        self.check_failing(&Self::location(id).join(&file))?;
        self.staged()
            .entry(id)
            .or_default()
            .insert(key.clone(), bytes.to_vec());
        Ok(PartHandle {
            checkpoint: id,
            key: key.clone(),
            file,
            size: bytes.len() as u64,
            crc32c: 0,
            written_bytes: bytes.len() as u64,
            base: None,
            from: None,
        })
    }

    /// Memory only.
    fn write_part_blocks(&self) -> bool {
        false
    }

    fn publish(&self, meta: &CheckpointMetadata, parts: &[PartHandle]) -> Result<CheckpointHandle> {
        validate_parts(meta, parts)?;
        let path = Self::location(meta.id);
        self.check_failing(&path)?;
        let mut map = self.map();
        if map.contains_key(&meta.id) {
            return Err(StorageError::AlreadyExists { id: meta.id, path });
        }
        let mut staged = self.staged().remove(&meta.id).unwrap_or_default();
        let mut states = BTreeMap::new();
        let mut bases = BTreeMap::new();
        for p in parts {
            let bytes = staged
                .remove(&p.key)
                .ok_or_else(|| StorageError::MissingStateFile {
                    path: path.join(&p.file),
                })?;
            states.insert(p.key.clone(), bytes);
            if let Some(b) = p.base {
                if b >= meta.id {
                    return Err(StorageError::InvalidInput {
                        id: meta.id,
                        reason: format!("a part builds on checkpoint {b}, not an earlier one"),
                    });
                }
                bases.insert(p.key.clone(), p.link());
            }
        }
        let total_bytes = states.values().map(|b| b.len() as u64).sum();
        map.insert(
            meta.id,
            MemoryEntry {
                metadata: meta.clone(),
                states,
                bases,
                total_bytes,
            },
        );
        Ok(CheckpointHandle {
            id: meta.id,
            path,
            total_bytes,
        })
    }

    fn check_part(&self, part: &PartHandle) -> Result<()> {
        let path = Self::location(part.checkpoint).join(&part.file);
        let map = self.map();
        let Some(bytes) = map
            .get(&part.checkpoint)
            .and_then(|e| e.states.get(&part.key))
        else {
            return Err(StorageError::MissingStateFile { path });
        };
        if bytes.len() as u64 != part.size {
            return Err(StorageError::StateMismatch {
                path,
                what: "payload size",
                expected: part.size,
                found: bytes.len() as u64,
            });
        }
        Ok(())
    }

    fn verify_part(&self, part: &PartHandle) -> Result<()> {
        // No checksums in memory: what is there is what was written.
        self.check_part(part)
    }

    fn discard(&self, id: CheckpointId) -> Result<()> {
        self.staged().remove(&id);
        Ok(())
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
        let mut bases = BTreeMap::new();
        for (key, link) in &entry.bases {
            let mut chain = Vec::new();
            let mut base = link.base;
            while let Some(b) = base.filter(|b| link.reaches(*b)) {
                let part = map
                    .get(&b)
                    .and_then(|e| e.states.get(key).map(|s| (s, e.bases.get(key))));
                let Some((bytes, next)) = part else {
                    return Err(StorageError::MissingBase {
                        id,
                        base: b,
                        task: key.task.clone(),
                        subtask: key.subtask,
                        why: "the checkpoint or its part is gone".into(),
                        path: Self::location(b),
                    });
                };
                chain.push(bytes.clone());
                base = next.and_then(|l| l.base);
            }
            chain.reverse();
            bases.insert(key.clone(), chain);
        }
        Ok(LoadedCheckpoint {
            metadata: entry.metadata.clone(),
            states: entry.states.clone(),
            bases,
            handle: CheckpointHandle {
                id,
                path: Self::location(id),
                total_bytes: entry.total_bytes,
            },
        })
    }

    fn part_bases(&self, id: CheckpointId) -> Result<Vec<(TaskStateKey, PartLink)>> {
        let map = self.map();
        let entry = map.get(&id).ok_or_else(|| StorageError::NotFound {
            id,
            root: PathBuf::from("<memory>"),
        })?;
        Ok(entry
            .states
            .keys()
            .map(|k| (k.clone(), entry.bases.get(k).copied().unwrap_or_default()))
            .collect())
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
