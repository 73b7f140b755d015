//! The storage contract: [`CheckpointStorage`], what it stores and returns,
//! and its errors.

use crate::types::element::{CheckpointId, SnapshotKind};
pub use crate::types::error::StorageError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Shorthand for results of this module.
pub(crate) type Result<T, E = StorageError> = std::result::Result<T, E>;

/// The key of one task's state in a checkpoint: the operator/task name and
/// the subtask index (0-based, below the task's parallelism), as Flink's
/// `(OperatorID, subtaskIndex)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskStateKey {
    /// The task (or operator) name, unique within the job. Any string; the
    /// file name is derived from it and recorded in `_metadata`.
    pub task: String,
    /// The subtask index.
    pub subtask: u32,
}

impl TaskStateKey {
    /// The key of subtask `subtask` of `task`.
    pub fn new(task: impl Into<String>, subtask: u32) -> Self {
        TaskStateKey {
            task: task.into(),
            subtask,
        }
    }
}

/// What identifies the job a checkpoint belongs to, supplied by the caller
/// and stored verbatim, so that a restore can refuse a checkpoint taken by a
/// differently configured job (compare with `==`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobFingerprint {
    /// The job's name.
    pub job_name: String,
    /// The job's configuration as JSON (floats round-trip exactly).
    pub config: serde_json::Value,
    /// Parallelism per task name.
    pub parallelism: BTreeMap<String, u32>,
    /// The job's number of key groups ([`crate::JobConfig::max_parallelism`];
    /// absent in checkpoints older than it: the default, 128).
    #[serde(default = "default_max_parallelism")]
    pub max_parallelism: u32,
}

fn default_max_parallelism() -> u32 {
    crate::types::key_groups::DEFAULT_MAX_PARALLELISM
}

impl Default for JobFingerprint {
    fn default() -> Self {
        JobFingerprint {
            job_name: String::new(),
            config: serde_json::Value::Null,
            parallelism: BTreeMap::new(),
            max_parallelism: default_max_parallelism(),
        }
    }
}

/// The description of a checkpoint that the caller supplies and that is
/// stored in `_metadata` (with the format version and the list of state
/// files, which the storage adds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// The checkpoint id; must not be [`CheckpointId::NONE`].
    pub id: CheckpointId,
    /// Checkpoint or savepoint; savepoints survive [`CheckpointStorage::retain`].
    pub kind: SnapshotKind,
    /// When the coordinator triggered the checkpoint, in ns on the engine's
    /// monotonic clock ([`crate::util::clock::now_ns`]) of the run that took it;
    /// only comparable with other timestamps of that run.
    pub trigger_timestamp_ns: u64,
    /// When the checkpoint completed (all tasks acknowledged), in ms since
    /// the Unix epoch (wall clock).
    pub completed_at_unix_ms: u64,
    /// The job that took the checkpoint.
    pub job: JobFingerprint,
}

impl CheckpointMetadata {
    /// Metadata for checkpoint `id` of `kind`, triggered at
    /// `trigger_timestamp_ns`, completed now ([`unix_time_ms`]).
    pub fn new(
        id: CheckpointId,
        kind: SnapshotKind,
        trigger_timestamp_ns: u64,
        job: JobFingerprint,
    ) -> Self {
        CheckpointMetadata {
            id,
            kind,
            trigger_timestamp_ns,
            completed_at_unix_ms: unix_time_ms(),
            job,
        }
    }
}

/// The wall-clock time in ms since the Unix epoch (0 if the clock is set
/// before 1970).
pub fn unix_time_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Where a published checkpoint lies, as returned by
/// [`CheckpointStorage::write_checkpoint`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointHandle {
    /// The checkpoint id.
    pub id: CheckpointId,
    /// Its folder (`<root>/chk-<n>`); `<memory>/chk-<n>` for [`MemoryStorage`](crate::storage::MemoryStorage).
    pub path: PathBuf,
    /// Bytes written: every file, headers and `_metadata` included (for
    /// [`MemoryStorage`](crate::storage::MemoryStorage): the sum of the state payloads).
    pub total_bytes: u64,
}

