//! Durable checkpoint storage, as Flink's checkpoint storage (a
//! `FsCheckpointStorage` reduced to one local directory), behind the
//! [`CheckpointStorage`] trait.
//!
//! # Layout of [`LocalDirStorage`]
//!
//! ```text
//! <root>/
//!   chk-3/                  one folder per published checkpoint, n in decimal
//!     _metadata             framed JSON: id, kind, times, job fingerprint, file list
//!     keyed_sum-0.state     framed opaque state bytes of (task "keyed_sum", subtask 0)
//!     keyed_sum-1.state
//!   chk-4/
//!   .tmp-chk-5-812-7/       a write in progress (or abandoned by a crash): ignored
//! ```
//!
//! A checkpoint is written into a `.tmp-chk-<n>-<pid>-<seq>/` folder, file by
//! file, each file `fsync`ed, then the folder `fsync`ed, renamed to
//! `chk-<n>/` and the root `fsync`ed. A rename within one file system is
//! atomic, so only complete checkpoints ever appear as `chk-<n>`; a crash
//! leaves at most a `.tmp-*` entry, which [`CheckpointStorage::list`] ignores
//! and [`CheckpointStorage::clean_temporaries`] removes.
//!
//! # File format
//!
//! Every file (state files and `_metadata`) is framed:
//!
//! | bytes | field                                     |
//! |-------|-------------------------------------------|
//! | 4     | magic [`MAGIC`] = `b"LGCK"`               |
//! | 2     | format version, u16 LE ([`FORMAT_VERSION`]) |
//! | 8     | payload length in bytes, u64 LE           |
//! | 4     | CRC32C (Castagnoli) of the payload, u32 LE |
//! | n     | payload                                   |
//!
//! The `_metadata` payload is JSON (serde) and lists every state file with its
//! payload size and CRC32C, so a load checks each file twice: against its own
//! header and against the metadata. Loading never trusts a length field
//! before comparing it with the file's real size, and never panics on a bad
//! file: every problem is a [`StorageError`] naming the file.

use crate::element::{CheckpointId, SnapshotKind};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The 4 bytes every checkpoint file starts with ("LockGate ChecKpoint").
pub const MAGIC: [u8; 4] = *b"LGCK";

/// The file format version this build writes and the only one it reads.
/// It is stored in every file header and in the `_metadata` JSON.
pub const FORMAT_VERSION: u16 = 1;

/// Header size in bytes: magic (4) + version (2) + payload length (8) + CRC32C (4).
const HEADER_LEN: usize = 4 + 2 + 8 + 4;

/// Name of the metadata file inside a checkpoint folder (Flink's name).
const METADATA_FILE: &str = "_metadata";

/// Prefix of a published checkpoint folder.
const CHK_PREFIX: &str = "chk-";

/// Prefix of every temporary entry (in-progress write or deletion).
const TMP_PREFIX: &str = ".tmp-";

/// Suffix of a state file.
const STATE_SUFFIX: &str = ".state";

/// Longest task-name part of a state file name, in bytes; keeps file names
/// well below the usual 255-byte limit of a file name.
const MAX_NAME_PART: usize = 96;

/// Write buffer of a state file, in bytes (256 KiB: a few large writes per
/// MB of state instead of many small ones).
const WRITE_BUFFER: usize = 256 * 1024;

