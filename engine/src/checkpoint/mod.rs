//! Checkpoints: where completed snapshots are kept and how they are read back.
//!
//! A checkpoint (as in Flink) is a consistent snapshot of every task's state,
//! taken when the aligned barriers of one checkpoint id have passed every
//! task. This module holds the durable side of it:
//!
//! - [`storage`]: the [`CheckpointStorage`] trait and its stores,
//!   [`LocalDirStorage`] (the default: one atomically published,
//!   checksummed `chk-<n>/` folder per checkpoint under a root directory) and
//!   [`MemoryStorage`] (for tests).
//!
//! The checkpoint coordinator (trigger, acknowledgements, completion,
//! retention) calls the storage from its own thread, never from a task
//! thread, because a durable write blocks on `fsync`.

pub mod storage;

pub use storage::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, JobFingerprint,
    LatestValid, LoadedCheckpoint, LocalDirStorage, MemoryStorage, StorageError, TaskStateKey,
    FORMAT_VERSION, MAGIC,
};
