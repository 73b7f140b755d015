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
//! A checkpoint is written into a `.tmp-chk-<n>-<pid>/` folder, file by
//! file, each file `fsync`ed (the state files by the tasks' snapshot
//! threads, side by side, as [`CheckpointStorage::write_part`]; `_metadata`
//! last, by [`CheckpointStorage::publish`]), then the folder `fsync`ed,
//! renamed to `chk-<n>/` and the root `fsync`ed. A rename within one file system is
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
//!
//! # Modules
//! - `api`: the [`CheckpointStorage`] trait, its types and errors.
//! - `framing`: the file frame above.
//! - `local`: [`LocalDirStorage`].
//! - `memory`: [`MemoryStorage`], for tests.

mod api;
mod framing;
mod local;
mod memory;

pub use api::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, JobFingerprint,
    LatestValid, LoadedCheckpoint, PartHandle, StorageError, TaskStateKey, MAX_CHECKPOINT_ID,
};
pub use framing::{FORMAT_VERSION, MAGIC};
pub use local::{FolderLock, LocalDirStorage};
pub use memory::MemoryStorage;
