//! [`LocalDirStorage`]: one atomically published, checksummed checkpoint
//! per `chk-<n>` under a root directory: a file holding the metadata and
//! every part (what this build writes, `super::single`), or a folder of a
//! `_metadata` file and a `.state` file per part (what builds before wrote;
//! still read, restored and retired). Layout and protocol in [`super`]'s
//! docs.

use super::api::{
    validate_id, validate_parts, CheckpointHandle, CheckpointMetadata, CheckpointStorage,
    LoadedCheckpoint, PartHandle, PartLink, Result, StorageError, TaskStateKey, MAX_CHECKPOINT_ID,
};
use super::framing::{read_framed, sync_dir, FORMAT_VERSION, HEADER_LEN};
use crate::types::element::CheckpointId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// Name of the metadata file inside a checkpoint folder (Flink's name).
const METADATA_FILE: &str = "_metadata";

/// Prefix of a published checkpoint folder.
pub(super) const CHK_PREFIX: &str = "chk-";

/// Prefix of every temporary entry (in-progress write or deletion).
const TMP_PREFIX: &str = ".tmp-";

/// Suffix of a state file.
const STATE_SUFFIX: &str = ".state";

/// Longest task-name part of a state file name, in bytes; keeps file names
/// well below the usual 255-byte limit of a file name.
const MAX_NAME_PART: usize = 96;

/// Makes temporary folder names unique within this process (the pid makes
/// them unique across processes).
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

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
    /// The checkpoint whose part of the same subtask this one builds on
    /// (metadata version 2; absent: a complete part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base: Option<CheckpointId>,
    /// The oldest checkpoint of the chain a restore needs
    /// ([`PartHandle::from`]; absent: back to the full part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<CheckpointId>,
    /// In a one-file checkpoint: where the part starts, from the end of the
    /// metadata (absent in a folder: the part is its own file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
}

/// Where a published checkpoint lies.
#[derive(Clone, Debug)]
enum Stored {
    /// A one-file checkpoint (this build's).
    File(PathBuf),
    /// A folder of files (earlier builds').
    Folder(PathBuf),
}

impl Stored {
    fn path(&self) -> &Path {
        match self {
            Stored::File(p) | Stored::Folder(p) => p,
        }
    }
}

/// Parts written for checkpoints not published yet, by checkpoint.
type Staged = BTreeMap<CheckpointId, BTreeMap<TaskStateKey, Vec<u8>>>;

/// The version of `_metadata`'s JSON. Version 2 added `base` to state
/// entries (incremental checkpoints); version 1 files are read as they
/// are (every part complete). A build that reads only version 1 refuses
/// version 2, so it never takes a delta for a complete state.
const METADATA_VERSION: u16 = 2;

/// The JSON payload of `_metadata`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct MetadataFile {
    format_version: u16,
    checkpoint: CheckpointMetadata,
    states: Vec<StateFileEntry>,
}

/// Aborted checkpoints a [`LocalDirStorage`] remembers, to refuse a late
/// part of one.
const MAX_DISCARDED: usize = 1024;

/// The default store: one file per checkpoint under a root directory (see
/// the module docs for the layout and the atomic publish protocol).
///
/// Retention keeps up to two retired checkpoint files, renamed to
/// `.tmp-spare-*`, for the next checkpoints to write over instead of
/// deleting one file and creating another each checkpoint; the last
/// handle's drop deletes them.
#[derive(Clone, Debug)]
pub struct LocalDirStorage {
    root: PathBuf,
    /// Checkpoints this handle (or a clone) discarded: a part written for
    /// one later is refused ([`StorageError::Discarded`]), so a snapshot
    /// thread that finishes after an abort cannot stage bytes no publish
    /// will ever take. Part writes hold the read side, `discard` the
    /// write side, so the two never interleave.
    discarded: Arc<RwLock<BTreeSet<CheckpointId>>>,
    /// Parts written and not published: a checkpoint's parts go to disk
    /// together, in one file, when it is published.
    staged: Arc<Mutex<Staged>>,
    /// The length of each checkpoint file this handle published (what a
    /// snapshot's check of its chain compares with).
    published_len: Arc<Mutex<HashMap<CheckpointId, u64>>>,
    /// Files of retired checkpoints kept to be written over by the next
    /// ones ([`Spares`]).
    spares: Arc<Spares>,
    /// What changed in the root since a check found a file intact.
    watch: Arc<super::watch::Watch>,
}

