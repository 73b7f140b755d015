//! The flags of `lockgate loadgen` and their checking: every invalid value
//! or impossible combination is refused here, before anything runs.

use lockgate::barrier::DEFAULT_BLOCKER_CAPACITY_BYTES;
use lockgate::{
    config::PinPolicy, config::WaitStrategy, CheckpointMode, JobConfig, RestartStrategy,
};
use lockgate_workloads::refjob::{RefJobConfig, MAX_PAYLOAD_BYTES};
use lockgate_workloads::workload::{KeyDist, Workload};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest `--parallelism`: 64 sources and 64 keyed_sums (an
/// all-to-all exchange of 4,096 channels); far beyond what a load test on
/// one machine can use, and small enough that a typo cannot exhaust memory
/// (each channel preallocates its capacity).
pub(crate) const MAX_CLI_PARALLELISM: usize = 64;

/// Which reference workload (docs/workloads.md).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkloadArg {
    /// Throughput, closed loop.
    W1,
    /// Latency at a fixed rate, open loop.
    W2,
    /// W2 with bursting records of odd n (skewed alignment).
    W3,
    /// Sustained backpressure: closed-loop sources for --duration, a sink
    /// that takes 5 µs a record (not a latency test).
    W4,
}

/// The checkpointing mode, spelled as on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModeArg {
    /// No checkpoints.
    None,
    /// Aligned barriers.
    ExactlyOnce,
    /// Tracked barriers.
    AtLeastOnce,
    /// Unaligned checkpoints: barriers overtake the records in flight,
    /// which are persisted as channel state (exactly-once).
    Unaligned,
}

/// How idle tasks wait (the runtime's wait strategy).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitArg {
    /// Park at once.
    Park,
    /// Spin a little, then park (the engine's default).
    SpinPark,
    /// Never park (one core per task only).
    Spin,
}

/// When to print a progress line a second on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProgressArg {
    /// Only when stderr is a terminal.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

impl ModeArg {
    /// The spelling on the command line (and in JSON `mode`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ModeArg::None => "none",
            ModeArg::ExactlyOnce => "exactly-once",
            ModeArg::AtLeastOnce => "at-least-once",
            ModeArg::Unaligned => "unaligned",
        }
    }
}

impl WaitArg {
    fn as_str(self) -> &'static str {
        match self {
            WaitArg::Park => "park",
            WaitArg::SpinPark => "spin-park",
            WaitArg::Spin => "spin",
        }
    }
}