/// Makes temporary folder names unique within this process (the pid makes
/// them unique across processes).
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Everything that can go wrong when writing or reading checkpoints. Every
/// message names the file or folder concerned and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An operating-system I/O call failed.
    #[error("I/O error while {op} {path}: {source}")]
    Io {
        /// What was being done ("reading", "creating", "syncing", ...).
        op: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with [`MAGIC`]: not a lockgate checkpoint file.
    #[error("bad magic in {path}: expected {expected:?}, found {found:?} (not a lockgate checkpoint file)")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// [`MAGIC`].
        expected: [u8; 4],
        /// The first bytes of the file (fewer than 4 if the file is shorter).
        found: Vec<u8>,
    },
    /// The file was written by a format version this build cannot read.
    #[error("unsupported format version {found} in {path} (this build reads version {supported})")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u16,
        /// [`FORMAT_VERSION`].
        supported: u16,
    },
    /// The file is shorter than its header says (e.g. a torn or cut copy).
    #[error("truncated: {path} holds {found} bytes, expected {expected}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the file should hold (header included).
        expected: u64,
        /// Bytes it holds.
        found: u64,
    },
    /// The file is longer than its header says.
    #[error("trailing bytes: {path} holds {found} bytes, expected {expected}")]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Bytes the file should hold (header included).
        expected: u64,
        /// Bytes it holds.
        found: u64,
    },
    /// The payload's CRC32C differs from the one in the header (a flipped bit).
    #[error("checksum mismatch in {path}: expected 0x{expected:08x}, found 0x{found:08x}")]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// CRC32C stored in the header.
        expected: u32,
        /// CRC32C computed over the payload.
        found: u32,
    },
    /// A checkpoint folder has no `_metadata` file.
    #[error("missing metadata: {path} does not exist")]
    MissingMetadata {
        /// The expected path of `_metadata`.
        path: PathBuf,
    },
    /// The `_metadata` file is intact but its content is invalid.
    #[error("invalid metadata in {path}: {reason}")]
    BadMetadata {
        /// The `_metadata` file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A state file listed in `_metadata` does not exist.
    #[error("missing state file {path} (listed in _metadata)")]
    MissingStateFile {
        /// The expected path of the state file.
        path: PathBuf,
    },
    /// A state file is intact on its own but differs from what `_metadata`
    /// recorded for it (e.g. a file from another checkpoint copied in).
    #[error(
        "state file {path} does not match _metadata: {what} expected {expected}, found {found}"
    )]
    StateMismatch {
        /// The state file.
        path: PathBuf,
        /// "payload size" or "crc32c".
        what: &'static str,
        /// What `_metadata` says.
        expected: u64,
        /// What the file holds.
        found: u64,
    },
    /// No published checkpoint with this id.
    #[error("checkpoint {id} not found in {root}")]
    NotFound {
        /// The id asked for.
        id: CheckpointId,
        /// The storage's root.
        root: PathBuf,
    },
    /// A checkpoint with this id is already published.
    #[error("checkpoint {id} already exists: {path}")]
    AlreadyExists {
        /// The id written.
        id: CheckpointId,
        /// The existing checkpoint's location.
        path: PathBuf,
    },
    /// The caller's input to a write is invalid (id 0, duplicate state key).
    #[error("invalid checkpoint {id}: {reason}")]
    InvalidInput {
        /// The id written.
        id: CheckpointId,
        /// What is wrong.
        reason: String,
    },
}

