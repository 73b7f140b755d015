//! Job configuration: batching, channels, waiting, pinning, checkpoints and
//! restarts.

use crate::barrier::{CheckpointMode, HandlerConfig};
/// How a task waits for input (a setting of [`JobConfig`]).
pub use crate::transport::input_gate::{WaitStrategy, DEFAULT_SPINS, SPIN_YIELD_EVERY};
use crate::types::key_groups::{DEFAULT_MAX_PARALLELISM, UPPER_MAX_PARALLELISM};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Which cores task threads are pinned to (with `core_affinity`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinPolicy {
    /// No pinning: the OS schedules task threads.
    #[default]
    None,
    /// Task k (in start order) on core `k % cores`, over the cores
    /// `core_affinity` reports. Works when tasks outnumber cores.
    RoundRobin,
    /// Task k on core `cores[k % cores.len()]`.
    Cores(Vec<usize>),
}

impl std::str::FromStr for PinPolicy {
    type Err = String;
    /// Parses `none`, `round-robin` or a comma-separated core list (`0,1`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(PinPolicy::None),
            "round-robin" => Ok(PinPolicy::RoundRobin),
            list => {
                let cores: Result<Vec<usize>, _> =
                    list.split(',').map(|c| c.trim().parse::<usize>()).collect();
                match cores {
                    Ok(c) if !c.is_empty() => Ok(PinPolicy::Cores(c)),
                    _ => Err(format!(
                        "invalid pinning '{s}' (expected none, round-robin or a core list like 0,1)"
                    )),
                }
            }
        }
    }
}

/// Default timer slack of task threads: 1 µs, far below the 50 µs Linux
/// default that would otherwise delay every timed wake-up of a paced source
/// (measured on the 2-core reference machine, `docs/workloads.md`).
pub const DEFAULT_TIMER_SLACK_NS: u64 = 1_000;

/// The largest batch size accepted: 2^20 records (a batch is allocated
/// whole; beyond this a typo would allocate gigabytes per channel).
pub const MAX_BATCH_SIZE: usize = 1 << 20;

/// The largest channel capacity accepted: 2^16 elements per channel (each
/// may be a full batch; more only adds memory, not throughput).
pub const MAX_CHANNEL_CAPACITY: usize = 1 << 16;

/// The largest parallelism of one operator: 1024 subtasks (one thread
/// each; an all-to-all exchange between two such operators has a million
/// channels).
pub const MAX_PARALLELISM: usize = 1024;

/// The longest time a configuration may hold (buffer timeout, checkpoint
/// interval, timeout and pause, restart delay): 2^63 ns, about 292 years,
/// so that it fits the u64 ns the threads compute with, with room to add.
pub const MAX_TIME: Duration = Duration::from_nanos(1 << 63);

/// Cores a [`PinPolicy::Cores`] list may name: below 1024, the size of
/// Linux's `cpu_set_t` (`CPU_SETSIZE`), which `core_affinity` fills (a
/// larger index would be out of its bounds).
pub const MAX_PIN_CORE: usize = 1024;

/// Restart strategy on a task failure (Flink's fixed-delay strategy).
///
/// # Examples
/// A source that fails in its first attempt: the default strategy fails
/// the job, one restart lets the second attempt run to the end (each
/// attempt makes its sources anew):
/// ```
/// use lockgate::{BoxError, Checkpointed, JobBuilder, JobConfig, RestartStrategy, Source, SourcePoll};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// /// Fails in attempt 0, emits 1, 2, 3 in the next ones.
/// struct Flaky {
///     attempt: u32,
/// }
/// impl Source<u64> for Flaky {
///     fn poll(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourcePoll, BoxError> {
///         if self.attempt == 0 {
///             return Err("the feed is down".into());
///         }
///         out.extend([1, 2, 3]);
///         Ok(SourcePoll::Finished)
///     }
/// }
/// impl Checkpointed for Flaky {}
///
/// let run = |restart: RestartStrategy| {
///     let attempts = Arc::new(AtomicU32::new(0));
///     let job = JobBuilder::new("flaky", JobConfig { restart, ..JobConfig::default() });
///     let out = job
///         .source("feed", 1, move |_| Flaky { attempt: attempts.fetch_add(1, Ordering::SeqCst) })
///         .collect();
///     let result = job.start().unwrap().wait();
///     (result, out.try_iter().collect::<Vec<u64>>())
/// };
///
/// let (result, _) = run(RestartStrategy::default());
/// assert!(result.unwrap_err().to_string().contains("the feed is down"));
///
/// let (result, out) = run(RestartStrategy { max_attempts: 1, delay: Duration::from_millis(1) });
/// assert_eq!(result.unwrap().restarts, 1);
/// assert_eq!(out, [1, 2, 3]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartStrategy {
    /// Restarts allowed before the job fails for good (0: fail at once).
    pub max_attempts: u32,
    /// Wait before each restart.
    pub delay: Duration,
}