/// Retired checkpoint files kept, renamed to temporaries, for the next
/// checkpoints to write over instead of deleting one file and creating
/// another each checkpoint: at a 10 ms interval, W2's record path paid
/// for the deletion's freed blocks and inode and the new file's
/// allocation (its p50 on/off with a thread per task: medians 1.43
/// against 1.56 over alternated runs, docs/benchmarks-history.md,
/// "The publisher's disk work at 10 ms"). RocksDB recycles its
/// write-ahead log files for the same reason (`recycle_log_file_num`).
/// At most [`MAX_SPARES`]; the files are deleted when the last handle on
/// the store drops, and a crashed process's by the next start's
/// [`clean_temporaries`](CheckpointStorage::clean_temporaries).
#[derive(Debug, Default)]
struct Spares(
    /// Each file with its length when this handle published it.
    Mutex<Vec<(PathBuf, Option<u64>)>>,
);

/// Retired files kept for reuse: retention retires about one checkpoint
/// per completed one.
const MAX_SPARES: usize = 2;

impl Spares {
    /// A kept file to write over, if one is still a plain file of its own:
    /// one replaced by a symbolic link, or linked elsewhere too (a copy
    /// made with `ln` or `cp -al`), is deleted instead, so that writing
    /// over it never changes a file another name shows.
    /// One of length `want` is taken first (written over, its length does
    /// not change: see [`single`](super::single)). Returns the file and
    /// its length.
    fn take(&self, want: u64) -> Option<(PathBuf, u64)> {
        let (path, _) = {
            let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match kept.iter().position(|(_, len)| *len == Some(want)) {
                Some(i) => kept.remove(i),
                None => kept.pop()?,
            }
        };
        match fs::symlink_metadata(&path) {
            Ok(m) if is_own_file(&m) => Some((path, m.len())),
            Ok(_) => {
                let _ = fs::remove_file(&path);
                None
            }
            Err(_) => None,
        }
    }
}

/// A regular file with no other name (hard link).
fn is_own_file(meta: &fs::Metadata) -> bool {
    #[cfg(unix)]
    let single = std::os::unix::fs::MetadataExt::nlink(meta) == 1;
    #[cfg(not(unix))]
    let single = true;
    meta.file_type().is_file() && single
}

impl Drop for Spares {
    fn drop(&mut self) {
        for (path, _) in self
            .0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = fs::remove_file(path);
        }
    }
}