/// `lockgate loadgen`: runs a reference workload (docs/workloads.md) on
/// the engine and reports throughput, latency, checkpoints and
/// correctness. Exit codes: 0 ok, 1 the correctness check failed or an
/// output file could not be written, 2 bad input, 130 interrupted
/// (Ctrl-C).
#[derive(clap::Args, Debug, Clone)]
// A negative number is a value (refused by its parser with the flag's
// name), not an unknown flag.
#[command(allow_negative_numbers = true)]
pub(crate) struct Args {
    /// The workload: w1 (throughput, closed loop), w2 (latency at a fixed
    /// rate), w3 (w2 with bursting sources), w4 (sustained backpressure: a
    /// sink slower than the sources).
    #[arg(long, value_enum, default_value = "w2")]
    pub workload: WorkloadArg,
    /// W1 only: records in total [default: 20000000].
    #[arg(long)]
    pub records: Option<u64>,
    /// W2/W3 only: records/s of all sources together [default: 200000].
    #[arg(long)]
    pub rate: Option<u64>,
    /// W2/W3/W4 only: recorded seconds after the warm-up [default: 10].
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// W2/W3/W4 only: warm-up seconds, not recorded (0 allowed) [default:
    /// 2].
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub warmup: Option<f64>,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Seeds failure injection (the generator and its Zipf draw are fixed
    /// by the workload spec, so results compare across systems).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Key distribution: uniform or zipf:<s>.
    #[arg(long, default_value = "uniform")]
    pub key_dist: String,
    /// Extra bytes carried per record.
    #[arg(long, default_value_t = 0)]
    pub payload_bytes: usize,
    /// Parallelism of the sources and of keyed_sum, 1 to 64. With
    /// --restore: the checkpoint's unless given; another value rescales
    /// the run (the sources take over the checkpoint's 128 splits,
    /// keyed_sum its key groups; not W4).
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Records per batch at most.
    #[arg(long, default_value_t = 1024)]
    pub batch_size: usize,
    /// Batches a channel holds.
    #[arg(long, default_value_t = 64)]
    pub channel_capacity: usize,
    /// A partial batch leaves at the latest this long after its first
    /// record, µs.
    #[arg(long, default_value_t = 1000)]
    pub buffer_timeout_us: u64,
    /// Thread pinning: none, round-robin, or a core list like 0,1.
    #[arg(long, default_value = "none")]
    pub pin: String,
    /// How idle tasks wait: park (block at once), spin-park (a short spin,
    /// then block), spin (never block; only with a core per task).
    #[arg(long, value_enum, default_value = "spin-park")]
    pub wait_strategy: WaitArg,
    /// Run the tasks on N cooperative worker threads (1-1024; subtask i
    /// of every operator on worker i % N, as timely's workers, so at most
    /// the parallelism run) instead of one thread per task: lower latency
    /// when no operator blocks; N = the cores is the usual choice; --pin
    /// then pins the workers [default: one thread per task].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Bytes the alignment blocker holds before the input gate stops
    /// reading blocked channels (0: pure blocking, as Flink 1.11+).
    #[arg(long, default_value_t = DEFAULT_BLOCKER_CAPACITY_BYTES)]
    pub blocker_capacity_bytes: u64,
    /// Checkpointing: none, exactly-once (aligned), unaligned, at-least-once.
    #[arg(long, value_enum, default_value = "exactly-once")]
    pub checkpoint: ModeArg,
    /// Time between checkpoints, ms [default: 100].
    #[arg(long)]
    pub checkpoint_interval_ms: Option<u64>,
    /// Where checkpoints go (must be empty or absent) [default: a temporary
    /// folder, removed at the end].
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Where checkpoints are kept: disk (a folder, `--checkpoint-dir` or a
    /// temporary one) or memory (the engine's in-memory storage: restarts
    /// within the process only; no `--checkpoint-dir`, no `--restore`).
    #[arg(long, value_enum, default_value = "disk")]
    pub checkpoint_storage: StorageArg,
    /// What the sink's output is: processing (a record counts when the
    /// sink receives it) or committed (the sink is a two-phase-commit
    /// sink: a record counts when its checkpoint completes; the report
    /// gives the committed latency beside the processing one; needs
    /// checkpoints).
    #[arg(long, value_enum, default_value = "processing")]
    pub output: OutputArg,
    /// Exactly-once only: abort a checkpoint whose alignment holds more
    /// bytes [default: unlimited].
    #[arg(long)]
    pub max_alignment_bytes: Option<u64>,
    /// Exactly-once only: a checkpoint still aligning this long after its
    /// trigger switches to unaligned at the task's next look at its inputs
    /// (Flink's aligned-checkpoint timeout; an alignment, measured from
    /// its first barrier, may last a batch longer). 0 works as --checkpoint
    /// unaligned (the run's mode stays exactly-once), ms [default: never].
    #[arg(long, value_name = "MS")]
    pub aligned_checkpoint_timeout_ms: Option<u64>,
    /// A checkpoint not complete after this long is aborted, ms [default:
    /// 60000].
    #[arg(long)]
    pub checkpoint_timeout_ms: Option<u64>,
    #[command(flatten)]
    pub incremental: crate::incremental_args::IncrementalArgs,
    /// Task failures injected at seeded random points; the job recovers
    /// from its checkpoints.
    #[arg(long, default_value_t = 0)]
    pub inject_failures: usize,
    /// Resume from the latest complete checkpoint in DIR (which goes on
    /// receiving checkpoints), with the flags it recorded: a flag left out
    /// takes the recorded value, one given with another value is refused.
    /// May differ: --parallelism (a rescale), --workers, --pin,
    /// --wait-strategy, the outputs and the failure plan (--inject-failures,
    /// --seed: not recorded).
    #[arg(long, value_name = "DIR")]
    pub restore: Option<PathBuf>,
    /// With --checkpoint-dir DIR: never (DIR must hold no checkpoint),
    /// if-present (resume from DIR as --restore DIR when it holds any
    /// checkpoint, else start fresh there) or required (--restore DIR)
    /// [default: never; --restore DIR is required].
    #[arg(long, value_name = "MODE")]
    pub restore_mode: Option<lockgate::RestoreMode>,
    /// Writes the run as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Writes the latency percentile distribution (HdrHistogram .hgrm; values
    /// in ms, as HdrHistogram's plotter expects).
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
    /// Writes an HdrHistogram interval log (W2/W3: one histogram every
    /// 100 ms, 2 significant digits; W1/W4: the whole run as one).
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,
    /// Writes latency by percentile as an SVG plot.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Writes the latency timeline as an SVG chart: p50, p99 and max every
    /// 100 ms, checkpoints and recoveries as bands (W2/W3).
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Writes one self-contained HTML page: both charts, the checkpoint
    /// table, the configuration and the environment.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// A progress line a second on stderr (auto: only on a terminal).
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressArg,
    /// Prints only the last line: `result: ok` when the correctness check
    /// passed (count, per-key sums and fingerprint against the closed form,
    /// no record lost or duplicated; at-least-once runs with failures: none
    /// lost), else `result: FAILED (why)` and exit code 1. It says nothing
    /// about latency.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: lockgate_cli::metrics_http::MetricsArgs,
    /// A line on stderr every SECS seconds with that interval's figures:
    /// records/s at the sink, checkpoints completed per second, their
    /// end-to-end p50 and p99, and the process's resident memory (for long
    /// runs, whose whole-run figures hide a drift).
    #[arg(long, value_name = "SECS")]
    pub interval_report: Option<u64>,
    /// What checkpointing costs the record path, inside this run: segments
    /// of SECONDS with periodic checkpoints on, off, and off again (the
    /// A/A control), in random order, at least 20 a group (W2/W3/W4:
    /// --duration at least 60 x SECONDS; W1: as its records last); the
    /// report gives each group's percentiles (W1: records/s), their
    /// ratios and the control's.
    #[arg(long, value_name = "SECONDS")]
    pub ab: Option<f64>,
    /// W2/W3: the shortest sleep of a paced source between two polls, µs;
    /// each wake-up emits every record due (longer: fewer wake-ups, more
    /// latency) [default: 10 with a thread per task, 2 with --workers,
    /// whose idle workers spin rather than sleep for a few µs].
    #[arg(long)]
    pub tick_us: Option<u64>,
}

/// `--output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputArg {
    /// Records count when the sink receives them.
    Processing,
    /// Records count when their checkpoint completes (exactly-once output).
    Committed,
}

/// `--checkpoint-storage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StorageArg {
    /// A checkpoint folder.
    Disk,
    /// In memory (restarts within the process only).
    Memory,
}