impl Default for RestartStrategy {
    /// No restart: a failure fails the job.
    fn default() -> Self {
        RestartStrategy {
            max_attempts: 0,
            delay: Duration::ZERO,
        }
    }
}

/// Checkpointing options, with the meaning of Flink's `CheckpointConfig`.
///
/// # Examples
/// Checkpoints in a folder survive the process: a second job restores the
/// first one's final checkpoint, and its ingest source says how many
/// records the first one had read:
/// ```
/// use lockgate::{CheckpointConfig, CheckpointMode, JobBuilder, JobConfig, RestoreMode};
///
/// let dir = tempfile::tempdir()?;
/// let config = |restore_mode| JobConfig {
///     checkpoint: CheckpointConfig {
///         mode: CheckpointMode::ExactlyOnce,
///         dir: Some(dir.path().to_path_buf()),
///         restore_mode,
///         ..CheckpointConfig::default()
///     },
///     ..JobConfig::default()
/// };
///
/// let job = JobBuilder::new("orders", config(RestoreMode::Never));
/// let (orders, ingest) = job.ingest::<u64>("orders", 16);
/// let _out = orders.collect();
/// let handle = job.start()?;
/// for order in 0..3 {
///     ingest.push(order).expect("the job runs");
/// }
/// drop(ingest); // the end of the input: the final checkpoint
/// assert_eq!(handle.wait()?.completed_checkpoints(), 1);
///
/// let job = JobBuilder::new("orders", config(RestoreMode::Required));
/// let (orders, ingest) = job.ingest::<u64>("orders", 16);
/// let _out = orders.collect();
/// let handle = job.start()?;
/// assert_eq!(ingest.restored_position(), 3); // push from the fourth on
/// drop(ingest);
/// handle.wait()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointConfig {
    /// Exactly-once (aligned), unaligned (exactly-once, barriers overtake
    /// the records in flight, which are persisted as channel state),
    /// at-least-once (tracked) or none (the default).
    pub mode: CheckpointMode,
    /// Time between two checkpoint triggers. `None` (the default): only on
    /// demand ([`crate::JobHandle::trigger_checkpoint`]). Must be `None`
    /// with [`CheckpointMode::None`].
    pub interval: Option<Duration>,
    /// A checkpoint not complete after this long is aborted (`timeout`).
    /// Default 60 s.
    pub timeout: Duration,
    /// Checkpoints in flight at once. Default 1: a checkpoint that
    /// outlasts the interval delays the next trigger until it ends, and the
    /// next one is then triggered at once (the interval counts from the
    /// previous trigger), so checkpoints run back to back at the rate their
    /// duration allows. A second one in flight would only queue behind the
    /// first's barriers and asynchronous writes (one snapshot thread per
    /// task): it commits no record earlier.
    pub max_concurrent: usize,
    /// Least time from the end of one checkpoint to the next trigger.
    /// Default 0, which keeps committed output latency lowest; a pause
    /// leaves the record path time between back-to-back checkpoints.
    pub min_pause: Duration,
    /// Failed checkpoints (timeouts, storage errors, declines by a failing
    /// snapshot) tolerated in a row before the job fails, as Flink's
    /// `CheckpointFailureManager`. Default 3.
    pub tolerable_failures: u32,
    /// Completed checkpoints kept in storage. Default 3.
    pub retained: usize,
    /// Checkpoints whose statistics [`crate::JobHandle::metrics`] lists in
    /// full (the newest); the counts and summaries cover every checkpoint,
    /// so memory and the cost of a checkpoint stay the same however long
    /// the job runs. Default 1,000.
    #[serde(default = "default_history")]
    pub history: usize,
    /// Where checkpoints are written (`chk-<n>/` folders): the shorthand
    /// of [`crate::JobBuilder::with_storage`] with a
    /// [`crate::storage::LocalDirStorage`]. `None` (the default): kept in a
    /// [`crate::storage::MemoryStorage`] of the job's own (enough for restarts
    /// within the process).
    pub dir: Option<PathBuf>,
    /// Whether the job resumes from a checkpoint of its storage at start:
    /// [`RestoreMode::Never`] (the default: a storage that holds
    /// checkpoints is refused), [`RestoreMode::IfPresent`] (resume when
    /// there is one, else start fresh) or [`RestoreMode::Required`].
    #[serde(default)]
    pub restore_mode: RestoreMode,
    /// The former switch, kept so that older code compiles: `true` is
    /// [`RestoreMode::Required`] when `restore_mode` is left at
    /// [`RestoreMode::Never`] (see [`CheckpointConfig::effective_restore_mode`]).
    #[deprecated(note = "set `restore_mode` (RestoreMode::Required is `restore = true`)")]
    #[serde(default)]
    pub restore: bool,
    /// On restore, drop the state of operators the job no longer has
    /// (renamed or removed) instead of refusing the checkpoint (default
    /// false; Flink's `allowNonRestoredState`).
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// Incremental checkpoints (default true, with storage only): a
    /// subtask whose state supports it ([`crate::KeyedState`]) writes only
    /// what changed since the last completed checkpoint, referring to that
    /// checkpoint's part for the rest (as Flink's incremental RocksDB
    /// checkpoints); restore rebuilds the state from the chain. Savepoints
    /// are always full. A part may build only on a part read back intact,
    /// so a periodic checkpoint due before the newest completed one was
    /// read back waits for that, at most 50 ms after its completion.
    #[serde(default = "default_true")]
    pub incremental: bool,
    /// With `incremental`: a subtask's chain holds at most this many parts
    /// (its full snapshot and the deltas after it); the next one is full,
    /// and every subtask writes a full part at the checkpoints whose id is
    /// a multiple of it (so one checkpoint in this many is complete on its
    /// own). It bounds the files a restore reads per subtask at short
    /// intervals. A rolling chain (state that rewrites itself piece by
    /// piece inside its deltas, as [`crate::KeyedState`] does, see
    /// [`crate::state::EncodedState::chain_from`]) is exempt from the
    /// multiple rule: it holds at most twice its spread, at most this
    /// many, and never writes the whole state at one checkpoint. At least
    /// 1 (1: every snapshot full). Default 1,000.
    #[serde(default = "default_full_every")]
    pub full_every: u32,
    /// With `incremental`: every subtask writes a full part at the first
    /// checkpoint triggered at least this long after the last one triggered
    /// full (and at the first of each attempt; an aborted full one makes
    /// the next full), so that at a 10 ms interval the whole state is not
    /// written ten times a second while a checkpoint complete on its own
    /// still comes every few seconds. A rolling chain ignores the mark: its
    /// state rewrites all of itself within about this long instead, a
    /// little in every delta (1/[`SnapshotRequest::spread`](crate::state::SnapshotRequest::spread)
    /// of it, the spread being this over the interval), so that no
    /// checkpoint stalls on writing the whole state (W2 with 1,000,000
    /// keys at a 10 ms interval: BENCHMARKS.md). [`Duration::ZERO`]: every
    /// checkpoint full. Default 2 s.
    #[serde(default = "default_full_min_interval")]
    pub full_min_interval: Duration,
    /// With `incremental`: a subtask writes a full snapshot once its
    /// chain's bytes exceed this multiple of its live state's full size
    /// (positive, finite); a rolling chain (see `full_every`) is bounded
    /// by its spread instead, which is lowered for it (the state rewritten
    /// faster) while its parts are big enough to take it past this ratio.
    /// Default 2.0.
    #[serde(default = "default_max_chain_ratio")]
    pub max_chain_ratio: f64,
    /// Exactly-once only: an aligned checkpoint whose alignment has not
    /// finished this long after its trigger switches to unaligned (Flink
    /// 1.12's `execution.checkpointing.aligned-checkpoint-timeout`,
    /// measured from the trigger as since Flink 1.14): each task still
    /// waiting for a barrier snapshots at once and persists the records in
    /// flight before the missing barriers as channel state (rule 19 in
    /// `barrier/unaligned.rs`). `None` (the default): always aligned. A
    /// timeout of 0 is the same as [`CheckpointMode::Unaligned`]; at most
    /// [`MAX_TIME`]. Channels then carry priority lanes and credits, as in
    /// unaligned mode, and [`HandlerConfig::max_alignment_bytes`] does not
    /// apply (the alignment blocks channels and holds nothing).
    #[serde(default)]
    pub aligned_checkpoint_timeout: Option<Duration>,
}