impl LocalDirStorage {
    /// Opens (creating it and its parents if missing) the store at `root`.
    /// Existing checkpoints are left as they are.
    ///
    /// # Errors
    /// [`StorageError::Io`] if `root` cannot be created or is not a directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        // A file in the way would make create_dir_all say "File exists".
        if root.exists() && !root.is_dir() {
            return Err(StorageError::io(
                "opening",
                &root,
                io::Error::other("it is a file, not a folder"),
            ));
        }
        fs::create_dir_all(&root).map_err(|e| StorageError::io("creating", &root, e))?;
        let meta = fs::metadata(&root).map_err(|e| StorageError::io("inspecting", &root, e))?;
        if !meta.is_dir() {
            return Err(StorageError::io(
                "opening",
                &root,
                io::Error::other("not a directory"),
            ));
        }
        Ok(LocalDirStorage {
            root,
            discarded: Arc::default(),
            staged: Arc::default(),
            published_len: Arc::default(),
            spares: Arc::default(),
            watch: Arc::new(super::watch::Watch::new(parse_chk_name)),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the folder for one writing job: an exclusive, non-blocking
    /// `flock` on `<root>/.lock` (which holds the holder's pid), held until
    /// the returned guard drops. A job writes checkpoints and removes
    /// leftover `.tmp-*` folders, so two jobs on one folder would spoil
    /// each other's checkpoints. Unix only; elsewhere it takes nothing.
    ///
    /// # Errors
    /// [`StorageError::Locked`] when another process holds it,
    /// [`StorageError::Io`] when the lock file cannot be opened.
    pub fn lock(&self) -> Result<FolderLock> {
        FolderLock::take(&self.root)
    }

    /// The path checkpoint `id` is (or would be) published at,
    /// `<root>/chk-<n>`: a file, or a folder written by an earlier build.
    pub fn checkpoint_path(&self, id: CheckpointId) -> PathBuf {
        self.root.join(format!("{CHK_PREFIX}{}", id.get()))
    }

    /// Where the part of `key` in checkpoint `id` lies: the file and the
    /// byte range of the part's bytes in it (for inspection and for tests
    /// that damage one part). Reads only the metadata.
    ///
    /// # Errors
    /// [`StorageError::NotFound`] without checkpoint `id`,
    /// [`StorageError::MissingStateFile`] when it has no part for `key`,
    /// any error reading its metadata.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointId, storage::CheckpointMetadata, storage::CheckpointStorage, storage::JobFingerprint};
    /// use lockgate::{storage::LocalDirStorage, SnapshotKind, storage::TaskStateKey};
    /// let dir = tempfile::tempdir()?;
    /// let store = LocalDirStorage::open(dir.path())?;
    /// let key = TaskStateKey::new("sum", 0);
    /// let meta = CheckpointMetadata::new(CheckpointId(1), SnapshotKind::Checkpoint, 0, JobFingerprint::default());
    /// store.write_checkpoint(&meta, &[(key.clone(), b"state".to_vec())])?;
    /// let (file, range) = store.part_location(CheckpointId(1), &key)?;
    /// assert_eq!(&std::fs::read(file)?[range.start as usize..range.end as usize], b"state");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn part_location(
        &self,
        id: CheckpointId,
        key: &TaskStateKey,
    ) -> Result<(PathBuf, std::ops::Range<u64>)> {
        let (meta, stored) = self.read_meta(id)?;
        let Some(entry) = meta
            .states
            .iter()
            .find(|e| e.task == key.task && e.subtask == key.subtask)
        else {
            return Err(StorageError::MissingStateFile {
                path: stored.path().join(state_file_name(key)),
            });
        };
        Ok(match stored {
            Stored::File(path) => {
                let start = super::single::parts_start(&path)? + entry.offset.unwrap_or(0);
                (path, start..start + entry.size)
            }
            Stored::Folder(dir) => {
                let start = HEADER_LEN as u64;
                (dir.join(&entry.file), start..start + entry.size)
            }
        })
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
        self.parse_metadata(id, &path, &payload)
    }

    /// Parses and checks (version, id, file names) the metadata of
    /// checkpoint `id` read from `path`.
    fn parse_metadata(
        &self,
        id: CheckpointId,
        path: &Path,
        payload: &[u8],
    ) -> Result<MetadataFile> {
        let path = path.to_path_buf();
        let bad = |reason: String| StorageError::BadMetadata {
            path: path.clone(),
            reason,
        };
        let meta: MetadataFile =
            serde_json::from_slice(payload).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        if !(FORMAT_VERSION..=METADATA_VERSION).contains(&meta.format_version) {
            return Err(StorageError::UnsupportedVersion {
                path,
                found: meta.format_version,
                supported: METADATA_VERSION,
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

    /// Where checkpoint `id` lies: a file or a folder `chk-<n>`.
    fn locate(&self, id: CheckpointId) -> Result<Stored> {
        let path = self.checkpoint_path(id);
        match fs::metadata(&path) {
            Ok(m) if m.is_dir() => Ok(Stored::Folder(path)),
            Ok(_) => Ok(Stored::File(path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StorageError::NotFound {
                id,
                root: self.root.clone(),
            }),
            Err(e) => Err(StorageError::io("inspecting", &path, e)),
        }
    }

    /// The metadata of checkpoint `id`, and where it lies.
    fn read_meta(&self, id: CheckpointId) -> Result<(MetadataFile, Stored)> {
        let stored = self.locate(id)?;
        let meta = match &stored {
            Stored::Folder(dir) => self.read_metadata_file(id, dir)?,
            Stored::File(path) => {
                let bytes = super::single::read_single_metadata(path)?;
                self.parse_metadata(id, path, &bytes)?
            }
        };
        Ok((meta, stored))
    }
}

impl LocalDirStorage {
    /// `stat`s the file of `part` (its checkpoint's, or a folder's part
    /// file): there, at the size published. Returns whether it was a
    /// one-file checkpoint.
    fn stat_part(&self, part: &PartHandle) -> Result<bool> {
        let path = self.checkpoint_path(part.checkpoint);
        let meta = match fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::MissingStateFile { path })
            }
            other => other.map_err(|e| StorageError::io("looking at", &path, e))?,
        };
        if meta.is_dir() {
            // A folder of an earlier build: the part is its own file.
            let file = path.join(&part.file);
            let len = match fs::metadata(&file) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(StorageError::MissingStateFile { path: file })
                }
                other => other
                    .map_err(|e| StorageError::io("looking at", &file, e))?
                    .len(),
            };
            if len != HEADER_LEN as u64 + part.size {
                return Err(StorageError::StateMismatch {
                    path: file,
                    what: "file size",
                    expected: HEADER_LEN as u64 + part.size,
                    found: len,
                });
            }
            return Ok(false);
        }
        let expected = self
            .published_len
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&part.checkpoint)
            .copied();
        if let Some(expected) = expected.filter(|e| *e != meta.len()) {
            return Err(StorageError::StateMismatch {
                path,
                what: "file size",
                expected,
                found: meta.len(),
            });
        }
        Ok(true)
    }

