//! [`LocalDirStorage`]: one atomically published, checksummed `chk-<n>/`
//! folder per checkpoint under a root directory (layout and protocol in
//! [`super`]'s docs).

use super::api::{
    validate_id, validate_parts, CheckpointHandle, CheckpointMetadata, CheckpointStorage,
    LoadedCheckpoint, PartHandle, Result, StorageError, TaskStateKey, MAX_CHECKPOINT_ID,
};
use super::framing::{read_framed, sync_dir, write_framed, FORMAT_VERSION, HEADER_LEN};
use crate::types::element::CheckpointId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

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
}

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

/// The default store: one folder per checkpoint under a root directory (see
/// the module docs for the layout and the atomic publish protocol).
#[derive(Clone, Debug)]
pub struct LocalDirStorage {
    root: PathBuf,
    /// Checkpoints this handle (or a clone) discarded: a part written for
    /// one later is refused ([`StorageError::Discarded`]), so a snapshot
    /// thread that finishes after an abort cannot recreate the staging
    /// folder the abort removed. Part writes hold the read side while
    /// they create and fill the folder, `discard` the write side, so the
    /// two never interleave and parts still write side by side.
    discarded: Arc<RwLock<BTreeSet<CheckpointId>>>,
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

    /// The staging folder of checkpoint `id` in this process,
    /// `.tmp-chk-<n>-<pid>`: every part of `id` is written there, side by
    /// side, and it is renamed to `chk-<n>` on publish.
    fn staging_dir(&self, id: CheckpointId) -> PathBuf {
        self.root.join(format!(
            "{TMP_PREFIX}chk-{}-{}",
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
        let bad = |reason: String| StorageError::BadMetadata {
            path: path.clone(),
            reason,
        };
        let meta: MetadataFile =
            serde_json::from_slice(&payload).map_err(|e| bad(format!("not valid JSON: {e}")))?;
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
}

impl LocalDirStorage {
    /// The parts of `key`'s chain up to and including its part in `base`
    /// (oldest first), for checkpoint `id`, each read and validated.
    fn read_chain(
        &self,
        id: CheckpointId,
        mut base: CheckpointId,
        key: &TaskStateKey,
    ) -> Result<Vec<Vec<u8>>> {
        let mut chain = Vec::new();
        let mut newer = id;
        loop {
            let dir = self.checkpoint_dir(base);
            let missing = |why: String| StorageError::MissingBase {
                id,
                base,
                task: key.task.clone(),
                subtask: key.subtask,
                why,
                path: dir.clone(),
            };
            // A base is always older: anything else is a damaged chain (and
            // would loop).
            if base >= newer {
                return Err(missing(format!(
                    "checkpoint {newer} names a base not older than itself"
                )));
            }
            let meta = match self.read_metadata_file(base, &dir) {
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
            chain.push(read_entry(&dir, entry)?);
            match entry.base {
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

/// Creates a staging folder (or finds it there) inside the root, never the
/// root itself: a root removed under a running job (a second Ctrl-C of the
/// load generator removes its temporary one) fails the write instead of
/// coming back.
fn create_staging(dir: &Path) -> Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(StorageError::io("creating", dir, e)),
    }
}

impl CheckpointStorage for LocalDirStorage {
    fn write_part(&self, id: CheckpointId, key: &TaskStateKey, bytes: &[u8]) -> Result<PartHandle> {
        validate_id(id)?;
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
        let dir = self.staging_dir(id);
        let file = state_file_name(key);
        let path = dir.join(&file);
        let _call = crate::util::calls::call(|| format!("writing {}", path.display()));
        create_staging(&dir)?;
        let crc32c = write_framed(&path, bytes)?;
        Ok(PartHandle {
            checkpoint: id,
            key: key.clone(),
            file,
            size: bytes.len() as u64,
            crc32c,
            written_bytes: (HEADER_LEN + bytes.len()) as u64,
            base: None,
        })
    }

    fn publish(&self, meta: &CheckpointMetadata, parts: &[PartHandle]) -> Result<CheckpointHandle> {
        validate_parts(meta, parts)?;
        let target = self.checkpoint_dir(meta.id);
        if target.exists() {
            return Err(StorageError::AlreadyExists {
                id: meta.id,
                path: target,
            });
        }
        let dir = self.staging_dir(meta.id);
        create_staging(&dir)?;
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
        let metadata = MetadataFile {
            format_version: METADATA_VERSION,
            checkpoint: meta.clone(),
            states: parts
                .iter()
                .map(|p| StateFileEntry {
                    task: p.key.task.clone(),
                    subtask: p.key.subtask,
                    file: p.file.clone(),
                    size: p.size,
                    crc32c: p.crc32c,
                    base: p.base,
                })
                .collect(),
        };
        let meta_path = dir.join(METADATA_FILE);
        let json = serde_json::to_vec_pretty(&metadata).map_err(|e| StorageError::BadMetadata {
            path: meta_path.clone(),
            reason: format!("cannot serialize: {e}"),
        })?;
        write_framed(&meta_path, &json)?;
        sync_dir(&dir)?;
        publish(&dir, &target, meta.id, &self.root)?;
        let total_bytes =
            parts.iter().map(|p| p.written_bytes).sum::<u64>() + (HEADER_LEN + json.len()) as u64;
        Ok(CheckpointHandle {
            id: meta.id,
            path: target,
            total_bytes,
        })
    }

    fn check_part(&self, part: &PartHandle) -> Result<()> {
        let path = self.checkpoint_dir(part.checkpoint).join(&part.file);
        let meta = match fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::MissingStateFile { path })
            }
            other => other.map_err(|e| StorageError::io("looking at", &path, e))?,
        };
        if meta.len() != part.written_bytes {
            return Err(StorageError::StateMismatch {
                path,
                what: "file size",
                expected: part.written_bytes,
                found: meta.len(),
            });
        }
        Ok(())
    }

    fn verify_part(&self, part: &PartHandle) -> Result<()> {
        let entry = StateFileEntry {
            task: part.key.task.clone(),
            subtask: part.key.subtask,
            file: part.file.clone(),
            size: part.size,
            crc32c: part.crc32c,
            base: part.base,
        };
        read_entry(&self.checkpoint_dir(part.checkpoint), &entry).map(drop)
    }

    fn discard(&self, id: CheckpointId) -> Result<()> {
        let _call =
            crate::util::calls::call(|| format!("deleting {}", self.staging_dir(id).display()));
        // No part write is under way once this is held, and none starts
        // for `id` after it.
        let mut discarded = self
            .discarded
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        discarded.insert(id);
        let dir = self.staging_dir(id);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(StorageError::io("deleting", &dir, e))
            }
            _ => Ok(()),
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
        let mut bases = BTreeMap::new();
        let mut total = 0u64;
        for entry in &meta.states {
            let payload = read_entry(&dir, entry)?;
            total += HEADER_LEN as u64 + payload.len() as u64;
            let key = TaskStateKey::new(entry.task.clone(), entry.subtask);
            if let Some(base) = entry.base {
                bases.insert(key.clone(), self.read_chain(id, base, &key)?);
            }
            states.insert(key, payload);
        }
        let meta_len = fs::metadata(dir.join(METADATA_FILE))
            .map(|m| m.len())
            .unwrap_or(0);
        Ok(LoadedCheckpoint {
            metadata: meta.checkpoint,
            states,
            bases,
            handle: CheckpointHandle {
                id,
                path: dir,
                total_bytes: total + meta_len,
            },
        })
    }

    fn part_bases(&self, id: CheckpointId) -> Result<Vec<(TaskStateKey, Option<CheckpointId>)>> {
        let meta = self.read_metadata_file(id, &self.checkpoint_dir(id))?;
        Ok(meta
            .states
            .iter()
            .map(|e| (TaskStateKey::new(e.task.clone(), e.subtask), e.base))
            .collect())
    }

    fn load_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata> {
        let dir = self.checkpoint_dir(id);
        Ok(self.read_metadata_file(id, &dir)?.checkpoint)
    }

    fn remove(&self, id: CheckpointId) -> Result<()> {
        self.remove_many(&[id])
    }

    fn remove_many(&self, ids: &[CheckpointId]) -> Result<()> {
        let mut renamed = Vec::with_capacity(ids.len());
        let mut failed = None;
        for &id in ids {
            let dir = self.checkpoint_dir(id);
            let tmp = self.temp_path("del-chk", id);
            match fs::rename(&dir, &tmp) {
                Ok(()) => renamed.push(tmp),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    failed = Some(StorageError::NotFound {
                        id,
                        root: self.root.clone(),
                    });
                    break;
                }
                Err(e) => {
                    failed = Some(StorageError::io("renaming for deletion", &dir, e));
                    break;
                }
            }
        }
        // One fsync for every rename: no `chk-<n>` half deleted is ever
        // visible after a crash, whichever of them the deletion reached.
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
        let dir = self.checkpoint_dir(id);
        if !dir.is_dir() {
            return Err(StorageError::NotFound {
                id,
                root: self.root.clone(),
            });
        }
        let base = format!("corrupt-{CHK_PREFIX}{}", id.get());
        let target = (1u64..)
            .map(|n| match n {
                1 => self.root.join(&base),
                n => self.root.join(format!("{base}-{n}")),
            })
            .find(|p| !p.exists())
            .expect("some name is free");
        fs::rename(&dir, &target).map_err(|e| StorageError::io("setting aside", &dir, e))?;
        sync_dir(&self.root)?;
        Ok(Some(target.display().to_string()))
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