fn default_true() -> bool {
    true
}

fn default_history() -> usize {
    1000
}

fn default_full_every() -> u32 {
    1000
}

fn default_full_min_interval() -> Duration {
    Duration::from_secs(2)
}

fn default_max_chain_ratio() -> f64 {
    2.0
}

impl CheckpointConfig {
    /// Exactly-once checkpoints (aligned barriers) every `interval`,
    /// written under `dir` (`None`: in memory), the other fields default.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointConfig, CheckpointMode};
    /// use std::time::Duration;
    /// let c = CheckpointConfig::exactly_once(Duration::from_millis(100), None);
    /// assert_eq!(c.mode, CheckpointMode::ExactlyOnce);
    /// assert_eq!(c.interval, Some(Duration::from_millis(100)));
    /// assert_eq!(c.restore_mode, lockgate::RestoreMode::Never);
    /// ```
    pub fn exactly_once(interval: Duration, dir: Option<PathBuf>) -> Self {
        CheckpointConfig {
            mode: CheckpointMode::ExactlyOnce,
            interval: Some(interval),
            dir,
            ..CheckpointConfig::default()
        }
    }

    /// At-least-once checkpoints (barrier tracking, no blocking) every
    /// `interval`, written under `dir` (`None`: in memory).
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointConfig, CheckpointMode};
    /// use std::time::Duration;
    /// let c = CheckpointConfig::at_least_once(Duration::from_secs(1), None);
    /// assert_eq!(c.mode, CheckpointMode::AtLeastOnce);
    /// ```
    pub fn at_least_once(interval: Duration, dir: Option<PathBuf>) -> Self {
        CheckpointConfig {
            mode: CheckpointMode::AtLeastOnce,
            ..CheckpointConfig::exactly_once(interval, dir)
        }
    }

    /// Unaligned checkpoints (FLIP-76: barriers overtake the records in
    /// flight, which are persisted as channel state and replayed on
    /// restore; exactly-once) every `interval`, written under `dir`
    /// (`None`: in memory).
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointConfig, CheckpointMode};
    /// use std::time::Duration;
    /// let c = CheckpointConfig::unaligned(Duration::from_millis(100), None);
    /// assert_eq!(c.mode, CheckpointMode::Unaligned);
    /// ```
    pub fn unaligned(interval: Duration, dir: Option<PathBuf>) -> Self {
        CheckpointConfig {
            mode: CheckpointMode::Unaligned,
            ..CheckpointConfig::exactly_once(interval, dir)
        }
    }

    /// This configuration with an aligned-checkpoint timeout (see
    /// [`CheckpointConfig::aligned_checkpoint_timeout`]; exactly-once
    /// only, [`JobConfig::validate`] refuses it in another mode).
    ///
    /// # Examples
    /// ```
    /// use lockgate::CheckpointConfig;
    /// use std::time::Duration;
    /// let c = CheckpointConfig::exactly_once(Duration::from_millis(100), None)
    ///     .with_aligned_timeout(Duration::from_millis(5));
    /// assert!(c.uses_priority_lanes());
    /// ```
    pub fn with_aligned_timeout(mut self, timeout: Duration) -> Self {
        self.aligned_checkpoint_timeout = Some(timeout);
        self
    }

    /// True when checkpoints may be unaligned: [`CheckpointMode::Unaligned`],
    /// or exactly-once with an aligned-checkpoint timeout. Then every
    /// channel has a priority lane and credits, and a restore may replay
    /// channel state.
    pub fn uses_priority_lanes(&self) -> bool {
        self.mode == CheckpointMode::Unaligned
            || self.mode == CheckpointMode::ExactlyOnce && self.aligned_checkpoint_timeout.is_some()
    }

    /// The aligned-checkpoint timeout in ns as the barrier handler takes
    /// it: `Some(0)` in unaligned mode, the timeout with exactly-once,
    /// `None` otherwise.
    pub(crate) fn unaligned_after_ns(&self) -> Option<u64> {
        match self.mode {
            CheckpointMode::Unaligned => Some(0),
            CheckpointMode::ExactlyOnce => self
                .aligned_checkpoint_timeout
                .map(|t| t.as_nanos().min(u64::MAX as u128) as u64),
            _ => None,
        }
    }

    /// This configuration, restoring from the latest complete checkpoint
    /// of its folder ([`RestoreMode::Required`]).
    pub fn restoring(self) -> Self {
        self.with_restore_mode(RestoreMode::Required)
    }

    /// This configuration with restore mode `mode`.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointConfig, RestoreMode};
    /// use std::time::Duration;
    /// let c = CheckpointConfig::exactly_once(Duration::from_millis(50), Some("/tmp/chk".into()))
    ///     .with_restore_mode(RestoreMode::IfPresent);
    /// assert_eq!(c.effective_restore_mode(), RestoreMode::IfPresent);
    /// ```
    pub fn with_restore_mode(mut self, mode: RestoreMode) -> Self {
        self.restore_mode = mode;
        self
    }

    /// The restore mode the job runs with: `restore_mode`, or
    /// [`RestoreMode::Required`] when it is [`RestoreMode::Never`] and the
    /// deprecated `restore` is true.
    ///
    /// # Examples
    /// ```
    /// # #![allow(deprecated)]
    /// use lockgate::{CheckpointConfig, RestoreMode};
    /// let mut c = CheckpointConfig::default();
    /// c.restore = true; // older code
    /// assert_eq!(c.effective_restore_mode(), RestoreMode::Required);
    /// ```
    pub fn effective_restore_mode(&self) -> RestoreMode {
        #[allow(deprecated)]
        match self.restore_mode {
            RestoreMode::Never => RestoreMode::from(self.restore),
            mode => mode,
        }
    }
}