    /// The parts of `key`'s chain up to and including its part in `base`
    /// (oldest first), for checkpoint `id`, each read and validated.
    /// `files` keeps each base file read once for all the subtasks whose
    /// chains pass through it.
    fn read_chain(
        &self,
        id: CheckpointId,
        mut base: CheckpointId,
        from: Option<CheckpointId>,
        key: &TaskStateKey,
        files: &mut HashMap<CheckpointId, Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>> {
        let mut chain = Vec::new();
        let mut newer = id;
        loop {
            let missing = |why: String| StorageError::MissingBase {
                id,
                base,
                task: key.task.clone(),
                subtask: key.subtask,
                why,
                path: self.checkpoint_path(base),
            };
            // A base is always older: anything else is a damaged chain (and
            // would loop).
            if base >= newer {
                return Err(missing(format!(
                    "checkpoint {newer} names a base not older than itself"
                )));
            }
            let (meta, stored) = match self.read_meta(base) {
                Ok(m) => m,
                Err(StorageError::NotFound { .. }) => {
                    return Err(missing("the checkpoint is gone".into()))
                }
                Err(e) => return Err(e),
            };
            let Some(entry) = meta
                .states
                .iter()
                .find(|e| e.task == key.task && e.subtask == key.subtask)
            else {
                return Err(missing("it has no part for this subtask".into()));
            };
            chain.push(match &stored {
                Stored::Folder(dir) => read_entry(dir, entry)?,
                Stored::File(path) => {
                    let parts = match files.entry(base) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(super::single::read_single(path)?.1)
                        }
                    };
                    part_in_file(path, parts, entry)?
                }
            });
            match entry.base.filter(|b| from.is_none_or(|f| *b >= f)) {
                Some(b) => {
                    newer = base;
                    base = b;
                }
                None => break,
            }
        }
        chain.reverse();
        Ok(chain)
    }
}

/// Part `entry` of the one-file checkpoint at `path` (whose parts are
/// `parts`), checked against its size and CRC32C.
fn part_in_file(path: &Path, parts: &[u8], entry: &StateFileEntry) -> Result<Vec<u8>> {
    let name = PathBuf::from(format!("{}#{}", path.display(), entry.file));
    let Some(offset) = entry.offset else {
        return Err(StorageError::BadMetadata {
            path: path.to_path_buf(),
            reason: format!(
                "part {:?} has no offset in a one-file checkpoint",
                entry.file
            ),
        });
    };
    let end = offset
        .checked_add(entry.size)
        .filter(|e| *e <= parts.len() as u64);
    let Some(end) = end else {
        return Err(StorageError::Truncated {
            path: name,
            expected: offset.saturating_add(entry.size),
            found: parts.len() as u64,
        });
    };
    let bytes = &parts[offset as usize..end as usize];
    let crc = crc32c::crc32c(bytes);
    if crc != entry.crc32c {
        return Err(StorageError::ChecksumMismatch {
            path: name,
            expected: entry.crc32c,
            found: crc,
        });
    }
    Ok(bytes.to_vec())
}

/// Checks that the parts of a one-file checkpoint fill its parts region
/// exactly (a cut or grown file).
/// `metadata_len`: the metadata's bytes (padding included), so that the
/// error gives the whole file's lengths.
fn check_file_length(
    path: &Path,
    meta: &MetadataFile,
    metadata_len: usize,
    parts: &[u8],
) -> Result<()> {
    let start = (super::single::SINGLE_HEADER_LEN + metadata_len) as u64;
    let expected: u64 = start + meta.states.iter().map(|e| e.size).sum::<u64>();
    let found = start + parts.len() as u64;
    match found.cmp(&expected) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected,
            found,
        }),
        std::cmp::Ordering::Greater => Err(StorageError::TrailingBytes {
            path: path.to_path_buf(),
            expected,
            found,
        }),
    }
}

/// Reads the part `entry` of the checkpoint in `dir` and checks it against
/// what `_metadata` recorded.
fn read_entry(dir: &Path, entry: &StateFileEntry) -> Result<Vec<u8>> {
    let path = dir.join(&entry.file);
    let payload = match read_framed(&path) {
        Err(StorageError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Err(StorageError::MissingStateFile { path })
        }
        other => other?,
    };
    // The frame's own CRC has been checked; now check that the file is the
    // one _metadata recorded.
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
    Ok(payload)
}

/// Bytes [`copy_with_crc`] handles between two yield points: 256 KiB,
/// some 20-30 µs of copying and checksumming.
const COPY_PIECE: usize = 256 << 10;

/// A copy of `bytes` and their CRC32C, made [`COPY_PIECE`] by piece with
/// a [`yield_point`](crate::tuning::yield_point) between pieces.
fn copy_with_crc(bytes: &[u8]) -> (Vec<u8>, u32) {
    let mut copy = Vec::with_capacity(bytes.len());
    let mut crc = 0;
    for piece in bytes.chunks(COPY_PIECE) {
        crc = crc32c::crc32c_append(crc, piece);
        copy.extend_from_slice(piece);
        crate::util::background::yield_point();
    }
    (copy, crc)
}

