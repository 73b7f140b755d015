//! `lockgate flights`: the NYC flights job (see
//! `lockgate_examples::flights_job`).
//!
//! Exit status: 0 on success; 2 for bad input (a missing file, a bad
//! header, a malformed row with `--bad-rows fail`, bundled data not found,
//! invalid flag values), with the file, line and reason; 1 when the job
//! failed for another reason (no restart left, checkpoint storage, output).

use clap::ValueEnum;
use lockgate::{CheckpointMode, JobConfig, JobError, RestartStrategy};
use lockgate_cli::metrics_http::{MetricsArgs, MetricsServer};
use lockgate_examples::flights::{find_bundled, BadRows, BundledFile};
use lockgate_examples::flights_job::{
    run as run_job, seeded_failures, FlightsJobError, FlightsJobSpec,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The most `--inject-failures`: each is a restart of the whole job.
const MAX_INJECTED_FAILURES: usize = 1000;

/// Failures injected by `--inject-failures` strike after a record count in
/// `1..=FAILURE_MAX_RECORDS` of their task (the load generator's seeded
/// plan, [`lockgate::testing::FailurePlan::seeded`]). On the bundled data most tasks
/// get far more than 50 000 records (337k flights), so most planned
/// failures strike, spread over the first part of the run; one planned past
/// its task's input (the weather source emits 26 115 rows; an aggregate
/// subtask no origin hashes to gets none) does not, and the run prints the
/// restarts that happened.
const FAILURE_MAX_RECORDS: u64 = 50_000;

/// What to do with malformed rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BadRowsArg {
    /// Exit 2 naming the file, line and reason.
    Fail,
    /// Skip and count them.
    Skip,
}

/// The checkpointing mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum CheckpointArg {
    /// No checkpoints (output committed at the end).
    None,
    /// Aligned barriers: exactly-once output.
    #[default]
    ExactlyOnce,
    /// Tracked barriers: after a failure rows may repeat (repeats are
    /// dropped when the files are written, and counted).
    AtLeastOnce,
    /// Unaligned checkpoints (exactly-once output; in-flight rows are
    /// persisted as channel state).
    Unaligned,
}

/// The flags of `lockgate flights`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// flights.csv, plain or gzip [default: the bundled
    /// data/nycflights13/flights.csv.gz, found from the repository root].
    #[arg(long, value_name = "PATH")]
    pub flights: Option<PathBuf>,
    /// weather.csv, plain or gzip [default: the bundled
    /// data/nycflights13/weather.csv.gz].
    #[arg(long, value_name = "PATH")]
    pub weather: Option<PathBuf>,
    /// The output folder (by_visibility.csv, daily.csv, parts/).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Subtasks of the keyed operators (the join and the aggregates)
    /// [default: 2; with --restore, the checkpoint's]. With --restore it
    /// may differ from the checkpoint's: the job is rescaled (keyed state
    /// moves by key group, the sinks' pending parts to their new owners).
    #[arg(long, value_name = "N")]
    pub parallelism: Option<usize>,
    /// The watermark bound: how far (minutes of time_hour) a record may
    /// come after a later one and still be on time.
    #[arg(long, default_value_t = 60, value_name = "N")]
    pub max_out_of_orderness_min: i64,
    /// Malformed rows: fail (exit 2) or skip and count.
    #[arg(long, value_enum, default_value_t = BadRowsArg::Fail)]
    pub bad_rows: BadRowsArg,
    /// Checkpointing mode [default: exactly-once; with --restore, the
    /// checkpoint's when it was unaligned or had an aligned-checkpoint
    /// timeout].
    #[arg(long = "checkpoint", value_enum, value_name = "MODE")]
    pub checkpoint_flag: Option<CheckpointArg>,
    /// The mode in effect (`--checkpoint`, or the restored checkpoint's).
    #[arg(skip)]
    pub checkpoint: CheckpointArg,
    /// Time between checkpoints, ms (default 100; only with checkpoints).
    #[arg(long, value_name = "MS")]
    pub checkpoint_interval_ms: Option<u64>,
    /// Exactly-once only: a checkpoint still aligning this long after its
    /// trigger switches to unaligned at the task's next look at its inputs
    /// (Flink's aligned-checkpoint timeout; an alignment, measured from
    /// its first barrier, may last a batch longer). 0 works as --checkpoint
    /// unaligned (the run's mode stays exactly-once), ms [default: never; with
    /// --restore, the checkpoint's].
    #[arg(long, value_name = "MS")]
    pub aligned_checkpoint_timeout_ms: Option<u64>,
    /// Where checkpoints are written (default: kept in memory).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from the latest complete checkpoint in DIR (as `loadgen
    /// --restore`); the run goes on writing checkpoints there.
    #[arg(long, value_name = "DIR")]
    pub restore: Option<PathBuf>,
    /// With --checkpoint-dir DIR: never (DIR must hold no checkpoint),
    /// if-present (resume from DIR as --restore DIR when it holds any
    /// checkpoint, else start fresh there) or required (--restore DIR)
    /// [default: never; --restore DIR is required].
    #[arg(long, value_name = "MODE")]
    pub restore_mode: Option<lockgate::RestoreMode>,
    /// Task failures to inject (seeded; the job restarts from its last
    /// checkpoint after each).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub inject_failures: usize,
    /// Seed of the failure plan.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the tasks on N cooperative worker threads (1-1024), as
    /// `loadgen --workers` [default: one thread per task].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    #[command(flatten)]
    pub incremental: crate::incremental_args::IncrementalArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// The flights job's parallelism unless `--parallelism` or a restored