/// Whether a job resumes from a checkpoint at start
/// ([`CheckpointConfig::restore_mode`]; `--restore-mode` on the command
/// line, where `--restore DIR` is `required`).
///
/// # Examples
/// ```
/// use lockgate::RestoreMode;
/// assert_eq!("if-present".parse::<RestoreMode>(), Ok(RestoreMode::IfPresent));
/// assert_eq!(RestoreMode::Required.as_str(), "required");
/// assert!("sometimes".parse::<RestoreMode>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestoreMode {
    /// Start fresh; a storage that already holds checkpoints is refused
    /// (a second job on a folder in use, or a restore forgotten).
    #[default]
    Never,
    /// Resume from the newest checkpoint whose whole chain loads when the
    /// storage holds any checkpoint, in any form (published, or set aside
    /// as `corrupt-chk-*`); start fresh only when it holds none. When
    /// checkpoints are there and none loads, or they belong to another
    /// job, the start fails as with [`RestoreMode::Required`], naming them:
    /// a service restarted after a crash never silently starts over.
    IfPresent,
    /// Resume from the newest checkpoint whose whole chain loads; no such
    /// checkpoint is an error.
    Required,
}

/// What the deprecated `restore: bool` meant: `true` is
/// [`RestoreMode::Required`], `false` [`RestoreMode::Never`].
///
/// ```
/// use lockgate::RestoreMode;
/// assert_eq!(RestoreMode::from(true), RestoreMode::Required);
/// assert_eq!(RestoreMode::from(false), RestoreMode::Never);
/// ```
impl From<bool> for RestoreMode {
    fn from(restore: bool) -> Self {
        if restore {
            RestoreMode::Required
        } else {
            RestoreMode::Never
        }
    }
}