/// Where checkpoints go for this run.
#[derive(Debug)]
pub(crate) enum CheckpointDir {
    /// No checkpoints, or checkpoints kept in memory.
    None,
    /// A temporary folder, removed at the end.
    Temp(tempfile::TempDir),
    /// A folder the user named.
    User(PathBuf),
}

impl CheckpointDir {
    /// The folder, if any.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            CheckpointDir::None => None,
            CheckpointDir::Temp(t) => Some(t.path()),
            CheckpointDir::User(p) => Some(p),
        }
    }
}

/// A checked run: everything `run` needs.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The workload.
    pub refjob: RefJobConfig,
    /// The engine's configuration.
    pub job: JobConfig,
    /// Checkpointing mode as on the command line.
    pub mode: ModeArg,
    /// Failures to inject.
    pub failures: usize,
    /// The seed of the failure plan.
    pub seed: u64,
    /// Checkpoint folder.
    pub checkpoint_dir: CheckpointDir,
    /// The effective value of every flag (JSON `config`).
    pub config_json: serde_json::Value,
    /// Print progress lines.
    pub progress: bool,
    /// Print only the last line.
    pub quiet: bool,
    /// `--interval-report`.
    pub interval_report: Option<Duration>,
    /// `--ab`: the segments' length and their blocks (one segment of each
    /// group a block).
    pub ab: Option<(Duration, usize)>,
    /// Pinning, as given.
    pub pinning: String,
    /// Warnings to print before the run (it runs anyway).
    pub warnings: Vec<String>,
}