/// checkpoint says otherwise.
const DEFAULT_PARALLELISM: usize = 2;

/// The output folder the newest readable checkpoint in `dir` recorded.
fn recorded_out(dir: &std::path::Path) -> Option<String> {
    crate::loadgen::restore::recorded_config(dir, |c| Some(c.get("out")?.as_str()?.to_string()))
}

/// The checkpointing settings a run records when its checkpoints may hold
/// channel state (unaligned, or aligned with a timeout), in the job's
/// configuration under `checkpoint`: a restore must replay that state
/// with priority lanes, so it takes these settings from the checkpoint.
fn recorded_checkpoint(dir: &std::path::Path) -> Option<(CheckpointArg, Option<u64>)> {
    crate::loadgen::restore::recorded_config(dir, |c| {
        let c = c.get("checkpoint")?;
        let mode = match c.get("mode")?.as_str()? {
            "unaligned" => CheckpointArg::Unaligned,
            "exactly-once" => CheckpointArg::ExactlyOnce,
            _ => return None,
        };
        let timeout = c
            .get("aligned_checkpoint_timeout_ms")
            .and_then(serde_json::Value::as_u64);
        Some((mode, timeout))
    })
}

/// Sets `args.checkpoint` (and the timeout) from `--checkpoint`, or on a
/// restore from the checkpoint when it recorded its mode; refuses flags
/// that contradict the restored checkpoint's.
fn resolve_checkpoint_mode(args: &mut Args) -> Result<(), String> {
    let recorded = args.restore.as_deref().and_then(recorded_checkpoint);
    let Some((mode, timeout)) = recorded else {
        args.checkpoint = args.checkpoint_flag.unwrap_or_default();
        return Ok(());
    };
    let dir = args.restore.as_deref().unwrap_or(std::path::Path::new(""));
    let taken = match (mode, timeout) {
        (CheckpointArg::ExactlyOnce, Some(t)) => {
            format!("--checkpoint exactly-once --aligned-checkpoint-timeout-ms {t}")
        }
        _ => "--checkpoint unaligned".to_string(),
    };
    if args.checkpoint_flag.is_some_and(|m| m != mode)
        || args
            .aligned_checkpoint_timeout_ms
            .is_some_and(|t| Some(t) != timeout)
    {
        return Err(format!(
            "--restore {}: the checkpoint was taken with {taken} (its in-flight records are persisted as channel state); restore it with the same flags, or without --checkpoint and --aligned-checkpoint-timeout-ms",
            dir.display()
        ));
    }
    args.checkpoint = mode;
    args.aligned_checkpoint_timeout_ms = timeout;
    Ok(())
}