impl RestoreMode {
    /// The mode's name on the command line: `never`, `if-present`,
    /// `required`.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreMode::Never => "never",
            RestoreMode::IfPresent => "if-present",
            RestoreMode::Required => "required",
        }
    }
}

impl std::fmt::Display for RestoreMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RestoreMode {
    type Err = String;
    /// Parses `never`, `if-present` or `required`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "never" => Ok(RestoreMode::Never),
            "if-present" => Ok(RestoreMode::IfPresent),
            "required" => Ok(RestoreMode::Required),
            other => Err(format!(
                "invalid restore mode '{other}' (expected never, if-present or required)"
            )),
        }
    }
}

impl Default for CheckpointConfig {
    #[allow(deprecated)] // `restore` is still a field
    fn default() -> Self {
        CheckpointConfig {
            mode: CheckpointMode::None,
            interval: None,
            timeout: Duration::from_secs(60),
            max_concurrent: 1,
            min_pause: Duration::ZERO,
            tolerable_failures: 3,
            retained: 3,
            history: default_history(),
            dir: None,
            restore_mode: RestoreMode::Never,
            restore: false,
            allow_non_restored_state: false,
            incremental: true,
            full_every: default_full_every(),
            full_min_interval: default_full_min_interval(),
            max_chain_ratio: default_max_chain_ratio(),
            aligned_checkpoint_timeout: None,
        }
    }
}