impl StorageError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> StorageError {
        StorageError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Shorthand for results of this module.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobFingerprint {
    /// The job's name.
    pub job_name: String,
    /// The job's configuration as JSON (floats round-trip exactly).
    pub config: serde_json::Value,
    /// Parallelism per task name.
    pub parallelism: BTreeMap<String, u32>,
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
    /// monotonic clock ([`crate::clock::now_ns`]) of the run that took it;
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
    /// Its folder (`<root>/chk-<n>`); `<memory>/chk-<n>` for [`MemoryStorage`].
    pub path: PathBuf,
    /// Bytes written: every file, headers and `_metadata` included (for
    /// [`MemoryStorage`]: the sum of the state payloads).
    pub total_bytes: u64,
}

/// A checkpoint read back and fully validated.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedCheckpoint {
    /// The metadata as written.
    pub metadata: CheckpointMetadata,
    /// Every task's state bytes, as written.
    pub states: BTreeMap<TaskStateKey, Vec<u8>>,
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
    /// Cost for [`LocalDirStorage`]: one `fsync` per file (one per state
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
    ) -> Result<CheckpointHandle>;

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

    /// Deletes all checkpoints of kind [`SnapshotKind::Checkpoint`] but the
    /// newest `keep` ones (Flink's `state.checkpoints.num-retained`).
    /// Savepoints are never deleted, nor counted. Only `_metadata` is read to
    /// learn a checkpoint's kind; a folder whose metadata cannot be read is
    /// neither counted nor deleted (delete it with [`remove`](Self::remove)).
    /// Returns the deleted ids, ascending.
    ///
    /// # Errors
    /// [`StorageError::Io`] if listing or a deletion fails (deletions before
    /// it stay done).
    fn retain(&self, keep: usize) -> Result<Vec<CheckpointId>> {
        let mut checkpoints = Vec::new();
        for id in self.list()? {
            if let Ok(meta) = self.load_metadata(id) {
                if meta.kind == SnapshotKind::Checkpoint {
                    checkpoints.push(id);
                }
            }
        }
        let drop_count = checkpoints.len().saturating_sub(keep);
        let removed: Vec<CheckpointId> = checkpoints.into_iter().take(drop_count).collect();
        for &id in &removed {
            self.remove(id)?;
        }
        Ok(removed)
    }

    /// Deletes published checkpoint `id` (whatever its kind). For
    /// [`LocalDirStorage`] the folder is first renamed to a temporary name,
    /// so a half-deleted checkpoint is never visible as `chk-<n>`.
    ///
    /// # Errors
    /// [`StorageError::NotFound`] if `id` is not published,
    /// [`StorageError::Io`] if it cannot be deleted.
    fn remove(&self, id: CheckpointId) -> Result<()>;

    /// Removes leftovers of interrupted writes and deletions (`.tmp-*`
    /// entries); returns how many were removed. Call it at startup, never
    /// while a write is in progress. The default does nothing.
    ///
    /// # Errors
    /// [`StorageError::Io`] if an entry cannot be removed.
    fn clean_temporaries(&self) -> Result<usize> {
        Ok(0)
    }
}

/// Checks what every store requires of a write's input.
fn validate_input(meta: &CheckpointMetadata, states: &[(TaskStateKey, Vec<u8>)]) -> Result<()> {
    if meta.id == CheckpointId::NONE {
        return Err(StorageError::InvalidInput {
            id: meta.id,
            reason: "checkpoint id 0 is reserved for \"no checkpoint\"".into(),
        });
    }
    if meta.id.get() > MAX_CHECKPOINT_ID {
        return Err(StorageError::InvalidInput {
            id: meta.id,
            reason: format!("checkpoint ids go up to {MAX_CHECKPOINT_ID}"),
        });
    }
    let mut seen = HashSet::with_capacity(states.len());
    for (key, _) in states {
        if !seen.insert(key) {
            return Err(StorageError::InvalidInput {
                id: meta.id,
                reason: format!(
                    "state of task {:?} subtask {} given twice",
                    key.task, key.subtask
                ),
            });
        }
    }
    Ok(())
}

/// What `_metadata` records about one state file.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct StateFileEntry {
    task: String,
    subtask: u32,
    /// The file's name inside the checkpoint folder.
    file: String,
    /// Payload size in bytes (header excluded).
    size: u64,
    /// CRC32C of the payload.
    crc32c: u32,
}

/// The JSON payload of `_metadata`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct MetadataFile {
    format_version: u16,
    checkpoint: CheckpointMetadata,
    states: Vec<StateFileEntry>,
}

/// The default store: one folder per checkpoint under a root directory (see
/// the module docs for the layout and the atomic publish protocol).
#[derive(Clone, Debug)]
pub struct LocalDirStorage {
    root: PathBuf,
}