/// `path` absolute and without `.`, `..` or links when it exists (as
/// printed and recorded), else as given.
fn normalised(path: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

/// Runs the command; prints what it did on stdout and errors on stderr.
/// Runs `lockgate flights`; with `--metrics-addr`, serves metrics from
/// before the job starts and, after the report, for `--metrics-linger`
/// more.
pub(crate) fn run(args: Args) -> ExitCode {
    let mut server = None;
    let code = run_flights(args, &mut server);
    if let Some(s) = &server {
        s.finish();
    }
    code
}

fn run_flights(mut args: Args, server: &mut Option<MetricsServer>) -> ExitCode {
    match crate::restore_args::resolve(
        args.restore_mode,
        args.restore.is_some(),
        args.checkpoint_dir.as_deref(),
    ) {
        Ok(Some(dir)) => args.restore = Some(dir),
        Ok(None) => {}
        Err(e) => return usage_error(&e),
    }
    if let Err(msg) = resolve_checkpoint_mode(&mut args) {
        return usage_error(&msg);
    }
    let flights = match args
        .flights
        .clone()
        .map_or_else(|| find_bundled(BundledFile::Flights), Ok)
    {
        Ok(p) => p,
        Err(e) => return usage_error(&e.to_string()),
    };
    let weather = match args
        .weather
        .clone()
        .map_or_else(|| find_bundled(BundledFile::Weather), Ok)
    {
        Ok(p) => p,
        Err(e) => return usage_error(&e.to_string()),
    };
    // Not given: the checkpoint's on a restore (as loadgen), else 2.
    let parallelism = args.parallelism.unwrap_or_else(|| {
        args.restore
            .as_deref()
            .and_then(|d| crate::loadgen::restore::recorded_parallelism(d, "aggregate"))
            .unwrap_or(DEFAULT_PARALLELISM)
    });
    if parallelism == 0 || parallelism > crate::loadgen::args::MAX_CLI_PARALLELISM {
        return usage_error(&format!(
            "--parallelism must be between 1 and {}, got {parallelism}",
            crate::loadgen::args::MAX_CLI_PARALLELISM,
        ));
    }
    if args.inject_failures > MAX_INJECTED_FAILURES {
        return usage_error(&format!(
            "--inject-failures must be at most {MAX_INJECTED_FAILURES}, got {}",
            args.inject_failures
        ));
    }
    if args.inject_failures > 0 && args.checkpoint == CheckpointArg::None {
        return usage_error(
            "--inject-failures needs checkpoints (--checkpoint exactly-once, unaligned or at-least-once)",
        );
    }
    if args.checkpoint_dir.is_some() && args.checkpoint == CheckpointArg::None {
        return usage_error(
            "--checkpoint-dir needs checkpoints (--checkpoint exactly-once, unaligned or at-least-once)",
        );
    }
    if args.max_out_of_orderness_min < 0 {
        return usage_error("--max-out-of-orderness-min must not be negative");
    }
    if args.checkpoint_interval_ms.is_some() && args.checkpoint == CheckpointArg::None {
        return usage_error(
            "--checkpoint-interval-ms needs checkpoints (--checkpoint exactly-once, unaligned or at-least-once)",
        );
    }
    if args.aligned_checkpoint_timeout_ms.is_some() && args.checkpoint != CheckpointArg::ExactlyOnce
    {
        return usage_error(
            "--aligned-checkpoint-timeout-ms applies to --checkpoint exactly-once only (--checkpoint unaligned is the same as a timeout of 0)",
        );
    }
    let interval_ms = args.checkpoint_interval_ms.unwrap_or(100);
    if interval_ms == 0 {
        return usage_error("--checkpoint-interval-ms must be positive");
    }
    if args.restore.is_some() && args.checkpoint == CheckpointArg::None {
        return usage_error(
            "--restore needs checkpoints (--checkpoint exactly-once, unaligned or at-least-once)",
        );
    }
    let checkpoint_dir = match (&args.restore, &args.checkpoint_dir) {
        (Some(r), _) if !r.is_dir() => {
            return usage_error(&format!("--restore {}: no such folder", r.display()));
        }
        (Some(r), Some(c)) if normalised(r) != normalised(c) => {
            return usage_error(&format!(
                "--restore {} and --checkpoint-dir {} differ: a restored run goes on writing checkpoints to the folder it restores from",
                r.display(),
                c.display()
            ));
        }
        (Some(r), _) => Some(r.clone()),
        (None, c) => c.clone(),
    };
    let Some(bound_ms) = args.max_out_of_orderness_min.checked_mul(60_000) else {
        return usage_error("--max-out-of-orderness-min is too large");
    };
    let spec = FlightsJobSpec {
        flights: normalised(&flights),
        weather: normalised(&weather),
        out_dir: args.out.clone(),
        parallelism,
        max_out_of_orderness_ms: bound_ms,
        bad_rows: match args.bad_rows {
            BadRowsArg::Fail => BadRows::Fail,
            BadRowsArg::Skip => BadRows::Skip,
        },
    };
    let mut config = JobConfig::default();
    if let Some(w) = args
        .workers
        .filter(|w| *w == 0 || *w > lockgate::config::MAX_WORKERS)
    {
        return usage_error(&format!(
            "--workers must be between 1 and {} threads, got {w} (leave it out for one thread per task)",
            lockgate::config::MAX_WORKERS
        ));
    }
    config.workers = args.workers;
    config.checkpoint.mode = match args.checkpoint {
        CheckpointArg::None => CheckpointMode::None,
        CheckpointArg::ExactlyOnce => CheckpointMode::ExactlyOnce,
        CheckpointArg::AtLeastOnce => CheckpointMode::AtLeastOnce,
        CheckpointArg::Unaligned => CheckpointMode::Unaligned,
    };
    if config.checkpoint.mode != CheckpointMode::None {
        config.checkpoint.interval = Some(Duration::from_millis(interval_ms));
    }
    config.checkpoint.aligned_checkpoint_timeout =
        match crate::loadgen::args::aligned_timeout(args.aligned_checkpoint_timeout_ms) {
            Ok(t) => t,
            Err(e) => return usage_error(&e),
        };
    config.checkpoint.dir = checkpoint_dir;
    if args.restore.is_some() {
        config.checkpoint.restore_mode = lockgate::RestoreMode::Required;
    }
    if let Some(flag) = args.incremental.given() {
        if config.checkpoint.mode == CheckpointMode::None {
            return usage_error(&format!(
                "--{flag} needs checkpoints (--checkpoint exactly-once, unaligned or at-least-once)"
            ));
        }
    }
    if let Err(e) = args.incremental.apply(&mut config.checkpoint) {
        return usage_error(&e);
    }
    *server = match args.metrics.start() {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    // One restart per injected failure (input errors are fatal and never
    // restarted: a restart would read the same input again).
    config.restart = RestartStrategy {
        max_attempts: u32::try_from(args.inject_failures).unwrap_or(u32::MAX),
        delay: Duration::ZERO,
    };
    let created_out = !args.out.exists();
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        return usage_error(&format!(
            "--out {}: cannot create the folder: {e}",
            args.out.display()
        ));
    }
    let spec = FlightsJobSpec {
        out_dir: normalised(&args.out),
        ..spec
    };
    if let Some(dir) = &args.restore {
        if let Some(recorded) = recorded_out(dir) {
            let here = spec.out_dir.display().to_string();
            if recorded != here {
                if created_out {
                    let _ = std::fs::remove_dir(&spec.out_dir);
                }
                return usage_error(&format!(
                    "--restore {}: the checkpoint was taken writing to another output folder (out: {recorded} → {here}); its committed parts are there: give --out {recorded}",
                    dir.display()
                ));
            }
        }
    }
    let plan = seeded_failures(&spec, args.seed, args.inject_failures, FAILURE_MAX_RECORDS);
    let result = run_job(&spec, config, plan);
    if result.is_err() && created_out {
        // A run that wrote nothing leaves no folder behind (remove_dir
        // removes only an empty one).
        let _ = std::fs::remove_dir(&spec.out_dir);
    }
    let r = match result {
        Ok(r) => r,
        Err(FlightsJobError::Input(msg)) => {
            eprintln!("error: {msg}");
            return ExitCode::from(2);
        }
        // Refused before anything ran: a bad configuration or checkpoint
        // folder is bad input too.
        Err(FlightsJobError::Job(
            e @ (JobError::Config(_)
            | JobError::Storage(_)
            | JobError::FolderInUse(_)
            | JobError::Restore(_)),
        )) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let s = r.summary;
    crate::loadgen::restore::warn_skipped(&r.metrics.restore_skipped);
    if let (Some(dir), Some(at)) = (&args.restore, &r.metrics.restored) {
        let rescaled: Vec<String> = at
            .rescaled
            .iter()
            .map(|(task, old, new)| format!("{task} {old} → {new}"))
            .collect();
        println!(
            "restored: chk-{} from {}{}",
            at.checkpoint,
            dir.display(),
            if rescaled.is_empty() {
                String::new()
            } else {
                format!(", rescaled ({})", rescaled.join(", "))
            }
        );
    }
    println!(
        "flights: {} records read from {} ({} bad rows skipped)",
        s.flights_read,
        spec.flights.display(),
        s.flights_skipped
    );
    println!(
        "weather: {} records read from {} ({} bad rows skipped)",
        s.weather_read,
        spec.weather.display(),
        s.weather_skipped
    );
    println!(
        "late records: {} (join: {} flights, {} weather rows; daily windows: {})",
        s.late_records(),
        s.join.late_facts,
        s.join.late_rows,
        s.daily_late
    );
    println!(
        "flights without a weather row (unknown): {}",
        s.join.unmatched
    );
    if s.join.duplicate_rows > 0 {
        println!(
            "weather rows ignored (same origin and hour seen before): {}",
            s.join.duplicate_rows
        );
    }
    println!(
        "checkpoints completed: {}",
        r.metrics.completed_checkpoints()
    );
    if args.inject_failures > 0 && u64::from(r.metrics.restarts) < args.inject_failures as u64 {
        println!(
            "restarts: {} ({} failures planned; a failure planned past its task's input does not strike)",
            r.metrics.restarts, args.inject_failures
        );
    } else if args.inject_failures > 0 {
        println!(
            "restarts: {} (every one of the {} planned failures struck)",
            r.metrics.restarts, args.inject_failures
        );
    } else {
        println!("restarts: {}", r.metrics.restarts);
    }
    // A restore from a folder replays, as a restart does, what came after
    // the checkpoint it restored.
    let replayed_after = match (r.metrics.restarts > 0, &r.metrics.restored) {
        (true, Some(at)) => Some(format!("a restart or the restore of chk-{}", at.checkpoint)),
        (false, Some(at)) => Some(format!("the restore of chk-{}", at.checkpoint)),
        (true, None) => Some("a restart".to_string()),
        (false, None) => None,
    };
    if let (CheckpointArg::AtLeastOnce, Some(after)) = (args.checkpoint, replayed_after) {
        println!(
            "note: at-least-once: records replayed after {after} may be counted twice in the figures"
        );
    }
    if r.rows.duplicates > 0 {
        println!(
            "repeated rows dropped (at-least-once replay): {}",
            r.rows.duplicates
        );
    }
    println!("wrote {}", r.by_visibility_path.display());
    println!("wrote {}", r.daily_path.display());
    ExitCode::SUCCESS
}