/// One task's state written for a checkpoint not yet published, as
/// returned by [`CheckpointStorage::write_part`] and listed to
/// [`CheckpointStorage::publish`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartHandle {
    /// The checkpoint it was written for.
    pub checkpoint: CheckpointId,
    /// Whose state it is.
    pub key: TaskStateKey,
    /// The file's name inside the checkpoint's folder (for
    /// [`MemoryStorage`](crate::storage::MemoryStorage): a name for messages only).
    pub file: String,
    /// Payload bytes (the state as given).
    pub size: u64,
    /// CRC32C of the payload (0 for [`MemoryStorage`](crate::storage::MemoryStorage)).
    pub crc32c: u32,
    /// Bytes written, the file's header included.
    pub written_bytes: u64,
    /// `Some(c)`: the part holds only changes since the same subtask's
    /// state in checkpoint `c` (an incremental checkpoint), and a restore
    /// needs `c`'s chain too; set by the writer before
    /// [`CheckpointStorage::publish`]. `None` (what `write_part` returns):
    /// the part is complete on its own.
    #[serde(default)]
    pub base: Option<CheckpointId>,
    /// With a base: `Some(c)` when a restore needs the chain's parts only
    /// from checkpoint `c` on (the state rewrote everything older parts
    /// held, [`EncodedState::chain_from`](crate::state::EncodedState::chain_from)):
    /// a walk of the chain stops there. `None`: back to the full part.
    #[serde(default)]
    pub from: Option<CheckpointId>,
}

impl PartHandle {
    /// How this part builds on earlier ones.
    pub fn link(&self) -> PartLink {
        PartLink {
            base: self.base,
            from: self.from,
        }
    }
}

/// How one subtask's part builds on earlier parts ([`PartHandle::base`],
/// [`PartHandle::from`]), as [`CheckpointStorage::part_bases`] reports it.
///
/// # Examples
/// ```
/// use lockgate::{CheckpointId, storage::PartLink};
/// let l = PartLink { base: Some(CheckpointId(9)), from: Some(CheckpointId(7)) };
/// assert!(l.reaches(CheckpointId(8)) && l.reaches(CheckpointId(7)));
/// assert!(!l.reaches(CheckpointId(6)));
/// assert!(PartLink { base: Some(CheckpointId(9)), from: None }.reaches(CheckpointId(1)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartLink {
    /// The checkpoint whose part this one builds on; `None`: complete.
    pub base: Option<CheckpointId>,
    /// The oldest checkpoint of the chain a restore needs; `None`: back to
    /// the full part.
    pub from: Option<CheckpointId>,
}

impl PartLink {
    /// True when a chain that starts at this part goes on to the part of
    /// checkpoint `older` (reached through the bases).
    pub fn reaches(&self, older: CheckpointId) -> bool {
        self.from.is_none_or(|f| older >= f)
    }
}

/// A checkpoint read back and fully validated, the parts of earlier
/// checkpoints its incremental parts build on included.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedCheckpoint {
    /// The metadata as written.
    pub metadata: CheckpointMetadata,
    /// Every task's state bytes, as written for this checkpoint.
    pub states: BTreeMap<TaskStateKey, Vec<u8>>,
    /// For a task whose part is a delta ([`PartHandle::base`]): the parts
    /// of its chain before this checkpoint's, oldest first (the full one
    /// first). Tasks with a complete part have no entry.
    pub bases: BTreeMap<TaskStateKey, Vec<Vec<u8>>>,
    /// Where it lies and how many bytes it takes (as at write time).
    pub handle: CheckpointHandle,
}

impl LoadedCheckpoint {
    /// The state bytes of subtask `subtask` of `task`, if the checkpoint has them.
    pub fn state(&self, task: &str, subtask: u32) -> Option<&[u8]> {
        self.states
            .get(&TaskStateKey::new(task, subtask))
            .map(Vec::as_slice)
    }
}