impl LocalDirStorage {
    /// Opens (creating it and its parents if missing) the store at `root`.
    /// Existing checkpoints are left as they are.
    ///
    /// # Errors
    /// [`StorageError::Io`] if `root` cannot be created or is not a directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| StorageError::io("creating", &root, e))?;
        let meta = fs::metadata(&root).map_err(|e| StorageError::io("inspecting", &root, e))?;
        if !meta.is_dir() {
            return Err(StorageError::io(
                "opening",
                &root,
                io::Error::other("not a directory"),
            ));
        }
        Ok(LocalDirStorage { root })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder checkpoint `id` is (or would be) published at: `<root>/chk-<n>`.
    pub fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        self.root.join(format!("{CHK_PREFIX}{}", id.get()))
    }

    /// A fresh temporary path in the root, `.tmp-<what>-<n>-<pid>-<seq>`.
    fn temp_path(&self, what: &str, id: CheckpointId) -> PathBuf {
        let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        self.root.join(format!(
            "{TMP_PREFIX}{what}-{}-{}-{seq}",
            id.get(),
            std::process::id()
        ))
    }

    /// Writes all files of a checkpoint into `dir` (which must not exist),
    /// each fsynced, then fsyncs `dir`. Returns the bytes written.
    fn write_files(
        &self,
        dir: &Path,
        meta: &CheckpointMetadata,
        states: &[(TaskStateKey, Vec<u8>)],
    ) -> Result<u64> {
        fs::create_dir(dir).map_err(|e| StorageError::io("creating", dir, e))?;
        let mut used_names = HashSet::with_capacity(states.len());
        let mut entries = Vec::with_capacity(states.len());
        let mut total = 0u64;
        for (key, bytes) in states {
            let file = state_file_name(key, &mut used_names);
            let crc = write_framed(&dir.join(&file), bytes)?;
            total += (HEADER_LEN + bytes.len()) as u64;
            entries.push(StateFileEntry {
                task: key.task.clone(),
                subtask: key.subtask,
                file,
                size: bytes.len() as u64,
                crc32c: crc,
            });
        }
        let metadata = MetadataFile {
            format_version: FORMAT_VERSION,
            checkpoint: meta.clone(),
            states: entries,
        };
        let meta_path = dir.join(METADATA_FILE);
        let json = serde_json::to_vec_pretty(&metadata).map_err(|e| StorageError::BadMetadata {
            path: meta_path.clone(),
            reason: format!("cannot serialize: {e}"),
        })?;
        write_framed(&meta_path, &json)?;
        total += (HEADER_LEN + json.len()) as u64;
        sync_dir(dir)?;
        Ok(total)
    }

    /// Reads, unframes and parses `_metadata` of the folder `dir` of
    /// checkpoint `id`, and checks its content (version, id, file names).
    fn read_metadata_file(&self, id: CheckpointId, dir: &Path) -> Result<MetadataFile> {
        if !dir.is_dir() {
            return Err(StorageError::NotFound {
                id,
                root: self.root.clone(),
            });
        }
        let path = dir.join(METADATA_FILE);
        let payload = match read_framed(&path) {
            Err(StorageError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::MissingMetadata { path })
            }
            other => other?,
        };
        let bad = |reason: String| StorageError::BadMetadata {
            path: path.clone(),
            reason,
        };
        let meta: MetadataFile =
            serde_json::from_slice(&payload).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        if meta.format_version != FORMAT_VERSION {
            return Err(StorageError::UnsupportedVersion {
                path,
                found: meta.format_version,
                supported: FORMAT_VERSION,
            });
        }
        if meta.checkpoint.id != id {
            return Err(bad(format!(
                "records checkpoint id {} but lies in folder {CHK_PREFIX}{}",
                meta.checkpoint.id, id
            )));
        }
        let mut names = HashSet::with_capacity(meta.states.len());
        let mut keys = HashSet::with_capacity(meta.states.len());
        for entry in &meta.states {
            if !is_safe_file_name(&entry.file) {
                return Err(bad(format!("invalid state file name {:?}", entry.file)));
            }
            if !names.insert(entry.file.as_str()) {
                return Err(bad(format!("state file {:?} listed twice", entry.file)));
            }
            if !keys.insert((entry.task.as_str(), entry.subtask)) {
                return Err(bad(format!(
                    "task {:?} subtask {} listed twice",
                    entry.task, entry.subtask
                )));
            }
        }
        Ok(meta)
    }
}