impl CheckpointStorage for LocalDirStorage {
    /// Keeps the part in memory until [`CheckpointStorage::publish`]
    /// writes it, with the checkpoint's other parts, in one file (its
    /// CRC32C computed here, on the caller's thread).
    fn write_part(&self, id: CheckpointId, key: &TaskStateKey, bytes: &[u8]) -> Result<PartHandle> {
        validate_id(id)?;
        // The copy and its checksum piece by piece, with a yield point
        // between pieces and no lock held: a part of megabytes would
        // otherwise be one unbroken millisecond of a worker's slice.
        let (copy, crc32c) = copy_with_crc(bytes);
        let discarded = self
            .discarded
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if discarded.contains(&id) {
            return Err(StorageError::Discarded {
                id,
                root: self.root.clone(),
            });
        }
        let mut staged = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        let parts = staged.entry(id).or_default();
        if parts.contains_key(key) {
            return Err(StorageError::InvalidInput {
                id,
                reason: format!(
                    "the part of task {:?} subtask {} is written twice",
                    key.task, key.subtask
                ),
            });
        }
        parts.insert(key.clone(), copy);
        Ok(PartHandle {
            checkpoint: id,
            key: key.clone(),
            file: state_file_name(key),
            size: bytes.len() as u64,
            crc32c,
            written_bytes: bytes.len() as u64,
            base: None,
            from: None,
        })
    }

    /// Parts are staged in memory; the file is written by `publish`.
    fn write_part_blocks(&self) -> bool {
        false
    }