/// The answer of [`CheckpointStorage::load_latest_valid`].
#[derive(Debug)]
pub struct LatestValid {
    /// The newest published checkpoint (by id, checkpoint or savepoint) that
    /// loads and validates; `None` if there is none.
    pub checkpoint: Option<LoadedCheckpoint>,
    /// The newer checkpoints that failed to load, newest first, with why
    /// (to log "chk-5 is corrupt (...), using chk-4").
    pub corrupt: Vec<(CheckpointId, StorageError)>,
}

/// A store of completed checkpoints (as Flink's `CheckpointStorage` plus its
/// `CompletedCheckpointStore`).
///
/// Writes and deletions may block on disk I/O: call them from the
/// coordinator's or a writer thread, never from a task thread. One writer per
/// store at a time: two concurrent writers of the same id, or
/// [`clean_temporaries`](Self::clean_temporaries) during a write, are not
/// supported.
pub trait CheckpointStorage: Send + Sync {
    /// True when the store holds no published checkpoint (leftover temporary
    /// entries do not count), so a caller can refuse to start a job without
    /// restore over existing checkpoints.
    ///
    /// # Errors
    /// [`StorageError::Io`] if the store cannot be listed.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.list()?.is_empty())
    }

    /// Writes checkpoint `meta.id` with `states` and publishes it atomically:
    /// either the whole checkpoint becomes visible or nothing does.
    ///
    /// Cost for [`LocalDirStorage`](crate::storage::LocalDirStorage): one `fsync` per file (one per state
    /// plus `_metadata`) and two directory `fsync`s, roughly 0.1-10 ms each
    /// depending on the disk, plus writing and CRC32C-ing the bytes (GB/s).
    ///
    /// # Errors
    /// [`StorageError::InvalidInput`] for id 0 or a key given twice,
    /// [`StorageError::AlreadyExists`] if the id is already published,
    /// [`StorageError::Io`] on any I/O failure (then nothing is published and
    /// the temporary folder is removed, best effort).
    fn write_checkpoint(
        &self,
        meta: &CheckpointMetadata,
        states: &[(TaskStateKey, Vec<u8>)],
    ) -> Result<CheckpointHandle> {
        validate_input(meta, states)?;
        let mut parts = Vec::with_capacity(states.len());
        for (key, bytes) in states {
            match self.write_part(meta.id, key, bytes) {
                Ok(p) => parts.push(p),
                Err(e) => {
                    // Best effort: the write's own error matters more.
                    let _ = self.discard(meta.id);
                    return Err(e);
                }
            }
        }
        self.publish(meta, &parts).inspect_err(|_| {
            let _ = self.discard(meta.id);
        })
    }

    /// Hands over the state of one task for checkpoint `id`, not yet
    /// published (the asynchronous phase of a checkpoint calls it from the
    /// task's snapshot thread; parts of one checkpoint may be written from
    /// several threads at once). A part is durable once
    /// [`publish`](Self::publish) has returned, not before; nothing is
    /// visible until `publish` lists the part; [`discard`](Self::discard)
    /// drops the parts of a checkpoint that will not be published.
    ///
    /// Cost for [`LocalDirStorage`](crate::storage::LocalDirStorage): a copy into
    /// memory and CRC32C over the bytes; the file write is `publish`'s.
    ///
    /// # Errors
    /// [`StorageError::InvalidInput`] for id 0 or above [`MAX_CHECKPOINT_ID`],
    /// [`StorageError::Io`] on any I/O failure.
    fn write_part(&self, id: CheckpointId, key: &TaskStateKey, bytes: &[u8]) -> Result<PartHandle>;

    /// Whether [`write_part`](Self::write_part) may wait for I/O: true
    /// unless the storage says otherwise. A storage that only stages parts
    /// in memory (and writes in [`publish`](Self::publish)) returns false,
    /// and then a job on cooperative workers calls `write_part` on a
    /// worker's own thread, in a slice of its idle time, with no snapshot
    /// thread; a call that blocked there would stop that worker's records.
    /// [`LocalDirStorage`](crate::storage::LocalDirStorage) and
    /// [`MemoryStorage`](crate::storage::MemoryStorage) return false.
    fn write_part_blocks(&self) -> bool {
        true
    }

    /// Publishes checkpoint `meta.id` with the parts written for it,
    /// atomically: the whole checkpoint becomes visible or nothing does.
    /// Returns where it lies and the bytes of every file, the parts' and
    /// `_metadata`'s.
    ///
    /// Cost for [`LocalDirStorage`](crate::storage::LocalDirStorage): one file (the
    /// metadata and every part) written and `fsync`ed, a rename and one
    /// `fsync` of the root folder.
    ///
    /// # Errors
    /// [`StorageError::InvalidInput`] for id 0, a key given twice or a part
    /// of another checkpoint, [`StorageError::AlreadyExists`] if the id is
    /// published already, [`StorageError::Io`] on any I/O failure (then
    /// nothing is published).
    fn publish(&self, meta: &CheckpointMetadata, parts: &[PartHandle]) -> Result<CheckpointHandle>;

    /// Checks cheaply (a `stat`, no read) that published part `part` is
    /// still where [`publish`](Self::publish) put it, at its size: a
    /// snapshot thread checks every part of a chain before it writes a
    /// delta on it, and writes a full part when one is gone. The default
    /// (a store that cannot lose a file) checks nothing.
    ///
    /// # Errors
    /// [`StorageError::MissingStateFile`] when the part is gone,
    /// [`StorageError::StateMismatch`] when its size differs,
    /// [`StorageError::Io`] when it cannot be looked at.
    fn check_part(&self, part: &PartHandle) -> Result<()> {
        let _ = part;
        Ok(())
    }

    /// [`check_part`](Self::check_part) for each of `parts` (a chain a
    /// delta builds on), stopping at the first that fails (the default).
    /// [`LocalDirStorage`](crate::storage::LocalDirStorage) on Linux
    /// `stat`s each checkpoint file once, and again only after the
    /// kernel (inotify) reported a change to it: a check still sees every
    /// change made before it.
    ///
    /// # Errors
    /// As [`check_part`](Self::check_part), for the first part that fails.
    fn check_parts(&self, parts: &[PartHandle]) -> Result<()> {
        parts.iter().try_for_each(|p| self.check_part(p))
    }

    /// Reads published part `part` back whole and checks it against what
    /// was written (the size and CRC32C that `_metadata` records): once
    /// per part, in the background, before it may be a base for deltas;
    /// a part that fails it never is, and the checkpoints whose chains
    /// hold it are never kept for restoring. The default checks nothing.
    ///
    /// # Errors
    /// As [`check_part`](Self::check_part), and
    /// [`StorageError::ChecksumMismatch`] or
    /// [`StorageError::StateMismatch`] for damaged bytes.
    fn verify_part(&self, part: &PartHandle) -> Result<()> {
        let _ = part;
        Ok(())
    }

    /// [`verify_part`](Self::verify_part) of each of `parts` (of one
    /// checkpoint or several), in order: a store that keeps a checkpoint's
    /// parts in one file reads it once. The default calls `verify_part`
    /// for each.
    fn verify_parts(&self, parts: &[PartHandle]) -> Vec<Result<()>> {
        parts.iter().map(|p| self.verify_part(p)).collect()
    }

    /// Drops every unpublished part of checkpoint `id` (an aborted
    /// checkpoint); nothing to drop is no error.
    ///
    /// # Errors
    /// [`StorageError::Io`] if a part cannot be deleted.
    fn discard(&self, id: CheckpointId) -> Result<()>;

    /// The ids of the published checkpoints, ascending (numerically).
    ///
    /// # Errors
    /// [`StorageError::Io`] if the store cannot be listed.
    fn list(&self) -> Result<Vec<CheckpointId>>;

    /// Reads and validates checkpoint `id`: metadata and every state file
    /// (magic, version, length, CRC32C, agreement with `_metadata`).
    ///
    /// # Errors
    /// [`StorageError::NotFound`] if `id` is not published; any other variant
    /// when a file is missing, unreadable or corrupt.
    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint>;

    /// Reads and validates only the metadata of checkpoint `id` (cheap: no
    /// state file is read).
    ///
    /// # Errors
    /// As [`load`](Self::load), for `_metadata` only.
    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata>;

    /// The newest checkpoint that loads and validates, and the errors of the
    /// newer ones that did not (used on recovery: fall back to an older
    /// checkpoint rather than fail on a corrupt newest one).
    ///
    /// # Errors
    /// [`StorageError::Io`] only if the store cannot be listed; corrupt
    /// checkpoints are reported in [`LatestValid::corrupt`].
    fn load_latest_valid(&self) -> Result<LatestValid> {
        let mut corrupt = Vec::new();
        for id in self.list()?.into_iter().rev() {
            match self.load(id) {
                Ok(checkpoint) => {
                    return Ok(LatestValid {
                        checkpoint: Some(checkpoint),
                        corrupt,
                    })
                }
                Err(e) => corrupt.push((id, e)),
            }
        }
        Ok(LatestValid {
            checkpoint: None,
            corrupt,
        })
    }

    /// The base of each part of checkpoint `id`: for every subtask, the
    /// checkpoint its incremental part builds on ([`PartHandle::base`]),
    /// `None` for a complete part. Only `_metadata` is read.
    ///
    /// # Errors
    /// As [`load_metadata`](Self::load_metadata).
    fn part_bases(&self, id: CheckpointId) -> Result<Vec<(TaskStateKey, PartLink)>>;

    /// Deletes all checkpoints of kind [`SnapshotKind::Checkpoint`] but the
    /// newest `keep` ones (Flink's `state.checkpoints.num-retained`) and
    /// those they need: the checkpoints their incremental parts build on,
    /// transitively (as Flink's `SharedStateRegistry` keeps shared files
    /// while a retained checkpoint refers to them), and the newest
    /// checkpoint whose parts are all complete, so that one corrupt delta
    /// cannot leave nothing to restore (`keep` 0 deletes every checkpoint,
    /// that one too). Savepoints are never deleted, nor
    /// counted. Only `_metadata` is read; a folder whose metadata cannot
    /// be read is neither counted nor deleted (delete it with
    /// [`remove`](Self::remove)). Returns the deleted ids, ascending.
    ///
    /// # Errors
    /// [`StorageError::Io`] if listing or a deletion fails (deletions before
    /// it stay done).
    fn retain(&self, keep: usize) -> Result<Vec<CheckpointId>> {
        let mut checkpoints = Vec::new();
        let mut bases: BTreeMap<CheckpointId, BTreeMap<TaskStateKey, PartLink>> = BTreeMap::new();
        for id in self.list()? {
            crate::util::background::yield_point();
            if let (Ok(meta), Ok(b)) = (self.load_metadata(id), self.part_bases(id)) {
                if meta.kind == SnapshotKind::Checkpoint {
                    checkpoints.push(id);
                }
                bases.insert(id, b.into_iter().collect());
            }
        }
        let mut roots: Vec<CheckpointId> = checkpoints.iter().rev().take(keep).copied().collect();
        if let Some(full) = checkpoints
            .iter()
            .rev()
            .find(|id| {
                bases
                    .get(id)
                    .is_some_and(|b| b.values().all(|l| l.base.is_none()))
            })
            .filter(|_| keep > 0)
        {
            roots.push(*full);
        }
        // Follow each subtask's chain on its own: a checkpoint is needed
        // when a retained one's part of some subtask builds on its part
        // (the subtasks' chains restart at different checkpoints, so
        // following whole checkpoints would keep everything).
        let mut needed: HashSet<CheckpointId> = roots.iter().copied().collect();
        for root in &roots {
            for (key, link) in bases.get(root).into_iter().flatten() {
                let mut base = link.base;
                while let Some(b) = base.filter(|b| link.reaches(*b)) {
                    needed.insert(b);
                    base = bases.get(&b).and_then(|m| m.get(key)?.base);
                }
            }
        }
        let removed: Vec<CheckpointId> = checkpoints
            .into_iter()
            .filter(|id| !needed.contains(id))
            .collect();
        self.remove_many(&removed)?;
        Ok(removed)
    }

    /// Deletes published checkpoints `ids`, as [`remove`](Self::remove)
    /// does one by one (the default). [`LocalDirStorage`](crate::storage::LocalDirStorage)
    /// renames every folder out of the way first and makes the renames
    /// durable with one `fsync` of the root, then deletes them: on a file
    /// system where each `fsync` is a device write and flush (~0.2-0.3 ms
    /// here), a chain of N checkpoints retired at once cost N of them,
    /// in series with the next checkpoint's writes. It keeps up to two
    /// retired one-file checkpoints, renamed to temporaries, for the next
    /// checkpoints to write over ([`LocalDirStorage`](crate::storage::LocalDirStorage)).
    ///
    /// # Errors
    /// As [`remove`](Self::remove), at the first id that fails (those
    /// before it stay deleted).
    fn remove_many(&self, ids: &[CheckpointId]) -> Result<()> {
        for &id in ids {
            crate::util::background::yield_point();
            self.remove(id)?;
        }
        Ok(())
    }

    /// Deletes published checkpoint `id` (whatever its kind). For
    /// [`LocalDirStorage`](crate::storage::LocalDirStorage) the folder is first renamed to a temporary name,
    /// so a half-deleted checkpoint is never visible as `chk-<n>`.
    ///
    /// # Errors
    /// [`StorageError::NotFound`] if `id` is not published,
    /// [`StorageError::Io`] if it cannot be deleted.
    fn remove(&self, id: CheckpointId) -> Result<()>;

    /// Moves published checkpoint `id`, which a restore found unusable, out
    /// of the way of restores, listings and retention, keeping it for
    /// inspection; returns where it is now (`None`: this storage keeps no
    /// such copies and leaves `id` as it is, the default).
    ///
    /// # Errors
    /// [`StorageError::NotFound`] if `id` is not published,
    /// [`StorageError::Io`] if it cannot be moved.
    fn set_aside(&self, id: CheckpointId) -> Result<Option<String>> {
        let _ = id;
        Ok(None)
    }

    /// Removes leftovers of interrupted writes and deletions (`.tmp-*`
    /// entries); returns how many were removed. Call it at startup, never
    /// while a write is in progress. The default does nothing.
    ///
    /// # Errors
    /// [`StorageError::Io`] if an entry cannot be removed.
    fn clean_temporaries(&self) -> Result<usize> {
        Ok(0)
    }

    /// Everything the store holds that is or was a checkpoint, in any
    /// form, by name: published ones and, for stores that keep them,
    /// those set aside ([`set_aside`](Self::set_aside)) or of another
    /// layout. Empty means a job may start fresh on it with
    /// [`RestoreMode::IfPresent`](crate::RestoreMode::IfPresent). Default:
    /// the published ones, as `chk-<n>`.
    ///
    /// # Errors
    /// [`StorageError::Io`] if the store cannot be listed.
    fn traces(&self) -> Result<Vec<String>> {
        Ok(self
            .list()?
            .into_iter()
            .map(|id| format!("chk-{}", id.get()))
            .collect())
    }
}