impl CheckpointStorage for LocalDirStorage {
    fn write_checkpoint(
        &self,
        meta: &CheckpointMetadata,
        states: &[(TaskStateKey, Vec<u8>)],
    ) -> Result<CheckpointHandle> {
        validate_input(meta, states)?;
        let tmp = self.temp_path("chk", meta.id);
        let target = self.checkpoint_dir(meta.id);
        let result = self
            .write_files(&tmp, meta, states)
            .and_then(|total| publish(&tmp, &target, meta.id, &self.root).map(|()| total));
        match result {
            Ok(total_bytes) => Ok(CheckpointHandle {
                id: meta.id,
                path: target,
                total_bytes,
            }),
            Err(e) => {
                // Best effort: a leftover is ignored by list() and removed by
                // clean_temporaries(); the write's own error matters more.
                let _ = fs::remove_dir_all(&tmp);
                Err(e)
            }
        }
    }

    fn list(&self) -> Result<Vec<CheckpointId>> {
        let mut ids = Vec::new();
        let entries =
            fs::read_dir(&self.root).map_err(|e| StorageError::io("listing", &self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("listing", &self.root, e))?;
            let Some(id) = entry.file_name().to_str().and_then(parse_chk_name) else {
                continue;
            };
            let file_type = entry
                .file_type()
                .map_err(|e| StorageError::io("inspecting", &entry.path(), e))?;
            if file_type.is_dir() {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint> {
        let dir = self.checkpoint_dir(id);
        let meta = self.read_metadata_file(id, &dir)?;
        let mut states = BTreeMap::new();
        let mut total = 0u64;
        for entry in &meta.states {
            let path = dir.join(&entry.file);
            let payload = match read_framed(&path) {
                Err(StorageError::Io { source, .. })
                    if source.kind() == io::ErrorKind::NotFound =>
                {
                    return Err(StorageError::MissingStateFile { path })
                }
                other => other?,
            };
            // The frame's own CRC has been checked; now check that the file
            // is the one _metadata recorded.
            let size = payload.len() as u64;
            if size != entry.size {
                return Err(StorageError::StateMismatch {
                    path,
                    what: "payload size",
                    expected: entry.size,
                    found: size,
                });
            }
            let crc = crc32c::crc32c(&payload);
            if crc != entry.crc32c {
                return Err(StorageError::StateMismatch {
                    path,
                    what: "crc32c",
                    expected: u64::from(entry.crc32c),
                    found: u64::from(crc),
                });
            }
            total += HEADER_LEN as u64 + size;
            states.insert(
                TaskStateKey::new(entry.task.clone(), entry.subtask),
                payload,
            );
        }
        let meta_len = fs::metadata(dir.join(METADATA_FILE))
            .map(|m| m.len())
            .unwrap_or(0);
        Ok(LoadedCheckpoint {
            metadata: meta.checkpoint,
            states,
            handle: CheckpointHandle {
                id,
                path: dir,
                total_bytes: total + meta_len,
            },
        })
    }

    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata> {
        let dir = self.checkpoint_dir(id);
        Ok(self.read_metadata_file(id, &dir)?.checkpoint)
    }

    fn remove(&self, id: CheckpointId) -> Result<()> {
        let dir = self.checkpoint_dir(id);
        let tmp = self.temp_path("del-chk", id);
        match fs::rename(&dir, &tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::NotFound {
                    id,
                    root: self.root.clone(),
                })
            }
            Err(e) => return Err(StorageError::io("renaming for deletion", &dir, e)),
        }
        sync_dir(&self.root)?;
        fs::remove_dir_all(&tmp).map_err(|e| StorageError::io("deleting", &tmp, e))
    }

    fn clean_temporaries(&self) -> Result<usize> {
        let entries =
            fs::read_dir(&self.root).map_err(|e| StorageError::io("listing", &self.root, e))?;
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("listing", &self.root, e))?;
            let is_tmp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(TMP_PREFIX));
            if !is_tmp {
                continue;
            }
            let path = entry.path();
            let is_dir = entry
                .file_type()
                .map_err(|e| StorageError::io("inspecting", &path, e))?
                .is_dir();
            let res = if is_dir {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            res.map_err(|e| StorageError::io("deleting", &path, e))?;
            removed += 1;
        }
        Ok(removed)
    }
}

