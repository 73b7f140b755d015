//! [`WorkloadError`]: what the workload code refuses (a bad key space,
//! workload name, source or checkpointed state) and a failed check.

use super::params::{MAX_CHECKED_RECORDS, MAX_KEYS};

/// Errors of this module: bad configuration, or a failed correctness check.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A key space needs at least one key.
    #[error("the number of keys must be at least 1")]
    NoKeys,
    /// More keys than [`MAX_KEYS`].
    #[error("too many keys: {0} (at most {MAX_KEYS})")]
    TooManyKeys(u64),
    /// A Zipf exponent must be finite and non-negative.
    #[error("invalid Zipf exponent {0}: it must be a finite number >= 0")]
    BadZipfExponent(f64),
    /// A key distribution string that is neither `uniform` nor `zipf:S`.
    #[error("unknown key distribution `{0}`: expected `uniform` or `zipf:S` with S a number >= 0 (e.g. `zipf:1.1`)")]
    BadKeyDist(String),
    /// A workload name that is not W1, W2, W3 or W4.
    #[error("unknown workload `{0}`: expected W1, W2, W3 or W4")]
    BadWorkload(String),
    /// Parallelism 0.
    #[error("the parallelism must be at least 1")]
    ZeroParallelism,
    /// A source index not below the parallelism.
    #[error("source index {source_index} is out of range for parallelism {parallelism}")]
    BadSource {
        /// The index given.
        source_index: usize,
        /// The parallelism given.
        parallelism: usize,
    },
    /// Checkpointed state that does not fit this check (another job's).
    #[error("bad checkpointed state: {0}")]
    BadState(String),
    /// More records than [`MAX_CHECKED_RECORDS`] for a [`SinkCheck`](super::SinkCheck).
    #[error("too many records to check: {0} (at most {MAX_CHECKED_RECORDS})")]
    TooManyRecords(u64),
    /// A correctness check failed; the text says how (see [`CheckReport`](super::CheckReport)).
    #[error("workload check failed: {0}")]
    CheckFailed(String),
}