/// Checks that `id` may be written: not 0, at most [`MAX_CHECKPOINT_ID`].
pub(super) fn validate_id(id: CheckpointId) -> Result<()> {
    if id == CheckpointId::NONE {
        return Err(StorageError::InvalidInput {
            id,
            reason: "checkpoint id 0 is reserved for \"no checkpoint\"".into(),
        });
    }
    if id.get() > MAX_CHECKPOINT_ID {
        return Err(StorageError::InvalidInput {
            id,
            reason: format!("checkpoint ids go up to {MAX_CHECKPOINT_ID}"),
        });
    }
    Ok(())
}

/// Checks what every store requires of a publish: a valid id, parts of
/// this checkpoint, each key once.
pub(super) fn validate_parts(meta: &CheckpointMetadata, parts: &[PartHandle]) -> Result<()> {
    validate_id(meta.id)?;
    if let Some(p) = parts.iter().find(|p| p.checkpoint != meta.id) {
        return Err(StorageError::InvalidInput {
            id: meta.id,
            reason: format!(
                "the part of task {:?} subtask {} was written for checkpoint {}",
                p.key.task, p.key.subtask, p.checkpoint
            ),
        });
    }
    validate_keys(meta.id, parts.iter().map(|p| &p.key))
}

/// Checks what every store requires of a write's input.
pub(super) fn validate_input(
    meta: &CheckpointMetadata,
    states: &[(TaskStateKey, Vec<u8>)],
) -> Result<()> {
    validate_id(meta.id)?;
    validate_keys(meta.id, states.iter().map(|(k, _)| k))
}