/// Renames the complete folder `tmp` to `target` and makes the rename durable.
fn publish(tmp: &Path, target: &Path, id: CheckpointId, root: &Path) -> Result<()> {
    // rename(2) would replace an empty existing folder, so check first (one
    // writer per store, see the trait docs).
    if target.exists() {
        return Err(StorageError::AlreadyExists {
            id,
            path: target.to_path_buf(),
        });
    }
    fs::rename(tmp, target).map_err(|e| StorageError::io("publishing", target, e))?;
    sync_dir(root)
}

/// Parses a canonical `chk-<n>` name (decimal, no sign, no leading zeros).
fn parse_chk_name(name: &str) -> Option<CheckpointId> {
    let digits = name.strip_prefix(CHK_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    // Ids above MAX_CHECKPOINT_ID are not ours (ids grow by one per
    // checkpoint): such a folder is ignored like any foreign one.
    digits
        .parse()
        .ok()
        .filter(|id| *id <= MAX_CHECKPOINT_ID)
        .map(CheckpointId)
}

/// The largest checkpoint id a folder name may carry: 2^53, far beyond any
/// job's count (one checkpoint a millisecond for 285,000 years), and low
/// enough that ids never overflow and stay exact in JSON numbers.
pub const MAX_CHECKPOINT_ID: u64 = 1 << 53;

/// A unique, portable file name for `key`: `<task>-<subtask>.state`, where
/// the task name keeps `[A-Za-z0-9_.-]`, has other characters replaced by
/// `_`, no leading `.`, and is cut to [`MAX_NAME_PART`] bytes; a name taken
/// already (compared case-insensitively, for case-insensitive file systems)
/// gets a `~<k>` suffix. `_metadata` records the name, so it need not be
/// reversible.
fn state_file_name(key: &TaskStateKey, used: &mut HashSet<String>) -> String {
    let mut base: String = key
        .task
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_PART)
        .collect();
    if base.is_empty() || base.starts_with('.') {
        base.insert(0, '_');
    }
    let mut name = format!("{base}-{}{STATE_SUFFIX}", key.subtask);
    let mut k = 1u32;
    while !used.insert(name.to_ascii_lowercase()) {
        k += 1;
        name = format!("{base}-{}~{k}{STATE_SUFFIX}", key.subtask);
    }
    name
}

/// True for a plain file name inside a checkpoint folder: not empty, no path
/// separator, not hidden/`.`/`..`, not `_metadata`.
fn is_safe_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name != METADATA_FILE
        && !name.contains(['/', '\\', '\0'])
}

/// Creates `path` (which must not exist), writes the framed `payload`,
/// fsyncs it, and returns the payload's CRC32C.
fn write_framed(path: &Path, payload: &[u8]) -> Result<u32> {
    let crc = crc32c::crc32c(payload);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| StorageError::io("creating", path, e))?;
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, file);
    let mut header = [0u8; HEADER_LEN];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[6..14].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    header[14..18].copy_from_slice(&crc.to_le_bytes());
    w.write_all(&header)
        .and_then(|()| w.write_all(payload))
        .map_err(|e| StorageError::io("writing", path, e))?;
    let file = w
        .into_inner()
        .map_err(|e| StorageError::io("writing", path, e.into_error()))?;
    file.sync_all()
        .map_err(|e| StorageError::io("syncing", path, e))?;
    Ok(crc)
}