/// Everything a job runs with. Build one with [`JobConfig::default`] and
/// change fields.
///
/// # Examples
/// ```
/// use lockgate::{JobBuilder, JobConfig};
///
/// let config = JobConfig { batch_size: 4, ..JobConfig::default() };
/// assert!(config.validate().is_ok());
/// let zero = JobConfig { batch_size: 0, ..JobConfig::default() };
/// assert!(zero.validate().unwrap_err().contains("batch_size"));
///
/// // a job with batches of 4 records at most
/// let job = JobBuilder::new("small batches", config);
/// let (numbers, ingest) = job.ingest::<u64>("numbers", 64);
/// let sizes = numbers
///     .map_batch(|batch: &mut Vec<u64>, out: &mut Vec<usize>| {
///         out.push(batch.len());
///         batch.clear();
///     })
///     .collect();
/// let handle = job.start()?;
/// for x in 0..10 {
///     ingest.push(x).expect("the job runs");
/// }
/// drop(ingest);
/// handle.wait()?;
/// let sizes: Vec<usize> = sizes.try_iter().collect();
/// assert!(sizes.iter().all(|&n| n <= 4));
/// assert_eq!(sizes.iter().sum::<usize>(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobConfig {
    /// Records per batch at most (default 1024).
    pub batch_size: usize,
    /// Elements (batches or events) a channel holds before its producer
    /// blocks (default 64).
    pub channel_capacity: usize,
    /// A partial batch is sent at the latest this long after its first
    /// record (default 1 ms).
    pub buffer_timeout: Duration,
    /// How idle tasks wait (default [`WaitStrategy::default`]: spin, yield,
    /// then park).
    pub wait_strategy: WaitStrategy,
    /// Thread pinning (default [`PinPolicy::None`]).
    pub pinning: PinPolicy,
    /// Blocker capacity and alignment limit of the barrier handlers
    /// (default [`HandlerConfig::default`]: a 1 MiB blocker, no limit).
    pub handler: HandlerConfig,
    /// Checkpointing (default [`CheckpointConfig::default`]: none).
    pub checkpoint: CheckpointConfig,
    /// Restarts on failure (default: none, a failure fails the job).
    pub restart: RestartStrategy,
    /// The timer slack of task threads, ns (Linux `PR_SET_TIMERSLACK`):
    /// how late the kernel may wake a timed sleep. Linux's default, 50 µs,
    /// would be added to every paced source's wake-up; lockgate's default is
    /// 1 µs. `None`: leave the OS default.
    pub timer_slack_ns: Option<u64>,
    /// The number of key groups (default [`DEFAULT_MAX_PARALLELISM`],
    /// 128; at most [`UPPER_MAX_PARALLELISM`]): the largest parallelism
    /// of any operator, now or after a rescale. Hash partitioning and
    /// keyed state go by key group (see [`crate::keys::KeyGroupRange`]); it is
    /// stored in every checkpoint, and a restore with another value is
    /// refused (as Flink's `maxParallelism`).
    pub max_parallelism: u32,
    /// How tasks get threads (default `None`: one OS thread per task).
    /// `Some(n)`: a pool of `n` worker threads (at most
    /// [`MAX_WORKERS`]), each running its share of the tasks
    /// cooperatively, as timely's workers do: subtask `i` of every
    /// operator runs on worker `i % n` (with [`PinPolicy`], worker `w`
    /// takes the policy's `w`-th core), a record between two tasks of
    /// one worker needs no wake-up, and a worker parks only when none of
    /// its tasks can move. A task never blocks inside a send there: when a
    /// channel is full, the rest of its output waits in the task (at most
    /// what one input batch produced, the per-batch overdraft of Flink's
    /// FLIP-227) and the task takes no input until it is sent. An
    /// operator that blocks (a slow sink) holds up its worker's other
    /// tasks meanwhile. A checkpoint's asynchronous part (encoding,
    /// checksums, staging the part) runs on the worker too, in its idle
    /// time and in slices of ~50 µs, with no snapshot thread, when the
    /// storage's `write_part` never waits for I/O
    /// ([`CheckpointStorage::write_part_blocks`](crate::storage::CheckpointStorage::write_part_blocks):
    /// `LocalDirStorage` and `MemoryStorage`, whose files are written by
    /// the job thread's publisher); else on a snapshot thread per task at
    /// the lowest priority.
    #[serde(default)]
    pub workers: Option<usize>,
}

