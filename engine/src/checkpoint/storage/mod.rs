//! Durable checkpoint storage, as Flink's checkpoint storage (a
//! `FsCheckpointStorage` reduced to one local directory), behind the
//! [`CheckpointStorage`] trait.
//!
//! # Layout of [`LocalDirStorage`]
//!
//! ```text
//! <root>/
//!   chk-3                   one file per published checkpoint, n in decimal
//!   chk-4
//!   chk-2/                  a checkpoint written by a build before one-file checkpoints
//!     _metadata
//!     keyed_sum-0.state
//!   .tmp-chk-5-812-7        a write in progress (or abandoned by a crash): ignored
//!   .tmp-spare-1-812-6      a retired checkpoint's file, kept to be written over
//! ```
//!
//! The tasks' snapshot threads hand their parts over with
//! [`CheckpointStorage::write_part`], which keeps them in memory: a part is
//! durable once [`CheckpointStorage::publish`] has returned. `publish`
//! writes the metadata and every part into one `.tmp-chk-<n>-<pid>-<k>`
//! file, `fdatasync`s it, renames it to `chk-<n>` and `fsync`s the root: two
//! flushes a checkpoint, whatever the number of subtasks (a folder per
//! checkpoint took one per part, then `_metadata`, the folder and the root).
//! A rename within one file system is atomic, so only complete checkpoints
//! ever appear as `chk-<n>`; a crash leaves only `.tmp-*` entries, which
//! [`CheckpointStorage::list`] ignores and
//! [`CheckpointStorage::clean_temporaries`] removes. Folders written by
//! earlier builds are listed, loaded, used as bases and retired as before.
//!
//! Retention renames up to two retired checkpoint files to
//! `.tmp-spare-*`, and the next checkpoints write over them (cut to their
//! length) instead of creating new files: a file deleted and another
//! created each checkpoint cost the record path at a 10 ms interval
//! (freeing and allocating blocks and an inode). A spare of the length the
//! new file needs is taken first: its `fdatasync` then has no size change
//! to journal. A file with another name (a hard link) or replaced by a
//! symbolic link is deleted, never written over. Dropping the store's last
//! handle deletes them; a crash leaves them to `clean_temporaries`.
//!
//! # File format
//!
//! A one-file checkpoint (version 2):
//!
//! | bytes | field                                              |
//! |-------|----------------------------------------------------|
//! | 4     | magic [`MAGIC`] = `b"LGCK"`                        |
//! | 2     | format version 2, u16 LE                           |
//! | 8     | metadata length `m`, u64 LE                        |
//! | 4     | CRC32C (Castagnoli) of the metadata, u32 LE        |
//! | m     | metadata (JSON): id, kind, times, job fingerprint, each part's offset, size and CRC32C; then spaces |
//! | ...   | the parts, one after another                       |
//!
//! The file's length must be exactly the header, the metadata and the parts.
//! The spaces round it up to a multiple of 4 KiB, so that a retired file
//! written over keeps its length (files of earlier builds have none).
//! In a folder (version [`FORMAT_VERSION`], 1), every file (state files and
//! `_metadata`) is framed alone:
//!
//! | bytes | field                                     |
//! |-------|-------------------------------------------|
//! | 4     | magic [`MAGIC`] = `b"LGCK"`               |
//! | 2     | format version, u16 LE ([`FORMAT_VERSION`]) |
//! | 8     | payload length in bytes, u64 LE           |
//! | 4     | CRC32C (Castagnoli) of the payload, u32 LE |
//! | n     | payload                                   |
//!
//! Either way a load checks every part's size and CRC32C against the
//! metadata, never trusts a length field before comparing it with the
//! file's real size, and never panics on a bad file: every problem is a
//! [`StorageError`] naming the file (and the part, `chk-4#keyed_sum-0.state`).
//!
//! # Modules
//! - `api`: the [`CheckpointStorage`] trait, its types and errors.
//! - `framing`: a folder's file frame.
//! - `single`: the one-file checkpoint.
//! - `local`: [`LocalDirStorage`].
//! - `memory`: [`MemoryStorage`], for tests.

mod api;
mod framing;
mod local;
mod memory;
mod single;
mod watch;

pub use api::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, JobFingerprint,
    LatestValid, LoadedCheckpoint, PartHandle, PartLink, StorageError, TaskStateKey,
    MAX_CHECKPOINT_ID,
};
pub use framing::{FORMAT_VERSION, MAGIC};
pub use local::{FolderLock, LocalDirStorage};
pub use memory::MemoryStorage;