/// Reads the framed file at `path`, validates magic, version, length and
/// CRC32C, and returns the payload.
fn read_framed(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = fs::read(path).map_err(|e| StorageError::io("reading", path, e))?;
    let found_len = bytes.len() as u64;
    if bytes[..bytes.len().min(4)] != MAGIC[..bytes.len().min(4)] {
        return Err(StorageError::BadMagic {
            path: path.to_path_buf(),
            expected: MAGIC,
            found: bytes[..bytes.len().min(4)].to_vec(),
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: HEADER_LEN as u64,
            found: found_len,
        });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(StorageError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[6..14]);
    let payload_len = u64::from_le_bytes(len_bytes);
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&bytes[14..18]);
    let expected_crc = u32::from_le_bytes(crc_bytes);
    let expected_len = payload_len.saturating_add(HEADER_LEN as u64);
    if found_len < expected_len {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: expected_len,
            found: found_len,
        });
    }
    if found_len > expected_len {
        return Err(StorageError::TrailingBytes {
            path: path.to_path_buf(),
            expected: expected_len,
            found: found_len,
        });
    }
    bytes.drain(..HEADER_LEN);
    let crc = crc32c::crc32c(&bytes);
    if crc != expected_crc {
        return Err(StorageError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: expected_crc,
            found: crc,
        });
    }
    Ok(bytes)
}

/// Makes the entries of directory `dir` durable (fsync of the directory;
/// a no-op where directories cannot be opened, i.e. outside Unix).
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| StorageError::io("syncing", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// One checkpoint held by [`MemoryStorage`].
#[derive(Clone, Debug)]
struct MemoryEntry {
    metadata: CheckpointMetadata,
    states: BTreeMap<TaskStateKey, Vec<u8>>,
    total_bytes: u64,
}

/// An in-memory store for tests: same rules as [`LocalDirStorage`] (ids,
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
    fn list(&self) -> Result<Vec<CheckpointId>> {
        (**self).list()
    }
    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint> {
        (**self).load(id)
    }
    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata> {
        (**self).load_metadata(id)
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
    fn clean_temporaries(&self) -> Result<usize> {
        (**self).clean_temporaries()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chk_names_parse_only_canonical_decimals() {
        assert_eq!(parse_chk_name("chk-10"), Some(CheckpointId(10)));
        assert_eq!(parse_chk_name("chk-0"), Some(CheckpointId(0)));
        for bad in [
            "chk-",
            "chk-01",
            "chk-+1",
            "chk-1a",
            "chk-x",
            "chk1",
            ".tmp-chk-1",
        ] {
            assert_eq!(parse_chk_name(bad), None, "{bad}");
        }
        // One past u64::MAX does not parse.
        assert_eq!(parse_chk_name("chk-18446744073709551616"), None);
    }

    #[test]
    fn state_file_names_are_safe_and_unique() {
        let mut used = HashSet::new();
        let keys = [
            TaskStateKey::new("keyed_sum", 1),
            TaskStateKey::new("a/b", 0),
            TaskStateKey::new("a_b", 0),
            TaskStateKey::new("A_B", 0),
            TaskStateKey::new("..", 0),
            TaskStateKey::new("", 2),
            TaskStateKey::new("x".repeat(1000), 0),
        ];
        let names: Vec<String> = keys.iter().map(|k| state_file_name(k, &mut used)).collect();
        assert_eq!(names[0], "keyed_sum-1.state");
        let lower: HashSet<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
        assert_eq!(lower.len(), names.len(), "{names:?}");
        for n in &names {
            assert!(is_safe_file_name(n), "{n}");
            assert!(n.len() < 128, "{n}");
        }
    }

    #[test]
    fn empty_and_short_files_are_reported_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, b"").unwrap();
        assert!(matches!(
            read_framed(&p),
            Err(StorageError::Truncated { found: 0, .. })
        ));
        fs::write(&p, b"LG").unwrap();
        assert!(matches!(
            read_framed(&p),
            Err(StorageError::Truncated { found: 2, .. })
        ));
        fs::write(&p, b"XY").unwrap();
        assert!(matches!(
            read_framed(&p),
            Err(StorageError::BadMagic { .. })
        ));
        // A length field of u64::MAX must not overflow or allocate.
        let mut header = Vec::from(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&u64::MAX.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        fs::write(&p, &header).unwrap();
        assert!(matches!(
            read_framed(&p),
            Err(StorageError::Truncated {
                expected: u64::MAX,
                ..
            })
        ));
    }
}
