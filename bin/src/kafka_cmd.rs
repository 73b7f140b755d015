//! `lockgate kafka`: the reference workload over Kafka, across processes.
//!
//! - `produce` writes the reference workload's records into a topic, each
//!   to partition `hash(key) % P` (so a key's records live in one);
//! - `run` runs the reference topology on this process's partitions
//!   (`p % processes == index`), writing `(key, sum, n)` to the output
//!   topic, the partition of each output record that of its input record;
//! - `verify` reads the output with `read_committed` and checks it against
//!   the closed form.
//!
//! Exit status: 0 on success; 2 for bad input, before anything is written
//! (no broker reachable within 5 s, a missing input topic, `--index` not
//! below `--processes`, a restore folder of another topic or process
//! count, invalid flag values); 1 when the job or the check failed.

use clap::{Subcommand, ValueEnum};
use lockgate::{
    storage::CheckpointStorage, storage::LocalDirStorage, CheckpointMode, JobBuilder, JobConfig,
    JobError,
};
use lockgate_cli::kafka::{build_job, KafkaJobSpec, SinkGuarantee};
use lockgate_cli::metrics_http::MetricsArgs;
use lockgate_kafka::{
    connect_check, create_topic, end_offsets, partition_count, partition_of_key, read_topic,
    ClientSettings, InputRecord, KafkaError, KafkaSourceConfig, OutputRecord, TopicWriter,
};
use lockgate_workloads::workload::{ExpectedResult, KeySpace, XorShift64Star, DEFAULT_KEYS};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often `kafka run` prints a progress line.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The most partitions `produce` creates a topic with.
const MAX_PARTITIONS: u32 = 10_000;

/// The subcommands of `lockgate kafka`.
#[derive(Subcommand, Debug)]
pub(crate) enum KafkaCommand {
    /// Writes the reference workload's records into a topic (created with
    /// --partitions if absent), each to partition hash(key) % P.
    Produce(ProduceArgs),
    /// Runs the reference topology (chained map, key_by, keyed_sum, sink)
    /// on this process's partitions of the input topic.
    Run(RunFlags),
    /// Reads an output topic (read_committed) and checks it: lost and
    /// duplicated records, every key's last sum against the closed form.
    Verify(VerifyArgs),
}

/// The flags of `lockgate kafka produce`.
#[derive(clap::Args, Debug)]
pub(crate) struct ProduceArgs {
    /// Kafka brokers, HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: String,
    /// The topic to write.
    #[arg(long)]
    topic: String,
    /// Its partition count (the topic is created with it if absent; an
    /// existing topic with another count is refused).
    #[arg(long, value_name = "P")]
    partitions: u32,
    /// Records to write: the workload's records 0..N.
    #[arg(long, value_name = "N")]
    records: u64,
    /// Records per second [default: as fast as the brokers take them].
    #[arg(long, value_name = "R")]
    rate: Option<u64>,
    /// Distinct keys.
    #[arg(long, default_value_t = DEFAULT_KEYS, value_name = "K")]
    keys: u64,
}

/// What the Kafka sink guarantees (`--sink`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SinkArg {
    /// Flush on every checkpoint: nothing lost; records since the restored
    /// checkpoint are written again after a failure.
    AtLeastOnce,
    /// Kafka transactions committed when a checkpoint completes:
    /// read_committed readers see each record once. Needs a broker with
    /// transactions (not the test broker, tansu).
    ExactlyOnce,
}

/// The checkpointing mode of `kafka run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CheckpointArg {
    /// No checkpoints (a failure restarts from the beginning).
    None,
    /// Aligned barriers.
    ExactlyOnce,
    /// Tracked barriers.
    AtLeastOnce,
}