fn secs(v: f64, flag: &str, allow_zero: bool) -> Result<Duration, String> {
    if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
        return Err(format!(
            "--{flag} must be {} number of seconds, got {v}",
            if allow_zero {
                "a non-negative"
            } else {
                "a positive"
            }
        ));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("--{flag} {v}: {e}"))
}

/// Checks that `path` can be written (its folder exists, it is not a
/// folder), creating and removing it when it did not exist.
fn check_writable(path: &Path, flag: &str) -> Result<(), String> {
    writable(path).map_err(|e| format!("--{flag} {e}"))
}

/// Refuses two of `paths` (flag, path) that name one file: one output
/// would overwrite the other (or a run's own saved file).
pub(crate) fn distinct_files(paths: &[(&str, &Path)]) -> Result<(), String> {
    let key = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    for (i, (a, pa)) in paths.iter().enumerate() {
        for (b, pb) in &paths[i + 1..] {
            if key(pa) == key(pb) {
                return Err(format!(
                    "{a} and {b} name the same file, {}: one would overwrite the other",
                    pa.display()
                ));
            }
        }
    }
    Ok(())
}

/// Checks that `path` can be written (its folder exists, it is not a
/// folder), creating and removing it when it did not exist; the error
/// starts with the path.
pub(crate) fn writable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{}: is a folder", path.display()));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Whether `a` and `b` name one folder (`./m` and `m` do; when either
/// does not exist, only the same path does).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn dir_is_empty_or_absent(dir: &Path) -> Result<bool, String> {
    match std::fs::read_dir(dir) {
        // A lock file left by a killed run holds nothing.
        Ok(it) => Ok(it
            .flatten()
            .all(|e| e.file_name() == std::ffi::OsStr::new(".lock"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(format!("--checkpoint-dir {}: {e}", dir.display())),
    }
}

impl Args {
    /// Checks every flag and combination and builds the run.
    ///
    /// # Errors
    /// A message naming the bad flag (the caller exits with code 2).
    pub(crate) fn plan(&self) -> Result<Plan, String> {
        let workload = match self.workload {
            WorkloadArg::W1 => Workload::W1,
            WorkloadArg::W2 => Workload::W2,
            WorkloadArg::W3 => Workload::W3,
            WorkloadArg::W4 => Workload::W4,
        };
        let paced = workload.is_paced();
        let timed = workload.is_timed();
        let wname = workload.name().to_ascii_lowercase();
        let mut refjob = RefJobConfig {
            workload,
            ..Default::default()
        };
        if timed {
            if self.records.is_some() {
                return Err(format!(
                    "--records applies to w1 only; {wname} runs for --duration{}",
                    if paced { " at --rate" } else { "" }
                ));
            }
            if let Some(r) = self.rate {
                if !paced {
                    return Err(format!(
                        "--rate does not apply to {wname} (closed loop, as fast as the sink drains)"
                    ));
                }
                if r == 0 {
                    return Err("--rate must be at least 1 record/s".into());
                }
                refjob.rate = r;
            }
            if let Some(d) = self.duration {
                refjob.duration = secs(d, "duration", false)?;
            }
            if let Some(w) = self.warmup {
                refjob.warmup = secs(w, "warmup", true)?;
            }
        } else {
            for (flag, given) in [
                ("rate", self.rate.is_some()),
                ("duration", self.duration.is_some()),
                ("warmup", self.warmup.is_some()),
            ] {
                if given {
                    return Err(format!(
                        "--{flag} does not apply to w1 (closed loop); use --records"
                    ));
                }
            }
            if let Some(r) = self.records {
                if r == 0 {
                    return Err("--records must be at least 1".into());
                }
                refjob.records = r;
            }
        }
        if self.keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        refjob.keys = self.keys;
        refjob.key_dist = self
            .key_dist
            .parse::<KeyDist>()
            .map_err(|e| format!("--key-dist: {e}"))?;
        if self.payload_bytes > MAX_PAYLOAD_BYTES {
            return Err(format!(
                "--payload-bytes {} is above the limit of {MAX_PAYLOAD_BYTES}",
                self.payload_bytes
            ));
        }
        refjob.payload_bytes = self.payload_bytes;
        if self.parallelism == 0 || self.parallelism > MAX_CLI_PARALLELISM {
            return Err(format!(
                "--parallelism must be between 1 and {MAX_CLI_PARALLELISM}, got {}",
                self.parallelism
            ));
        }
        refjob.parallelism = self.parallelism;
        if self.tick_us.is_some() && !paced {
            return Err(format!(
                "--tick-us applies to the paced workloads (w2, w3) only; {wname} sends as fast as it can"
            ));
        }
        let tick_us = self.tick_us.unwrap_or(if self.workers.is_some() {
            lockgate_workloads::refjob::WORKERS_TICK_US
        } else {
            lockgate_workloads::refjob::DEFAULT_TICK_US
        });
        if tick_us == 0 {
            return Err("--tick-us must be at least 1".into());
        }
        refjob.tick = Duration::from_micros(tick_us);
        refjob.validate().map_err(|e| e.to_string())?;

        let mut job = JobConfig::default();
        if self.batch_size == 0 || self.batch_size > lockgate::config::MAX_BATCH_SIZE {
            return Err(format!(
                "--batch-size must be between 1 and {} records, got {}",
                lockgate::config::MAX_BATCH_SIZE,
                self.batch_size
            ));
        }
        job.batch_size = self.batch_size;
        if self.channel_capacity == 0
            || self.channel_capacity > lockgate::config::MAX_CHANNEL_CAPACITY
        {
            return Err(format!(
                "--channel-capacity must be between 1 and {} batches, got {}",
                lockgate::config::MAX_CHANNEL_CAPACITY,
                self.channel_capacity
            ));
        }
        job.channel_capacity = self.channel_capacity;
        job.buffer_timeout = Duration::from_micros(self.buffer_timeout_us);
        job.pinning = self
            .pin
            .parse::<PinPolicy>()
            .map_err(|e| format!("--pin: {e}"))?;
        if let PinPolicy::Cores(cores) = &job.pinning {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            if let Some(c) = cores.iter().find(|c| **c >= n) {
                return Err(format!(
                    "--pin: core {c} does not exist (this machine has {n} cores, 0..{})",
                    n - 1
                ));
            }
        }
        job.wait_strategy = match self.wait_strategy {
            WaitArg::Park => WaitStrategy::Park,
            WaitArg::SpinPark => WaitStrategy::default(),
            WaitArg::Spin => WaitStrategy::Spin,
        };
        let mut warnings = Vec::new();
        if let Some(w) = self.workers {
            if w == 0 || w > lockgate::config::MAX_WORKERS {
                return Err(format!(
                    "--workers must be between 1 and {} threads, got {w} (leave it out for one thread per task)",
                    lockgate::config::MAX_WORKERS
                ));
            }
            // Worker i runs subtask i of every operator: no operator of the
            // reference job has more subtasks than the parallelism.
            if w > self.parallelism {
                warnings.push(format!(
                    "WARNING: --workers {w} with parallelism {}: worker i runs subtask i of every operator, so {} workers run",
                    self.parallelism, self.parallelism
                ));
            }
        }
        job.workers = self.workers.map(|w| w.min(self.parallelism));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Sources, keyed sums and the sink: one thread each, or the workers.
        let (threads, what) = match job.workers {
            Some(w) => (w, "worker threads"),
            None => (
                self.parallelism.saturating_mul(2).saturating_add(1),
                "task threads",
            ),
        };
        if matches!(self.wait_strategy, WaitArg::Spin) && threads > cores {
            warnings.push(format!(
                "WARNING: --wait-strategy spin with {threads} {what} on {cores} cores: a spinning thread keeps a core from the others, so latency and throughput suffer (spin-park, the default, spins a bounded while then parks)"
            ));
        }
        job.handler.blocker_capacity_bytes = self.blocker_capacity_bytes;

        let mode = self.checkpoint;
        let checkpointing = mode != ModeArg::None;
        if !checkpointing {
            for (flag, given) in [
                (
                    "checkpoint-interval-ms",
                    self.checkpoint_interval_ms.is_some(),
                ),
                ("checkpoint-dir", self.checkpoint_dir.is_some()),
                ("max-alignment-bytes", self.max_alignment_bytes.is_some()),
                (
                    "aligned-checkpoint-timeout-ms",
                    self.aligned_checkpoint_timeout_ms.is_some(),
                ),
                (
                    "checkpoint-timeout-ms",
                    self.checkpoint_timeout_ms.is_some(),
                ),
                ("restore", self.restore.is_some()),
                ("inject-failures", self.inject_failures > 0),
                (
                    self.incremental.given().unwrap_or(""),
                    self.incremental.given().is_some(),
                ),
            ] {
                if given {
                    return Err(format!(
                        "--{flag} needs checkpoints, but --checkpoint is none"
                    ));
                }
            }
        }
        if mode == ModeArg::AtLeastOnce && self.max_alignment_bytes.is_some() {
            return Err(
                "--max-alignment-bytes applies to exactly-once only (at-least-once does not align)"
                    .into(),
            );
        }
        if checkpointing
            && mode != ModeArg::ExactlyOnce
            && self.aligned_checkpoint_timeout_ms.is_some()
        {
            return Err(format!(
                "--aligned-checkpoint-timeout-ms applies to --checkpoint exactly-once only, not {} (--checkpoint unaligned is the same as a timeout of 0)",
                mode.as_str()
            ));
        }
        if self.aligned_checkpoint_timeout_ms.is_some() && self.max_alignment_bytes.is_some() {
            return Err(
                "--max-alignment-bytes does not apply with --aligned-checkpoint-timeout-ms (that alignment blocks channels and holds nothing); give one of them"
                    .into(),
            );
        }
        if mode == ModeArg::Unaligned && self.max_alignment_bytes.is_some() {
            return Err(
                "--max-alignment-bytes applies to exactly-once only (unaligned checkpoints do not align)"
                    .into(),
            );
        }
        job.checkpoint.mode = match mode {
            ModeArg::None => CheckpointMode::None,
            ModeArg::ExactlyOnce => CheckpointMode::ExactlyOnce,
            ModeArg::AtLeastOnce => CheckpointMode::AtLeastOnce,
            ModeArg::Unaligned => CheckpointMode::Unaligned,
        };
        let checkpoint_dir = if checkpointing {
            let interval = self.checkpoint_interval_ms.unwrap_or(100);
            if interval == 0 {
                return Err("--checkpoint-interval-ms must be at least 1".into());
            }
            job.checkpoint.interval = Some(Duration::from_millis(interval));
            let timeout = self.checkpoint_timeout_ms.unwrap_or(60_000);
            if timeout == 0 {
                return Err("--checkpoint-timeout-ms must be at least 1".into());
            }
            job.checkpoint.timeout = Duration::from_millis(timeout);
            if let Some(m) = self.max_alignment_bytes {
                job.handler.max_alignment_bytes = Some(m);
            }
            job.checkpoint.aligned_checkpoint_timeout =
                aligned_timeout(self.aligned_checkpoint_timeout_ms)?;
            self.incremental.apply(&mut job.checkpoint)?;
            if self.checkpoint_storage == StorageArg::Memory {
                if self.checkpoint_dir.is_some() || self.restore.is_some() {
                    return Err(
                        "--checkpoint-storage memory keeps no folder: it takes neither --checkpoint-dir nor --restore"
                            .into(),
                    );
                }
                CheckpointDir::None
            } else {
                match (&self.restore, &self.checkpoint_dir) {
                (Some(r), Some(d)) if !same_folder(r, d) => {
                    return Err(format!(
                        "--restore {} and --checkpoint-dir {} differ: a restored run goes on writing checkpoints to the folder it restores from",
                        r.display(),
                        d.display()
                    ))
                }
                (Some(r), _) => {
                    if r.exists() && !r.is_dir() {
                        return Err(format!(
                            "--restore {}: is a file, not a checkpoint folder",
                            r.display()
                        ));
                    }
                    if !r.is_dir() {
                        return Err(format!("--restore {}: no such folder", r.display()));
                    }
                    job.checkpoint.restore_mode = lockgate::RestoreMode::Required;
                    job.checkpoint.dir = Some(r.clone());
                    CheckpointDir::User(r.clone())
                }
                (None, Some(d)) => {
                    if !dir_is_empty_or_absent(d)? {
                        return Err(format!(
                            "--checkpoint-dir {} is not empty; use --restore {} to resume from it, or an empty folder",
                            d.display(),
                            d.display()
                        ));
                    }
                    std::fs::create_dir_all(d).map_err(|e| {
                        format!("--checkpoint-dir {}: cannot create: {e}", d.display())
                    })?;
                    job.checkpoint.dir = Some(d.clone());
                    CheckpointDir::User(d.clone())
                }
                (None, None) => {
                    let t = tempfile::Builder::new()
                        .prefix("lockgate-checkpoints-")
                        .tempdir()
                        .map_err(|e| format!("cannot create a temporary checkpoint folder: {e}"))?;
                    job.checkpoint.dir = Some(t.path().to_path_buf());
                    CheckpointDir::Temp(t)
                }
            }
            }
        } else {
            CheckpointDir::None
        };
        if self.output == OutputArg::Committed {
            if !checkpointing {
                return Err(
                    "--output committed needs checkpoints: records are committed when a checkpoint completes (--checkpoint exactly-once, unaligned or at-least-once)"
                        .into(),
                );
            }
            refjob.output = lockgate_workloads::refjob::OutputMode::Committed;
            refjob.committed_log_dir = checkpoint_dir.path().map(Path::to_path_buf);
        }
        if self.inject_failures > 0 {
            job.restart = RestartStrategy {
                max_attempts: u32::try_from(self.inject_failures)
                    .map_err(|_| "--inject-failures is too large".to_string())?,
                delay: Duration::ZERO,
            };
            let per_source = refjob.total_records() / refjob.parallelism as u64;
            if per_source < 2 * (self.inject_failures as u64 + 1) {
                return Err(format!(
                    "--inject-failures {}: the run has too few records ({}) to fail that often",
                    self.inject_failures,
                    refjob.total_records()
                ));
            }
        }
        job.validate()
            .map_err(|e| format!("invalid settings: {e}"))?;
        let outputs = [
            ("json", &self.json),
            ("hgrm", &self.hgrm),
            ("hlog", &self.hlog),
            ("svg", &self.svg),
            ("timeline", &self.timeline),
            ("html", &self.html),
        ];
        let named: Vec<(String, &Path)> = outputs
            .iter()
            .filter_map(|(f, p)| Some((format!("--{f}"), p.as_deref()?)))
            .collect();
        distinct_files(
            &named
                .iter()
                .map(|(f, p)| (f.as_str(), *p))
                .collect::<Vec<_>>(),
        )?;
        for (flag, p) in outputs {
            if flag == "timeline" && p.is_some() && !paced {
                return Err(
                    "--timeline is for W2/W3: W1 and W4 are closed loops, with no latency over time worth drawing"
                        .into(),
                );
            }
            if let Some(p) = p {
                check_writable(p, flag)?;
            }
        }
        if self.quiet && self.progress == ProgressArg::Always {
            return Err("--quiet and --progress always contradict each other".into());
        }
        let progress = match self.progress {
            ProgressArg::Always => true,
            ProgressArg::Never => false,
            ProgressArg::Auto => {
                !self.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr())
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let config_json = serde_json::json!({
            "workload": wname,
            "records": (!timed).then_some(refjob.records),
            "rate": paced.then_some(refjob.rate),
            "duration": timed.then_some(refjob.duration.as_secs_f64()),
            "warmup": timed.then_some(refjob.warmup.as_secs_f64()),
            "keys": refjob.keys,
            "seed": self.seed,
            "key_dist": refjob.key_dist.to_string(),
            "payload_bytes": refjob.payload_bytes,
            "parallelism": refjob.parallelism,
            "batch_size": job.batch_size,
            "channel_capacity": job.channel_capacity,
            "buffer_timeout_us": self.buffer_timeout_us,
            "pin": self.pin,
            "wait_strategy": self.wait_strategy.as_str(),
            "workers": job.workers,
            "blocker_capacity_bytes": self.blocker_capacity_bytes,
            "checkpoint": mode.as_str(),
            "checkpoint_interval_ms": job.checkpoint.interval.map(|d| d.as_millis() as u64),
            "checkpoint_dir": match &checkpoint_dir {
                CheckpointDir::User(p) => Some(p.display().to_string()),
                _ => None,
            },
            "output": match self.output {
                OutputArg::Processing => "processing",
                OutputArg::Committed => "committed",
            },
            "checkpoint_storage": checkpointing.then_some(match self.checkpoint_storage {
                StorageArg::Disk => "disk",
                StorageArg::Memory => "memory",
            }),
            "max_alignment_bytes": self.max_alignment_bytes,
            "aligned_checkpoint_timeout_ms": self.aligned_checkpoint_timeout_ms,
            "checkpoint_timeout_ms": checkpointing.then_some(job.checkpoint.timeout.as_millis() as u64),
            "incremental": checkpointing.then(|| crate::incremental_args::IncrementalArgs::json(&job.checkpoint)),
            "inject_failures": self.inject_failures,
            "restore": path(&self.restore),
            "json": path(&self.json),
            "hgrm": path(&self.hgrm),
            "hlog": path(&self.hlog),
            "svg": path(&self.svg),
            "timeline": path(&self.timeline),
            "html": path(&self.html),
            "progress": match self.progress {
                ProgressArg::Auto => "auto",
                ProgressArg::Always => "always",
                ProgressArg::Never => "never",
            },
            "quiet": self.quiet,
            "tick_us": paced.then_some(tick_us),
            "ab": self.ab,
        });
        let ab = match self.ab {
            None => None,
            Some(s) if !(s.is_finite() && s >= 0.05) => {
                return Err(format!("--ab {s}: a segment lasts at least 0.05 s"))
            }
            Some(_) if !checkpointing => {
                return Err("--ab compares checkpointing on and off: it needs checkpoints".into())
            }
            Some(s) => {
                let segment = Duration::from_secs_f64(s);
                let blocks = if timed {
                    (refjob.duration.as_secs_f64() / (3.0 * s)).floor() as usize
                } else {
                    // W1: as many as its records last.
                    100_000
                };
                if blocks < 20 {
                    return Err(format!(
                        "--ab {s}: 20 segments a group need --duration {:.0} s at least (3 groups)",
                        (60.0 * s).ceil()
                    ));
                }
                // Finer intervals: a segment's counted part is a few
                // hundred ms.
                refjob.interval_ns = 10_000_000;
                Some((segment, blocks))
            }
        };
        Ok(Plan {
            refjob,
            job,
            mode,
            failures: self.inject_failures,
            seed: self.seed,
            checkpoint_dir,
            config_json,
            progress,
            quiet: self.quiet,
            ab,
            interval_report: match self.interval_report {
                Some(0) => return Err("--interval-report must be at least 1 s".into()),
                s => s.map(Duration::from_secs),
            },
            pinning: self.pin.clone(),
            warnings,
        })
    }
}

/// `--aligned-checkpoint-timeout-ms MS` as the engine takes it.
///
/// # Errors
/// Over [`lockgate::config::MAX_TIME`] (about 292 years), named in the flag's unit.
pub(crate) fn aligned_timeout(ms: Option<u64>) -> Result<Option<Duration>, String> {
    let max_ms = lockgate::config::MAX_TIME.as_millis();
    match ms {
        Some(t) if u128::from(t) > max_ms => Err(format!(
            "--aligned-checkpoint-timeout-ms must be at most {max_ms} ms, got {t}"
        )),
        _ => Ok(ms.map(Duration::from_millis)),
    }
}