/// The most worker threads [`JobConfig::workers`] may ask for: 1024 (as
/// many as [`MAX_PIN_CORE`] cores, one worker per core).
pub const MAX_WORKERS: usize = 1024;

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            batch_size: 1024,
            channel_capacity: 64,
            buffer_timeout: Duration::from_millis(1),
            wait_strategy: WaitStrategy::default(),
            pinning: PinPolicy::None,
            handler: HandlerConfig::default(),
            checkpoint: CheckpointConfig::default(),
            restart: RestartStrategy::default(),
            timer_slack_ns: Some(DEFAULT_TIMER_SLACK_NS),
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            workers: None,
        }
    }
}

impl JobConfig {
    /// Checks the values.
    ///
    /// # Errors
    /// A message naming the bad field: a batch size, channel capacity or
    /// checkpoint `max_concurrent` of 0 (or beyond its maximum), a zero
    /// checkpoint interval or timeout, a time beyond [`MAX_TIME`], no
    /// retained checkpoint, an interval with checkpoint mode none, an empty
    /// core list or a core beyond [`MAX_PIN_CORE`], a `max_parallelism`
    /// of 0 or above [`UPPER_MAX_PARALLELISM`], a worker count of 0 or
    /// above [`MAX_WORKERS`].
    pub fn validate(&self) -> Result<(), String> {
        if self.max_parallelism == 0 || self.max_parallelism > UPPER_MAX_PARALLELISM {
            return Err(format!(
                "max_parallelism must be between 1 and {UPPER_MAX_PARALLELISM} key groups, got {}",
                self.max_parallelism
            ));
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            return Err(format!(
                "batch_size must be between 1 and {MAX_BATCH_SIZE} records, got {}",
                self.batch_size
            ));
        }
        if self.channel_capacity == 0 || self.channel_capacity > MAX_CHANNEL_CAPACITY {
            return Err(format!(
                "channel_capacity must be between 1 and {MAX_CHANNEL_CAPACITY} elements, got {}",
                self.channel_capacity
            ));
        }
        if self.checkpoint.max_concurrent == 0 {
            return Err("checkpoint.max_concurrent must be at least 1".into());
        }
        if self.checkpoint.interval == Some(Duration::ZERO) {
            return Err("checkpoint.interval must be positive".into());
        }
        // Times are kept as u64 ns on the task and job threads: one that
        // does not fit would wrap to a tiny value.
        let times = [
            ("buffer_timeout", Some(self.buffer_timeout)),
            ("checkpoint.interval", self.checkpoint.interval),
            ("checkpoint.timeout", Some(self.checkpoint.timeout)),
            ("checkpoint.min_pause", Some(self.checkpoint.min_pause)),
            (
                "checkpoint.full_min_interval",
                Some(self.checkpoint.full_min_interval),
            ),
            ("restart.delay", Some(self.restart.delay)),
            (
                "checkpoint.aligned_checkpoint_timeout",
                self.checkpoint.aligned_checkpoint_timeout,
            ),
        ];
        for (name, t) in times {
            if t.is_some_and(|t| t > MAX_TIME) {
                return Err(format!(
                    "{name} must be at most {} s, got {:?}",
                    MAX_TIME.as_secs(),
                    t.unwrap_or_default()
                ));
            }
        }
        if self.checkpoint.timeout.is_zero() {
            return Err("checkpoint.timeout must be positive".into());
        }
        if self.checkpoint.full_every == 0 {
            return Err("checkpoint.full_every must be at least 1 (1: every snapshot full)".into());
        }
        let r = self.checkpoint.max_chain_ratio;
        if !(r.is_finite() && r > 0.0) {
            return Err(format!(
                "checkpoint.max_chain_ratio must be a positive finite number, got {r}"
            ));
        }
        if self.checkpoint.retained == 0 {
            return Err(
                "checkpoint.retained must be at least 1 (the checkpoint to restore from)".into(),
            );
        }
        if self.checkpoint.mode == CheckpointMode::None && self.checkpoint.interval.is_some() {
            return Err(
                "checkpoint.interval is set but checkpoint.mode is none: no checkpoint would \
                 ever be taken; set a mode (exactly-once, unaligned, at-least-once) or no interval"
                    .into(),
            );
        }
        if self.checkpoint.aligned_checkpoint_timeout.is_some()
            && self.checkpoint.mode != CheckpointMode::ExactlyOnce
        {
            return Err(format!(
                "checkpoint.aligned_checkpoint_timeout applies to exactly-once checkpoints \
                 only, but checkpoint.mode is {} (unaligned is the same as a timeout of 0)",
                self.checkpoint.mode.as_str()
            ));
        }
        if self.checkpoint.uses_priority_lanes() && self.handler.max_alignment_bytes.is_some() {
            return Err(
                "handler.max_alignment_bytes does not apply to unaligned checkpoints or to an \
                 aligned-checkpoint timeout (their alignment blocks channels and holds nothing); \
                 unset one of them"
                    .into(),
            );
        }
        if let Some(n) = self.workers {
            if n == 0 || n > MAX_WORKERS {
                return Err(format!(
                    "workers must be between 1 and {MAX_WORKERS} threads, got {n} (None: one \
                     thread per task)"
                ));
            }
        }
        if let PinPolicy::Cores(cores) = &self.pinning {
            if cores.is_empty() {
                return Err("pinning: the core list is empty".into());
            }
            if let Some(c) = cores.iter().find(|c| **c >= MAX_PIN_CORE) {
                return Err(format!(
                    "pinning: core {c} is beyond the {MAX_PIN_CORE} cores a CPU set can name"
                ));
            }
        }
        Ok(())
    }
}

/// How an ingest source ([`crate::JobBuilder::ingest_with`]) buffers what
/// the application pushes.
///
/// # Examples
/// ```
/// use lockgate::IngestConfig;
/// let c = IngestConfig { replay_capacity: 10_000, ..IngestConfig::default() };
/// assert_eq!(c.channel_capacity, 1024);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IngestConfig {
    /// Records the channel from the application holds before a push
    /// blocks (default 1024; at least 1).
    pub channel_capacity: usize,
    /// Records the replay log keeps since the last completed checkpoint
    /// (default 1,048,576, i.e. about 5 s at 200,000 records/s; at least
    /// 1; memory: that many records). When it is full the source takes no more
    /// records until a checkpoint completes: backpressure on the
    /// application, so checkpoints must come at an interval (with
    /// on-demand checkpoints only, a full log waits for the next trigger).
    /// Unused without checkpoints.
    pub replay_capacity: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            channel_capacity: 1024,
            replay_capacity: 1 << 20,
        }
    }
}