/// The flags of `lockgate kafka run` as given; with `--restore DIR` the
/// job's identity (input, output, processes, index, sink) left out
/// is the checkpoint's ([`RunFlags::resolve`]).
#[derive(clap::Args, Debug)]
pub(crate) struct RunFlags {
    /// Kafka brokers, HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: String,
    /// The input topic (must exist) [with --restore DIR: the checkpoint's].
    #[arg(long, value_name = "T")]
    input: Option<String>,
    /// The output topic (created with the input's partition count if
    /// absent) [with --restore DIR: the checkpoint's].
    #[arg(long, value_name = "O")]
    output: Option<String>,
    /// Processes sharing the input's partitions [default: 1; with
    /// --restore DIR: the checkpoint's].
    #[arg(long, value_name = "N")]
    processes: Option<u32>,
    /// This process's index, below --processes: it owns the partitions p
    /// with p % processes == index [default: 0; with --restore DIR: the
    /// checkpoint's].
    #[arg(long, value_name = "I")]
    index: Option<u32>,
    /// Read up to the end offsets seen at start, then end (a restored run
    /// may be bounded or not, whatever the checkpoint's was).
    #[arg(long)]
    bounded: bool,
    /// The sink's guarantee [default: at-least-once; with --restore DIR:
    /// the checkpoint's].
    #[arg(long, value_enum)]
    sink: Option<SinkArg>,
    /// Checkpointing mode.
    #[arg(long, value_enum, default_value_t = CheckpointArg::ExactlyOnce)]
    checkpoint: CheckpointArg,
    /// Time between checkpoints, ms.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    checkpoint_interval_ms: u64,
    /// Where checkpoints are written [default: kept in memory].
    #[arg(long, value_name = "D")]
    checkpoint_dir: Option<PathBuf>,
    /// Resume from the latest complete checkpoint in D (taken by a run
    /// with the same input, output, --processes and --index); the run goes
    /// on writing checkpoints there. With another --processes: every old
    /// process's folder, D0,D1,... (each process takes the partitions and
    /// keys it owns now from all of them), and a new, empty
    /// --checkpoint-dir.
    #[arg(long, value_name = "D[,D...]")]
    restore: Option<String>,
    /// With --checkpoint-dir D: never (D must hold no checkpoint),
    /// if-present (resume from D as --restore D when it holds any
    /// checkpoint, else start fresh there) or required (--restore D)
    /// [default: never; --restore D is required].
    #[arg(long, value_name = "MODE")]
    restore_mode: Option<lockgate::RestoreMode>,
    /// Subtasks of the source and of keyed_sum in this process.
    #[arg(long, default_value_t = 2, value_name = "N")]
    parallelism: usize,
    /// Restarts after a task failure (a broker error, a timeout), each from
    /// the latest completed checkpoint.
    #[arg(long, default_value_t = 3, value_name = "N")]
    restarts: u32,
    /// Wait before each restart, ms.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    restart_delay_ms: u64,
    /// --sink exactly-once, with --restore: write the checkpoint's pending
    /// transactions again even when their marker group has lost its
    /// committed offset (expired after the broker's
    /// offsets.retention.minutes, or another cluster), which may duplicate
    /// output that had landed. Without it such a restore is refused.
    #[arg(long)]
    allow_missing_marker: bool,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// `kafka run`'s flags with the job's identity resolved.
#[derive(Debug)]
struct RunArgs {
    bootstrap: String,
    input: String,
    output: String,
    processes: u32,
    index: u32,
    bounded: bool,
    sink: SinkArg,
    checkpoint: CheckpointArg,
    checkpoint_interval_ms: u64,
    checkpoint_dir: Option<PathBuf>,
    restore: Option<String>,
    parallelism: usize,
    restarts: u32,
    restart_delay_ms: u64,
    allow_missing_marker: bool,
    metrics: MetricsArgs,
}

impl RunFlags {
    /// Fills what was left out: from the checkpoint with `--restore DIR`
    /// (one folder), else the defaults; `--input` and `--output` are
    /// needed without a restore.
    fn resolve(mut self) -> Result<RunArgs, String> {
        if let Some(dir) = crate::restore_args::resolve(
            self.restore_mode,
            self.restore.is_some(),
            self.checkpoint_dir.as_deref(),
        )? {
            self.restore = Some(dir.display().to_string());
        }
        let recorded = match self.restore.as_deref() {
            Some(d) if !d.contains(',') => recorded_job(std::path::Path::new(d)),
            _ => None,
        };
        let text = |k: &str| recorded.as_ref()?.get(k)?.as_str().map(str::to_string);
        let num = |k: &str| u32::try_from(recorded.as_ref()?.get(k)?.as_u64()?).ok();
        let need = |v: Option<String>, flag: &str| {
            v.ok_or_else(|| {
                format!("--{flag} is needed (or --restore DIR of a `kafka run` checkpoint)")
            })
        };
        Ok(RunArgs {
            input: need(self.input.or_else(|| text("input")), "input")?,
            output: need(self.output.or_else(|| text("output")), "output")?,
            processes: self.processes.or_else(|| num("processes")).unwrap_or(1),
            index: self.index.or_else(|| num("index")).unwrap_or(0),
            bounded: self.bounded,
            sink: self
                .sink
                .or_else(|| match text("sink").as_deref() {
                    Some("exactly-once") => Some(SinkArg::ExactlyOnce),
                    Some("at-least-once") => Some(SinkArg::AtLeastOnce),
                    _ => None,
                })
                .unwrap_or(SinkArg::AtLeastOnce),
            bootstrap: self.bootstrap,
            checkpoint: self.checkpoint,
            checkpoint_interval_ms: self.checkpoint_interval_ms,
            checkpoint_dir: self.checkpoint_dir,
            restore: self.restore,
            parallelism: self.parallelism,
            restarts: self.restarts,
            restart_delay_ms: self.restart_delay_ms,
            allow_missing_marker: self.allow_missing_marker,
            metrics: self.metrics,
        })
    }
}

/// The flags of `lockgate kafka verify`.
#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// Kafka brokers, HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: String,
    /// The output topic to check.
    #[arg(long, value_name = "O")]
    topic: String,
    /// Records the input held (0..N).
    #[arg(long, value_name = "N")]
    records: u64,
    /// Distinct keys of the input.
    #[arg(long, default_value_t = DEFAULT_KEYS, value_name = "K")]
    keys: u64,
    /// What to hold the output to: exactly-once also fails on duplicates.
    #[arg(long, value_enum, default_value_t = SinkArg::ExactlyOnce)]
    guarantee: SinkArg,
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

/// Runs a `kafka` subcommand.
pub(crate) fn run(command: KafkaCommand) -> ExitCode {
    match command {
        KafkaCommand::Produce(a) => produce(&a),
        KafkaCommand::Run(flags) => match flags.resolve() {
            Ok(a) => {
                // Serves from before the job starts; after the summary,
                // for --metrics-linger more.
                let server = match a.metrics.start() {
                    Ok(s) => s,
                    Err(e) => return usage_error(&e),
                };
                let code = run_job(&a);
                if let Some(s) = &server {
                    s.finish();
                }
                code
            }
            Err(msg) => usage_error(&msg),
        },
        KafkaCommand::Verify(a) => verify(&a),
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn produce(a: &ProduceArgs) -> ExitCode {
    if a.partitions == 0 || a.partitions > MAX_PARTITIONS {
        return usage_error(&format!(
            "--partitions must be between 1 and {MAX_PARTITIONS}, got {}",
            a.partitions
        ));
    }
    if a.rate == Some(0) {
        return usage_error("--rate must be positive");
    }
    if let Err(why) = lockgate_kafka::check_topic_name(&a.topic) {
        return usage_error(&format!("--topic: {why}"));
    }
    let keys = match KeySpace::uniform(a.keys) {
        Ok(k) => k,
        Err(e) => return usage_error(&format!("--keys: {e}")),
    };
    let settings = ClientSettings::new(&a.bootstrap);
    if let Err(e) = connect_check(&settings) {
        return usage_error(&e.to_string());
    }
    match create_topic(&settings, &a.topic, a.partitions) {
        Ok(true) => {
            println!("created topic {} with {} partitions", a.topic, a.partitions);
            if lockgate::keys::DEFAULT_MAX_PARALLELISM % a.partitions != 0 {
                println!(
                    "note: `lockgate kafka run` needs a partition count that divides {} (the key groups); it will refuse this topic",
                    lockgate::keys::DEFAULT_MAX_PARALLELISM
                );
            }
        }
        Ok(false) => {
            let held: i64 = end_offsets(&settings, &a.topic, a.partitions)
                .map(|e| e.iter().sum())
                .unwrap_or(0);
            if held > 0 && a.records > 0 {
                println!(
                    "topic {} exists with {} partitions and about {held} records: appending (records 0..{} again)",
                    a.topic, a.partitions, a.records
                );
            } else {
                println!("topic {} exists with {} partitions", a.topic, a.partitions);
            }
        }
        Err(e @ KafkaError::PartitionCount { .. }) => return usage_error(&e.to_string()),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    }
    let mut writer = match TopicWriter::new(&settings, &a.topic) {
        Ok(w) => w,
        Err(e) => return usage_error(&e.to_string()),
    };
    let started = Instant::now();
    let t0 = unix_ns();
    let mut rng = XorShift64Star::new();
    for n in 0..a.records {
        let key = keys.key_of(rng.next_output());
        let ts_ns = match a.rate {
            Some(rate) => {
                // Open loop: record n is due at t0 + n / rate.
                let due = Duration::from_nanos(
                    u64::try_from(u128::from(n) * 1_000_000_000 / u128::from(rate))
                        .unwrap_or(u64::MAX),
                );
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
                t0.saturating_add(due.as_nanos() as u64)
            }
            None => unix_ns(),
        };
        let r = InputRecord { key, n, ts_ns };
        let partition = partition_of_key(key, a.partitions);
        if let Err(e) = writer.send(
            partition,
            &r.key_bytes(),
            &r.value_bytes(),
            lockgate_kafka::timestamp_ms(ts_ns),
        ) {
            eprintln!("error: record {n}: {e}");
            return ExitCode::from(1);
        }
    }
    if let Err(e) = writer.flush() {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "produced {} records to {} ({} partitions, {} keys) in {secs:.2} s ({:.0} records/s)",
        a.records,
        a.topic,
        a.partitions,
        a.keys,
        a.records as f64 / secs.max(1e-9)
    );
    ExitCode::SUCCESS
}

/// Records the sources emitted (every attempt's, replays included).
fn records_read(m: &lockgate::JobMetrics) -> u64 {
    m.tasks
        .iter()
        .filter(|t| t.name.starts_with("source["))
        .map(|t| t.records_out)
        .sum()
}

/// What a `kafka run` records in its checkpoints, to refuse a restore of
/// another job's folder.
fn recorded_job(dir: &std::path::Path) -> Option<Value> {
    crate::loadgen::restore::recorded_config(dir, |c| c.get("kafka").cloned())
}

fn run_job(a: &RunArgs) -> ExitCode {
    // Ctrl-C stops the job (sources stop, what is in flight drains, a
    // final checkpoint commits it) and the summary is printed; installed
    // first, so that one pressed while the job starts is not lost.
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        let _ = ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    if a.input == a.output {
        return usage_error(&format!(
            "--input and --output are both `{}`: the output would be appended to the input (and read again as input)",
            a.input
        ));
    }
    for (flag, topic) in [("--input", &a.input), ("--output", &a.output)] {
        if let Err(why) = lockgate_kafka::check_topic_name(topic) {
            return usage_error(&format!("{flag}: {why}"));
        }
    }
    if a.processes == 0 {
        return usage_error("--processes must be at least 1");
    }
    if a.index >= a.processes {
        return usage_error(&format!(
            "--index {} is not below --processes {}: indexes run from 0 to {}",
            a.index,
            a.processes,
            a.processes - 1
        ));
    }
    let max = crate::loadgen::args::MAX_CLI_PARALLELISM;
    if a.parallelism == 0 || a.parallelism > max {
        return usage_error(&format!(
            "--parallelism must be between 1 and {max}, got {}",
            a.parallelism
        ));
    }
    let checkpoints = a.checkpoint != CheckpointArg::None;
    if a.checkpoint_interval_ms == 0 {
        return usage_error("--checkpoint-interval-ms must be positive");
    }
    if !checkpoints && (a.restore.is_some() || a.checkpoint_dir.is_some()) {
        return usage_error("--restore and --checkpoint-dir need checkpoints");
    }
    if !checkpoints && a.sink == SinkArg::ExactlyOnce {
        return usage_error(
            "--sink exactly-once needs checkpoints (its transactions commit when a checkpoint completes)",
        );
    }
    let identity = json!({
        "input": a.input,
        "output": a.output,
        "processes": a.processes,
        "index": a.index,
        "sink": match a.sink {
            SinkArg::AtLeastOnce => "at-least-once",
            SinkArg::ExactlyOnce => "exactly-once",
        },
    });
    let plan = match plan_restore(a, &identity) {
        Ok(p) => p,
        Err(msg) => return usage_error(&msg),
    };
    let settings = ClientSettings::new(&a.bootstrap);
    if let Err(e) = connect_check(&settings) {
        return usage_error(&e.to_string());
    }
    let partitions = match partition_count(&settings, &a.input) {
        Ok(p) => p,
        Err(e @ KafkaError::MissingTopic(_)) => {
            return usage_error(&format!("--input: {e}"));
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    // A key group must not span partitions (so that each lives in one
    // process, and a restore across processes can hand it on whole): with
    // P dividing max_parallelism, key group g = hash % 128 lies in
    // partition g % P. And every process owns as many partitions.
    let groups = lockgate::keys::DEFAULT_MAX_PARALLELISM;
    if groups % partitions != 0 {
        return usage_error(&format!(
            "--input: topic `{}` has {partitions} partitions, which does not divide the {groups} key groups (use 1, 2, 4, 8, ... {groups} partitions)",
            a.input
        ));
    }
    if partitions % a.processes != 0 {
        return usage_error(&format!(
            "--processes {}: it must divide the {partitions} partitions of `{}` (each process owns as many)",
            a.processes, a.input
        ));
    }
    match create_topic(&settings, &a.output, partitions) {
        Ok(_) => {}
        Err(KafkaError::PartitionCount { actual, .. }) => {
            return usage_error(&format!(
                "--output: topic `{}` has {actual} partitions, the input `{}` {partitions}: each output record goes to its input record's partition",
                a.output, a.input
            ));
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    }
    let end = if a.bounded {
        match end_offsets(&settings, &a.input, partitions) {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    let owned = lockgate_kafka::owned_partitions(partitions, a.processes, a.index);
    let mut spec = KafkaJobSpec {
        source: KafkaSourceConfig {
            client: settings,
            topic: a.input.clone(),
            partitions,
            processes: a.processes,
            index: a.index,
            end_offsets: end.clone(),
            group_id: format!("lockgate-{}-{}", a.input, a.output),
            out_of_orderness_ns: 0,
        },
        output: a.output.clone(),
        parallelism: a.parallelism,
        guarantee: match a.sink {
            SinkArg::AtLeastOnce => SinkGuarantee::AtLeastOnce,
            SinkArg::ExactlyOnce => SinkGuarantee::ExactlyOnce,
        },
        transactional_prefix: format!("lockgate-{}-{}of{}", a.output, a.index, a.processes),
        adopted_ids: Vec::new(),
        allow_missing_marker: a.allow_missing_marker,
    };
    let mut config = JobConfig::default();
    config.checkpoint.mode = match a.checkpoint {
        CheckpointArg::None => CheckpointMode::None,
        CheckpointArg::ExactlyOnce => CheckpointMode::ExactlyOnce,
        CheckpointArg::AtLeastOnce => CheckpointMode::AtLeastOnce,
    };
    if checkpoints {
        config.checkpoint.interval = Some(Duration::from_millis(a.checkpoint_interval_ms));
    }
    config.restart = lockgate::RestartStrategy {
        max_attempts: a.restarts,
        delay: Duration::from_millis(a.restart_delay_ms),
    };
    config.checkpoint.dir = plan.checkpoint_dir().cloned();
    if matches!(plan, RestorePlan::Own(_)) {
        config.checkpoint.restore_mode = lockgate::RestoreMode::Required;
    }
    // `bounded` is not part of it: a run may be restored bounded or not.
    let app = identity.clone();
    let mut job = JobBuilder::new("kafka", config).with_app_config(json!({ "kafka": app }));
    if let RestorePlan::Merged {
        from,
        old_processes,
        state,
        ..
    } = &plan
    {
        let sinks: Vec<u32> = from.iter().map(|(_, p)| *p).collect();
        spec.adopted_ids = sinks
            .iter()
            .enumerate()
            .flat_map(|(j, &p)| {
                (0..p).map(move |k| format!("lockgate-{}-{j}of{old_processes}-{k}", a.output))
            })
            .collect();
        job = job.with_restored_state(state.clone());
        println!(
            "restoring from the {old_processes} folders of {old_processes} processes ({}): this process takes partitions {:?} and finishes the pending output of old processes {:?}",
            from.iter().map(|(d, _)| d.display().to_string()).collect::<Vec<_>>().join(", "),
            lockgate_kafka::owned_partitions(partitions, a.processes, a.index),
            (0..*old_processes).filter(|j| j % a.processes == a.index).collect::<Vec<_>>()
        );
    }
    if let Err(e) = build_job(&job, &spec) {
        return usage_error(&e.to_string());
    }
    println!(
        "process {} of {}: partitions {:?} of {} ({} of {}), {} subtasks; {}",
        a.index,
        a.processes,
        owned,
        a.input,
        owned.len(),
        partitions,
        a.parallelism,
        match &end {
            Some(e) => format!(
                "bounded: up to the end offsets taken now ({} records in these partitions, from their start)",
                owned.iter().map(|&p| e[p as usize]).sum::<i64>()
            ),
            None => "unbounded: Ctrl-C stops it".into(),
        }
    );
    let handle = match job.start() {
        Ok(h) => h,
        Err(
            e @ (JobError::Config(_)
            | JobError::Storage(_)
            | JobError::FolderInUse(_)
            | JobError::Restore(_)),
        ) => {
            return usage_error(&e.to_string());
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut stopping: Option<Instant> = None;
    if let (RestorePlan::Own(dir), Some(at)) = (&plan, &handle.metrics().restored) {
        println!("restored: chk-{} from {}", at.checkpoint, dir.display());
    }
    let started = Instant::now();
    let mut last_print = Instant::now();
    let mut first_seen = false;
    while !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        if !first_seen {
            let read = records_read(&handle.metrics());
            if read > 0 {
                first_seen = true;
                println!(
                    "  {:>5.1} s: first records read",
                    started.elapsed().as_secs_f64()
                );
            }
        }
        if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
            match stopping {
                None => {
                    println!("stopping (Ctrl-C): draining and taking a final checkpoint");
                    stopping = Some(Instant::now());
                    handle.stop();
                }
                // Said again each second until the job ends (a stop asked
                // while the job was still starting could go unheard).
                Some(at) if at.elapsed() >= Duration::from_secs(1) => {
                    stopping = Some(Instant::now());
                    handle.stop();
                }
                Some(_) => {}
            }
        }
        if last_print.elapsed() >= PROGRESS_EVERY {
            last_print = Instant::now();
            let m = handle.metrics();
            println!(
                "  {:>5.1} s: {} records read (replays included), {} checkpoints completed, {} restarts",
                started.elapsed().as_secs_f64(),
                records_read(&m),
                m.completed_checkpoints(),
                m.restarts
            );
        }
    }
    let last_metrics = handle.metrics();
    let result = handle.wait();
    let secs = started.elapsed().as_secs_f64();
    // A failed run's metrics are the handle's last snapshot.
    let metrics = match &result {
        Ok(m) => m.clone(),
        Err(_) => last_metrics,
    };
    let read = records_read(&metrics);
    println!(
        "kafka run: {read} records read in {secs:.2} s ({:.0} records/s), {} restarts",
        read as f64 / secs.max(1e-9),
        metrics.restarts
    );
    for (i, f) in metrics.failures.iter().enumerate() {
        let last = i + 1 == metrics.failures.len();
        println!(
            "  failure: {f} ({})",
            match f.restored_from {
                _ if last && result.is_err() => "no restart left".to_string(),
                Some(id) => format!("restarted from chk-{id}"),
                None => "restarted from the start".into(),
            }
        );
    }
    if checkpoints {
        let mut s = String::new();
        crate::loadgen::report::CheckpointsJson::from_metrics(&metrics).write_summary(
            &mut s,
            match a.checkpoint {
                CheckpointArg::AtLeastOnce => "at-least-once",
                _ => "exactly-once",
            },
        );
        print!("{s}");
        if a.sink == SinkArg::AtLeastOnce {
            println!("    (the sync part includes the sink's flush on each barrier: the wait for the broker to acknowledge everything before it)");
        }
    }
    match result {
        Ok(_) if stopping.is_some() => {
            println!(
                "result: interrupted (Ctrl-C before the end; what was read is committed: resume with --restore)"
            );
            ExitCode::from(130)
        }
        Ok(_) => {
            println!("result: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("result: FAILED ({e})");
            ExitCode::from(1)
        }
    }
}

fn verify(a: &VerifyArgs) -> ExitCode {
    let keys = match KeySpace::uniform(a.keys) {
        Ok(k) => k,
        Err(e) => return usage_error(&format!("--keys: {e}")),
    };
    if let Err(why) = lockgate_kafka::check_topic_name(&a.topic) {
        return usage_error(&format!("--topic: {why}"));
    }
    if a.records > lockgate_workloads::workload::MAX_CHECKED_RECORDS {
        return usage_error(&format!(
            "--records must be at most {}",
            lockgate_workloads::workload::MAX_CHECKED_RECORDS
        ));
    }
    let settings = ClientSettings::new(&a.bootstrap);
    if let Err(e) = connect_check(&settings) {
        return usage_error(&e.to_string());
    }
    let n_total = a.records;
    let mut seen = vec![0u64; n_total.div_ceil(64) as usize];
    let mut distinct = 0u64;
    let mut duplicated = 0u64;
    let mut foreign = 0u64;
    // Per key: the record with the largest n (its sum is the key's final
    // one, whatever order duplicates came in).
    let mut last: std::collections::HashMap<u64, (u64, u64)> = std::collections::HashMap::new();
    let read = read_topic(&settings, &a.topic, true, |p, offset, k, v| {
        let r = OutputRecord::decode(k, v).map_err(|why| KafkaError::BadRecord {
            topic: a.topic.clone(),
            partition: p,
            offset,
            why,
        })?;
        if r.n >= n_total {
            foreign += 1;
            return Ok(());
        }
        let (w, bit) = ((r.n / 64) as usize, 1u64 << (r.n % 64));
        if seen[w] & bit != 0 {
            duplicated += 1;
        } else {
            seen[w] |= bit;
            distinct += 1;
        }
        let e = last.entry(r.key).or_insert((r.n, r.sum));
        if r.n >= e.0 {
            *e = (r.n, r.sum);
        }
        Ok(())
    });
    let read = match read {
        Ok(n) => n,
        Err(e @ KafkaError::MissingTopic(_)) => return usage_error(&format!("--topic: {e}")),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let expected = ExpectedResult::compute(n_total, &keys);
    let mut wrong = 0u64;
    for key in 0..a.keys {
        let want = expected.final_sum(key);
        let got = last.get(&key).map(|&(_, s)| s);
        if want != got {
            wrong += 1;
        }
    }
    wrong += last.keys().filter(|&&k| k >= a.keys).count() as u64;
    let lost = n_total - distinct;
    println!("records: {read} read from {} (read_committed)", a.topic);
    println!("lost: {lost}");
    println!("duplicated: {duplicated}");
    if wrong == 0 {
        println!("sums: ok");
    } else {
        println!("sums: {wrong} wrong");
    }
    let mut why = Vec::new();
    if lost > 0 {
        why.push(format!("{lost} lost"));
    }
    if a.guarantee == SinkArg::ExactlyOnce && duplicated > 0 {
        why.push(format!("{duplicated} duplicated"));
    }
    if wrong > 0 {
        why.push(format!("{wrong} keys with a wrong last sum"));
    }
    if foreign > 0 {
        why.push(format!("{foreign} records with n >= {n_total}"));
    }
    if why.is_empty() {
        println!("result: ok");
        ExitCode::SUCCESS
    } else {
        println!("result: FAILED ({})", why.join(", "));
        ExitCode::from(1)
    }
}

/// Where a `kafka run` restores from and writes its checkpoints.
enum RestorePlan {
    /// A fresh start, checkpoints to this folder (or in memory).
    Fresh(Option<PathBuf>),
    /// This process's own folder: restored, and written on.
    Own(PathBuf),
    /// The folders of every process of an earlier run with another
    /// `--processes`, merged; checkpoints to a new folder.
    Merged {
        /// The new folder.
        dir: PathBuf,
        /// Each old process's folder, by old index, with its sink
        /// subtasks (keyed_sum's parallelism).
        from: Vec<(PathBuf, u32)>,
        /// The old process count.
        old_processes: u32,
        /// The merged state.
        state: lockgate::storage::RestoredState,
    },
}

impl RestorePlan {
    fn checkpoint_dir(&self) -> Option<&PathBuf> {
        match self {
            RestorePlan::Fresh(d) => d.as_ref(),
            RestorePlan::Own(d) => Some(d),
            RestorePlan::Merged { dir, .. } => Some(dir),
        }
    }
}

/// The recorded identity's differences from this run's, as `key: old →
/// new` (the engine's words for a refused restore), for `keys`.
fn differences(recorded: &Value, identity: &Value, keys: &[&str]) -> Vec<String> {
    let pick = |v: &Value| -> Value {
        keys.iter()
            .map(|k| (k.to_string(), v.get(*k).cloned().unwrap_or(Value::Null)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    lockgate::storage::config_differences(&pick(recorded), &pick(identity))
}

/// Checks `--restore` and `--checkpoint-dir` and decides the plan (see
/// [`RestorePlan`]); a merged restore loads every old folder's newest
/// intact checkpoint here. Errors are bad input (exit 2), in words.
fn plan_restore(a: &RunArgs, identity: &Value) -> Result<RestorePlan, String> {
    let Some(list) = &a.restore else {
        return Ok(RestorePlan::Fresh(a.checkpoint_dir.clone()));
    };
    let dirs: Vec<PathBuf> = list
        .split(',')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if dirs.is_empty() {
        return Err("--restore needs a folder".into());
    }
    for d in &dirs {
        if d.exists() && !d.is_dir() {
            return Err(format!("--restore {}: a file, not a folder", d.display()));
        }
        if !d.is_dir() {
            return Err(format!("--restore {}: no such folder", d.display()));
        }
    }
    let mut recorded = Vec::new();
    for d in &dirs {
        match recorded_job(d) {
            Some(r) => recorded.push(r),
            None => {
                let taken = LocalDirStorage::open(d)
                    .ok()
                    .is_some_and(|s| s.list().is_ok_and(|l| !l.is_empty()));
                return Err(if taken {
                    format!(
                        "--restore {}: no checkpoint there has a readable _metadata of `lockgate kafka run` (taken by another command, or damaged)",
                        d.display()
                    )
                } else {
                    format!("--restore {}: no checkpoint there", d.display())
                });
            }
        }
    }
    let same_processes = recorded[0].get("processes") == identity.get("processes");
    if dirs.len() == 1 && same_processes {
        // The sink too: pending exactly-once output must be finished by
        // the sink that wrote it.
        let mut keys = vec!["input", "output", "index"];
        if recorded[0].get("sink").is_some() {
            keys.push("sink");
        }
        let diffs = differences(&recorded[0], identity, &keys);
        if !diffs.is_empty() {
            return Err(format!(
                "--restore {}: the checkpoint was taken by another job ({})",
                dirs[0].display(),
                diffs.join(", ")
            ));
        }
        if let Some(c) = &a.checkpoint_dir {
            if c != &dirs[0] {
                return Err(format!(
                    "--restore {} and --checkpoint-dir {} differ: a restored run goes on writing checkpoints to the folder it restores from",
                    dirs[0].display(),
                    c.display()
                ));
            }
        }
        return Ok(RestorePlan::Own(dirs[0].clone()));
    }
    // Across processes: every old process's folder, one each.
    for (d, r) in dirs.iter().zip(&recorded) {
        let mut keys = vec!["input", "output"];
        if r.get("sink").is_some() {
            keys.push("sink");
        }
        let diffs = differences(r, identity, &keys);
        if !diffs.is_empty() {
            return Err(format!(
                "--restore {}: the checkpoint was taken by another job ({})",
                d.display(),
                diffs.join(", ")
            ));
        }
    }
    let counts: std::collections::BTreeSet<u64> = recorded
        .iter()
        .filter_map(|r| r.get("processes")?.as_u64())
        .collect();
    let old_processes = match counts.iter().collect::<Vec<_>>().as_slice() {
        [n] => u32::try_from(**n).map_err(|_| "a recorded process count is too large")?,
        _ => {
            return Err(format!(
                "--restore: the folders come from runs with different process counts ({counts:?})"
            ))
        }
    };
    let mut by_index: Vec<Option<PathBuf>> = vec![None; old_processes as usize];
    for (d, r) in dirs.iter().zip(&recorded) {
        let j = r.get("index").and_then(Value::as_u64).unwrap_or(u64::MAX);
        match by_index.get_mut(j as usize) {
            Some(slot @ None) => *slot = Some(d.clone()),
            Some(Some(other)) => {
                return Err(format!(
                    "--restore: {} and {} are both old process {j}'s",
                    other.display(),
                    d.display()
                ))
            }
            None => return Err(format!("--restore {}: a bad recorded index", d.display())),
        }
    }
    let missing: Vec<usize> = (0..by_index.len())
        .filter(|&j| by_index[j].is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "--restore: the run had {old_processes} processes; the folders of old processes {missing:?} are missing (each new process needs every old folder: partitions and keys move between processes)"
        ));
    }
    let Some(dir) = a.checkpoint_dir.clone() else {
        return Err(format!(
            "--restore from the {old_processes} processes' folders at --processes {}: give a new, empty --checkpoint-dir for this process",
            a.processes
        ));
    };
    if dirs.contains(&dir) {
        return Err(format!(
            "--checkpoint-dir {}: it is an old process's folder; a restore across processes writes to a new, empty one",
            dir.display()
        ));
    }
    let mut parts = Vec::new();
    let mut from = Vec::new();
    for d in by_index.into_iter().flatten() {
        let storage =
            LocalDirStorage::open(&d).map_err(|e| format!("--restore {}: {e}", d.display()))?;
        let state = lockgate::storage::load_restorable(&storage)
            .map_err(|e| format!("--restore {}: {e}", d.display()))?
            .ok_or_else(|| format!("--restore {}: no checkpoint there loads", d.display()))?;
        let sinks = state.parallelism.get("keyed_sum").copied().unwrap_or(0);
        parts.push(state);
        from.push((d, sinks));
    }
    let (processes, index) = (a.processes, a.index);
    let state = lockgate::storage::RestoredState::merge(parts, move |j, operator| {
        operator != "sink" || j as u32 % processes == index
    });
    Ok(RestorePlan::Merged {
        dir,
        from,
        old_processes,
        state,
    })
}