    /// Writes the metadata and every part into one new file, `fsync`s it,
    /// renames it to `chk-<n>` and `fsync`s the root: two `fsync`s a
    /// checkpoint, whatever its number of parts.
    fn publish(&self, meta: &CheckpointMetadata, parts: &[PartHandle]) -> Result<CheckpointHandle> {
        validate_parts(meta, parts)?;
        let target = self.checkpoint_path(meta.id);
        if target.exists() {
            return Err(StorageError::AlreadyExists {
                id: meta.id,
                path: target,
            });
        }
        let mut names = HashSet::with_capacity(parts.len());
        for p in parts {
            if !is_safe_file_name(&p.file) || !names.insert(p.file.to_ascii_lowercase()) {
                return Err(StorageError::InvalidInput {
                    id: meta.id,
                    reason: format!("part file name {:?} is invalid or taken twice", p.file),
                });
            }
        }
        if let Some(p) = parts.iter().find(|p| p.base.is_some_and(|b| b >= meta.id)) {
            return Err(StorageError::InvalidInput {
                id: meta.id,
                reason: format!(
                    "the part of task {:?} subtask {} builds on checkpoint {:?}, not an earlier one",
                    p.key.task, p.key.subtask, p.base
                ),
            });
        }
        let mut staged = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&meta.id)
            .unwrap_or_default();
        let mut bytes = Vec::with_capacity(parts.len());
        let mut states = Vec::with_capacity(parts.len());
        let mut offset = 0u64;
        for p in parts {
            let Some(b) = staged.remove(&p.key) else {
                return Err(StorageError::MissingStateFile {
                    path: target.join(&p.file),
                });
            };
            states.push(StateFileEntry {
                task: p.key.task.clone(),
                subtask: p.key.subtask,
                file: p.file.clone(),
                size: b.len() as u64,
                crc32c: p.crc32c,
                base: p.base,
                from: p.from,
                offset: Some(offset),
            });
            offset += b.len() as u64;
            bytes.push(b);
        }
        let metadata = MetadataFile {
            format_version: METADATA_VERSION,
            checkpoint: meta.clone(),
            states,
        };
        let json = serde_json::to_vec(&metadata).map_err(|e| StorageError::BadMetadata {
            path: target.clone(),
            reason: format!("cannot serialize: {e}"),
        })?;
        let spare = self
            .spares
            .take(super::single::file_len(json.len(), offset as usize) as u64);
        let reuse = spare.as_ref().map(|(_, len)| *len);
        let tmp = spare.map_or_else(|| self.temp_path("chk", meta.id), |(path, _)| path);
        let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let written =
            super::single::write_single(&tmp, &json, &slices, reuse).inspect_err(|_| {
                let _ = fs::remove_file(&tmp);
            })?;
        publish(&tmp, &target, meta.id, &self.root).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })?;
        self.published_len
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(meta.id, written);
        Ok(CheckpointHandle {
            id: meta.id,
            path: target,
            total_bytes: written,
        })
    }

    fn check_part(&self, part: &PartHandle) -> Result<()> {
        self.check_parts(std::slice::from_ref(part))
    }

    fn check_parts(&self, parts: &[PartHandle]) -> Result<()> {
        self.watch
            .check(&self.root, parts, |part| self.stat_part(part))
    }

    fn verify_part(&self, part: &PartHandle) -> Result<()> {
        self.verify_parts(std::slice::from_ref(part))
            .pop()
            .unwrap_or(Ok(()))
    }

    /// Reads each checkpoint file once, whatever its number of parts (a
    /// file that failed is read again for each of its parts, so that each
    /// gets its own error: the errors hold an `io::Error`, which does not
    /// clone).
    fn verify_parts(&self, parts: &[PartHandle]) -> Vec<Result<()>> {
        // A checkpoint file is read once, its metadata with its parts
        // (the publisher reads back every checkpoint it publishes).
        let read = |id: CheckpointId| -> Result<(MetadataFile, Stored, Vec<u8>)> {
            match self.locate(id)? {
                Stored::File(path) => {
                    let (metadata, region) = super::single::read_single(&path)?;
                    let meta = self.parse_metadata(id, &path, &metadata)?;
                    check_file_length(&path, &meta, metadata.len(), &region)?;
                    Ok((meta, Stored::File(path), region))
                }
                Stored::Folder(_) => {
                    let (meta, stored) = self.read_meta(id)?;
                    Ok((meta, stored, Vec::new()))
                }
            }
        };
        let mut files: HashMap<CheckpointId, Option<(MetadataFile, Stored, Vec<u8>)>> =
            HashMap::new();
        parts
            .iter()
            .map(|part| {
                let cached = match files.get(&part.checkpoint) {
                    Some(Some(file)) => file,
                    Some(None) => return read(part.checkpoint).map(drop),
                    None => match read(part.checkpoint) {
                        Ok(file) => files.entry(part.checkpoint).or_insert(Some(file)),
                        Err(e) => {
                            files.insert(part.checkpoint, None);
                            return Err(e);
                        }
                    }
                    .as_ref()
                    .expect("just read"),
                };
                let (meta, stored, region) = cached;
                let Some(entry) = meta
                    .states
                    .iter()
                    .find(|e| e.task == part.key.task && e.subtask == part.key.subtask)
                else {
                    return Err(StorageError::MissingStateFile {
                        path: stored.path().join(&part.file),
                    });
                };
                if entry.size != part.size || entry.crc32c != part.crc32c {
                    return Err(StorageError::StateMismatch {
                        path: stored.path().join(&part.file),
                        what: "payload size or crc32c",
                        expected: part.size,
                        found: entry.size,
                    });
                }
                match stored {
                    Stored::File(path) => part_in_file(path, region, entry).map(drop),
                    Stored::Folder(dir) => read_entry(dir, entry).map(drop),
                }
            })
            .collect()
    }

    fn discard(&self, id: CheckpointId) -> Result<()> {
        // No part write is under way once this is held, and none starts
        // for `id` after it.
        let mut discarded = self
            .discarded
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        discarded.insert(id);
        // Bounded for a job that runs for days with aborts: a snapshot
        // thread more than this many aborted checkpoints late is not
        // expected (its part would then stay staged, unpublished).
        while discarded.len() > MAX_DISCARDED {
            discarded.pop_first();
        }
        self.staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        Ok(())
    }

    fn list(&self) -> Result<Vec<CheckpointId>> {
        let mut ids = Vec::new();
        let entries =
            fs::read_dir(&self.root).map_err(|e| StorageError::io("listing", &self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("listing", &self.root, e))?;
            // A file (this build's) or a folder (earlier builds').
            if let Some(id) = entry.file_name().to_str().and_then(parse_chk_name) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    fn load(&self, id: CheckpointId) -> Result<LoadedCheckpoint> {
        let (meta, stored) = self.read_meta(id)?;
        let region = match &stored {
            Stored::File(path) => {
                let (metadata, region) = super::single::read_single(path)?;
                check_file_length(path, &meta, metadata.len(), &region)?;
                Some(region)
            }
            Stored::Folder(_) => None,
        };
        let mut states = BTreeMap::new();
        let mut bases = BTreeMap::new();
        let mut base_files = HashMap::new();
        let mut total = 0u64;
        for entry in &meta.states {
            let payload = match (&stored, &region) {
                (Stored::File(path), Some(region)) => part_in_file(path, region, entry)?,
                (Stored::Folder(dir), _) => {
                    let p = read_entry(dir, entry)?;
                    total += HEADER_LEN as u64;
                    p
                }
                (Stored::File(_), None) => unreachable!("a file's parts were read"),
            };
            total += payload.len() as u64;
            let key = TaskStateKey::new(entry.task.clone(), entry.subtask);
            if let Some(base) = entry.base {
                let chain = if entry.from.is_some_and(|f| base < f) {
                    Vec::new()
                } else {
                    self.read_chain(id, base, entry.from, &key, &mut base_files)?
                };
                bases.insert(key.clone(), chain);
            }
            states.insert(key, payload);
        }
        let total_bytes = match &stored {
            Stored::File(path) => fs::metadata(path).map(|m| m.len()).unwrap_or(total),
            Stored::Folder(dir) => {
                total
                    + fs::metadata(dir.join(METADATA_FILE))
                        .map(|m| m.len())
                        .unwrap_or(0)
            }
        };
        Ok(LoadedCheckpoint {
            metadata: meta.checkpoint,
            states,
            bases,
            handle: CheckpointHandle {
                id,
                path: stored.path().to_path_buf(),
                total_bytes,
            },
        })
    }

    fn part_bases(&self, id: CheckpointId) -> Result<Vec<(TaskStateKey, PartLink)>> {
        let (meta, _) = self.read_meta(id)?;
        Ok(meta
            .states
            .iter()
            .map(|e| {
                let link = PartLink {
                    base: e.base,
                    from: e.from,
                };
                (TaskStateKey::new(e.task.clone(), e.subtask), link)
            })
            .collect())
    }

    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata> {
        Ok(self.read_meta(id)?.0.checkpoint)
    }

    fn remove(&self, id: CheckpointId) -> Result<()> {
        self.remove_many(&[id])
    }

    /// A file is unlinked (at once whole: no `fsync`, a crash that forgets
    /// it leaves an old checkpoint, which retention deletes again); a
    /// folder is renamed out of the way first, the renames made durable by
    /// one `fsync` of the root, then deleted, so that no half-deleted
    /// `chk-<n>` is ever visible.
    fn remove_many(&self, ids: &[CheckpointId]) -> Result<()> {
        let mut renamed = Vec::with_capacity(ids.len());
        let mut failed = None;
        for &id in ids {
            let path = self.checkpoint_path(id);
            let stored = match self.locate(id) {
                Ok(s) => s,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            if let Stored::File(_) = stored {
                let _call = crate::util::calls::call(|| format!("retiring {}", path.display()));
                let mut spares = self.spares.0.lock().unwrap_or_else(PoisonError::into_inner);
                // Whether it may be written over is decided when it is
                // taken (`Spares::take`).
                let retired = if spares.len() < MAX_SPARES {
                    let spare = self.temp_path("spare", id);
                    let len = self
                        .published_len
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(&id)
                        .copied();
                    fs::rename(&path, &spare).map(|()| spares.push((spare, len)))
                } else {
                    fs::remove_file(&path)
                };
                drop(spares);
                if let Err(e) = retired {
                    failed = Some(StorageError::io("deleting", &path, e));
                    break;
                }
                self.published_len
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                continue;
            }
            let tmp = self.temp_path("del-chk", id);
            match fs::rename(&path, &tmp) {
                Ok(()) => renamed.push(tmp),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    failed = Some(StorageError::NotFound {
                        id,
                        root: self.root.clone(),
                    });
                    break;
                }
                Err(e) => {
                    failed = Some(StorageError::io("renaming for deletion", &path, e));
                    break;
                }
            }
        }
        if !renamed.is_empty() {
            sync_dir(&self.root)?;
        }
        for tmp in &renamed {
            crate::util::background::yield_point();
            let _call = crate::util::calls::call(|| format!("deleting {}", tmp.display()));
            fs::remove_dir_all(tmp).map_err(|e| StorageError::io("deleting", tmp, e))?;
        }
        failed.map_or(Ok(()), Err)
    }

    /// Renames `chk-<id>` to `corrupt-chk-<id>` (`corrupt-chk-<id>-2`, ...
    /// when taken), a name no listing, restore or retention reads.
    fn set_aside(&self, id: CheckpointId) -> Result<Option<String>> {
        let path = self.locate(id)?.path().to_path_buf();
        let base = format!("corrupt-{CHK_PREFIX}{}", id.get());
        let target = (1u64..)
            .map(|n| match n {
                1 => self.root.join(&base),
                n => self.root.join(format!("{base}-{n}")),
            })
            .find(|p| !p.exists())
            .expect("some name is free");
        fs::rename(&path, &target).map_err(|e| StorageError::io("setting aside", &path, e))?;
        sync_dir(&self.root)?;
        Ok(Some(target.display().to_string()))
    }

    /// Every entry named `chk-*` or `corrupt-chk-*`, and every folder
    /// (or file) that holds or is a `_metadata`, whatever its name (a
    /// layout of another version or tool); temporaries and the lock file
    /// are not checkpoints.
    fn traces(&self) -> Result<Vec<String>> {
        let entries =
            fs::read_dir(&self.root).map_err(|e| StorageError::io("listing", &self.root, e))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("listing", &self.root, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.starts_with(TMP_PREFIX) {
                continue;
            }
            let named = name.starts_with(CHK_PREFIX)
                || name.starts_with(&format!("corrupt-{CHK_PREFIX}"))
                || name == METADATA_FILE;
            if named || entry.path().join(METADATA_FILE).exists() {
                found.push(name);
            }
        }
        found.sort();
        Ok(found)
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

/// Renames the complete file (or folder) `tmp` to `target` and makes the
/// rename durable.
fn publish(tmp: &Path, target: &Path, id: CheckpointId, root: &Path) -> Result<()> {
    // rename(2) would replace an empty existing folder, so check first (one
    // writer per store, see the trait docs).
    if target.exists() {
        return Err(StorageError::AlreadyExists {
            id,
            path: target.to_path_buf(),
        });
    }
    fs::rename(tmp, target).map_err(|e| {
        // A temporary gone before its rename was deleted by someone else:
        // name it, not the checkpoint that was never there.
        if e.kind() == io::ErrorKind::NotFound && !tmp.exists() {
            StorageError::io("publishing (the written file vanished)", tmp, e)
        } else {
            StorageError::io("publishing", target, e)
        }
    })?;
    sync_dir(root)
}

/// Parses a canonical `chk-<n>` name (decimal, no sign, no leading zeros).
/// The name of the lock file in a checkpoint folder (no listing, restore,
/// retention or clean-up reads it).
pub(crate) const LOCK_FILE: &str = ".lock";

/// A checkpoint folder held by one job ([`LocalDirStorage::lock`]);
/// dropping it removes the lock file and releases the lock.
#[derive(Debug)]
pub struct FolderLock {
    path: PathBuf,
    _file: fs::File,
}

impl FolderLock {
    fn take(root: &Path) -> Result<FolderLock> {
        let path = root.join(LOCK_FILE);
        // A lock file can be removed (by its holder's drop) between our
        // open and our lock: then the lock is on a file no one else sees,
        // and we try again on the one at the path (a few times: each try
        // follows another job's exit).
        for _ in 0..8 {
            let mut file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| StorageError::io("opening the lock file", &path, e))?;
            if !try_lock(&file).map_err(|e| StorageError::io("locking", &path, e))? {
                let mut text = String::new();
                let _ = io::Read::read_to_string(&mut file, &mut text);
                return Err(StorageError::Locked {
                    root: root.to_path_buf(),
                    holder: text.trim().parse().ok(),
                });
            }
            if same_file(&file, &path) {
                use io::Write as _;
                let _ = file.set_len(0);
                let _ = write!(file, "{}", std::process::id());
                return Ok(FolderLock { path, _file: file });
            }
        }
        Err(StorageError::Locked {
            root: root.to_path_buf(),
            holder: None,
        })
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // Removed first, then released (the file closes after this).
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(unix)]
fn try_lock(file: &fs::File) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock(2) on a file descriptor that `file` owns and keeps open
    // for the call; it passes no memory.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

#[cfg(not(unix))]
fn try_lock(_file: &fs::File) -> io::Result<bool> {
    Ok(true)
}

/// Whether `file` is still the file at `path` (not removed and recreated).
#[cfg(unix)]
fn same_file(file: &fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &fs::File, _path: &Path) -> bool {
    true
}

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

/// A portable file name for `key`, unique in a checkpoint without
/// coordination between the threads writing its parts. A task name made
/// only of `[a-z0-9_.-]` (not starting with `.`, at most [`MAX_NAME_PART`]
/// bytes) is kept as it is: `<task>-<subtask>.state`. Any other name is
/// cleaned (other characters replaced by `_`, uppercase lowered, a leading
/// `_` before a `.`, cut to [`MAX_NAME_PART`] bytes) and gets the CRC32C of
/// the exact name in hex, `<clean>-<subtask>-<hash>.state`, so two names
/// that read the same once cleaned (or differ only in case, for
/// case-insensitive file systems) get different files; the 8 hex digits
/// cannot be mistaken for a subtask index (below `MAX_PARALLELISM`).
/// `_metadata` records the name, so it need not be reversible.
fn state_file_name(key: &TaskStateKey) -> String {
    let clean =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.');
    let t = &key.task;
    if !t.is_empty() && !t.starts_with('.') && t.len() <= MAX_NAME_PART && t.chars().all(clean) {
        return format!("{t}-{}{STATE_SUFFIX}", key.subtask);
    }
    let mut base: String = t
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if clean(c) {
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
    let hash = crc32c::crc32c(t.as_bytes());
    format!("{base}-{}-{hash:08x}{STATE_SUFFIX}", key.subtask)
}

/// True for a plain file name inside a checkpoint folder: not empty, no path
/// separator, not hidden/`.`/`..`, not `_metadata`.
fn is_safe_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name != METADATA_FILE
        && !name.contains(['/', '\\', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::framing::MAGIC;

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
        let keys = [
            TaskStateKey::new("keyed_sum", 1),
            TaskStateKey::new("a/b", 0),
            TaskStateKey::new("a_b", 0),
            TaskStateKey::new("A_B", 0),
            TaskStateKey::new("..", 0),
            TaskStateKey::new("", 2),
            TaskStateKey::new("x".repeat(1000), 0),
        ];
        let names: Vec<String> = keys.iter().map(state_file_name).collect();
        assert_eq!(names[0], "keyed_sum-1.state");
        assert_eq!(names[1], state_file_name(&keys[1]), "deterministic");
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