fn validate_keys<'a>(id: CheckpointId, keys: impl Iterator<Item = &'a TaskStateKey>) -> Result<()> {
    let mut seen = HashSet::new();
    for key in keys {
        if !seen.insert(key) {
            return Err(StorageError::InvalidInput {
                id,
                reason: format!(
                    "state of task {:?} subtask {} given twice",
                    key.task, key.subtask
                ),
            });
        }
    }
    Ok(())
}

/// The largest checkpoint id a folder name may carry: 2^53, far beyond any
/// job's count (one checkpoint a millisecond for 285,000 years), and low
/// enough that ids never overflow and stay exact in JSON numbers.
pub const MAX_CHECKPOINT_ID: u64 = 1 << 53;

/// A shared store is a store (so a test or an application can keep a handle
/// on the storage a job writes to).
impl<S: CheckpointStorage + ?Sized> CheckpointStorage for std::sync::Arc<S> {
    fn is_empty(&self) -> Result<bool> {
        (**self).is_empty()
    }
    fn write_checkpoint(
        &self,
        meta: &CheckpointMetadata,
        states: &[(TaskStateKey, Vec<u8>)],
    ) -> Result<CheckpointHandle> {
        (**self).write_checkpoint(meta, states)
    }
    fn write_part(&self, id: CheckpointId, key: &TaskStateKey, bytes: &[u8]) -> Result<PartHandle> {
        (**self).write_part(id, key, bytes)
    }
    fn write_part_blocks(&self) -> bool {
        (**self).write_part_blocks()
    }
    fn publish(&self, meta: &CheckpointMetadata, parts: &[PartHandle]) -> Result<CheckpointHandle> {
        (**self).publish(meta, parts)
    }
    fn discard(&self, id: CheckpointId) -> Result<()> {
        (**self).discard(id)
    }
    fn check_part(&self, part: &PartHandle) -> Result<()> {
        (**self).check_part(part)
    }
    fn check_parts(&self, parts: &[PartHandle]) -> Result<()> {
        (**self).check_parts(parts)
    }
    fn verify_part(&self, part: &PartHandle) -> Result<()> {
        (**self).verify_part(part)
    }
    fn verify_parts(&self, parts: &[PartHandle]) -> Vec<Result<()>> {
        (**self).verify_parts(parts)
    }
    fn list(&self) -> Result<Vec<CheckpointId>> {
        (**self).list()
    }
    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint> {
        (**self).load(id)
    }
    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata> {
        (**self).load_metadata(id)
    }
    fn part_bases(&self, id: CheckpointId) -> Result<Vec<(TaskStateKey, PartLink)>> {
        (**self).part_bases(id)
    }
    fn load_latest_valid(&self) -> Result<LatestValid> {
        (**self).load_latest_valid()
    }
    fn retain(&self, keep: usize) -> Result<Vec<CheckpointId>> {
        (**self).retain(keep)
    }
    fn remove(&self, id: CheckpointId) -> Result<()> {
        (**self).remove(id)
    }
    fn remove_many(&self, ids: &[CheckpointId]) -> Result<()> {
        (**self).remove_many(ids)
    }
    fn set_aside(&self, id: CheckpointId) -> Result<Option<String>> {
        (**self).set_aside(id)
    }
    fn clean_temporaries(&self) -> Result<usize> {
        (**self).clean_temporaries()
    }
    fn traces(&self) -> Result<Vec<String>> {
        (**self).traces()
    }
}
