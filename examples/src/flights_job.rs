//! The `lockgate flights` job on the engine: two CSV sources, an
//! event-time enrichment join, a tumbling daily window and a keyed
//! aggregate, written exactly once through the transactional file sink.
//!
//! ```text
//! flights (CsvSource) ─┐ connect, key_by hash(origin, time_hour)
//! weather (CsvSource) ─┴─> enrich (KeyedCoProcessOperator<EnrichJoin>, p)
//!        key_by hash(origin) ─> aggregate (p), split in the same task:
//!            daily_window:      tumbling 24 h event-time window per origin
//!                               ─> daily_out (transactional parts)
//!            visibility_window: global window per (origin, bucket)
//!                               ─> visibility_out (transactional parts)
//! ```
//!
//! Rows go into `DIR/parts/daily` and `DIR/parts/by_visibility` as
//! transactional part files (committed per checkpoint); when the job has
//! ended, [`read_committed_rows`] reads the committed parts back and
//! [`crate::flights::write_outputs`] writes `DIR/daily.csv` and
//! `DIR/by_visibility.csv`, sorted, with LF line endings.
//!
//! The part files hold one row per line: `origin,day,departed,cancelled,
//! dep_delay_sum` (daily; `day` = days since 1970-01-01) and
//! `origin,bucket,departed,cancelled,dep_delay_sum` (by visibility), so
//! the final files are rendered from exact integers.

use crate::flights::{
    utc_day, write_outputs, BadRows, ByVisibilityRow, CsvRecordReader, DailyRow, DelayStats,
    EnrichedFlight, Flight, FlightsError, Origin, Visibility, Weather, BY_VISIBILITY_FILE,
    DAILY_FILE, MS_PER_DAY,
};
use lockgate::TwoPhaseCommitSink;
use lockgate::{testing::FailurePlan, JobBuilder, JobConfig, JobError, JobMetrics};
use lockgate_operators::co_process::KeyedCoProcessOperator;
use lockgate_operators::csv_source::{CsvSource, CsvSourceProbe};
use lockgate_operators::file_sink::{read_committed, Formatter, TransactionalFileSink};
use lockgate_operators::join::{EnrichJoin, JoinCounts};
use lockgate_operators::window::{AggregateFunction, WindowAssigner, WindowOperator, WindowOutput};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The job's name (in checkpoint metadata).
pub const JOB_NAME: &str = "flights";
/// The folder, under the output folder, of the part files.
pub const PARTS_DIR: &str = "parts";

/// What the job reads and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlightsJobSpec {
    /// `flights.csv` (plain or gzip).
    pub flights: PathBuf,
    /// `weather.csv` (plain or gzip).
    pub weather: PathBuf,
    /// The output folder.
    pub out_dir: PathBuf,
    /// Subtasks of the keyed operators (the join and the aggregates); the
    /// sources have one each.
    pub parallelism: usize,
    /// The watermarks' out-of-orderness bound, ms.
    pub max_out_of_orderness_ms: i64,
    /// What to do with malformed rows.
    pub bad_rows: BadRows,
}

impl FlightsJobSpec {
    /// `DIR/parts/daily`.
    pub fn daily_parts(&self) -> PathBuf {
        self.out_dir.join(PARTS_DIR).join("daily")
    }

    /// `DIR/parts/by_visibility`.
    pub fn by_visibility_parts(&self) -> PathBuf {
        self.out_dir.join(PARTS_DIR).join("by_visibility")
    }

    /// The job's configuration as recorded in checkpoints: a restore from a
    /// checkpoint of another configuration is refused by the engine. The
    /// parallelism is not part of it: a restore at another one is a
    /// rescale (the engine redistributes the join's and the windows' keyed
    /// state by key group, and the sinks' pending parts).
    /// The output folder is part of it (made absolute when it exists):
    /// the committed parts a restore goes on with live there.
    pub fn app_config(&self) -> serde_json::Value {
        let out = std::fs::canonicalize(&self.out_dir).unwrap_or_else(|_| self.out_dir.clone());
        serde_json::json!({
            "out": out.display().to_string(),
            "flights": self.flights.display().to_string(),
            "weather": self.weather.display().to_string(),
            "max_out_of_orderness_ms": self.max_out_of_orderness_ms,
            "bad_rows": format!("{:?}", self.bad_rows),
        })
    }
}

/// What the job's operators report to the application (see
/// [`FlightsProbes::summary`]). Every count is from checkpointed state, so
/// it is exact after restarts.
#[derive(Clone, Debug)]
pub struct FlightsProbes {
    /// The flights source.
    pub flights: Arc<CsvSourceProbe>,
    /// The weather source.
    pub weather: Arc<CsvSourceProbe>,
    /// Per join subtask.
    pub join: Vec<Arc<Mutex<JoinCounts>>>,
    /// Late records per daily-window subtask.
    pub daily_late: Vec<Arc<AtomicU64>>,
}

/// The counts of a finished run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlightsSummary {
    /// Flight records emitted by the source.
    pub flights_read: u64,
    /// Malformed flight rows skipped.
    pub flights_skipped: u64,
    /// Weather records emitted by the source.
    pub weather_read: u64,
    /// Malformed weather rows skipped.
    pub weather_skipped: u64,
    /// The join's counters, summed over subtasks.
    pub join: JoinCounts,
    /// Records the daily window found late.
    pub daily_late: u64,
}

impl FlightsSummary {
    /// All late records: late flights and weather rows at the join, and
    /// late records at the daily window.
    pub fn late_records(&self) -> u64 {
        self.join.late_facts + self.join.late_rows + self.daily_late
    }
}

impl FlightsProbes {
    /// The counts now.
    pub fn summary(&self) -> FlightsSummary {
        let mut join = JoinCounts::default();
        for j in &self.join {
            if let Ok(c) = j.lock() {
                join.late_facts += c.late_facts;
                join.late_rows += c.late_rows;
                join.unmatched += c.unmatched;
                join.duplicate_rows += c.duplicate_rows;
            }
        }
        FlightsSummary {
            flights_read: self.flights.records(),
            flights_skipped: self.flights.skipped(),
            weather_read: self.weather.records(),
            weather_skipped: self.weather.skipped(),
            join,
            daily_late: self
                .daily_late
                .iter()
                .map(|s| s.load(Ordering::Relaxed))
                .sum(),
        }
    }

    /// The first input error of either source (file, line, reason).
    pub fn input_error(&self) -> Option<String> {
        self.flights.error().or_else(|| self.weather.error())
    }
}

/// SplitMix64's finalizer (Steele, Lea, Flood 2014): spreads small keys
/// over all 64 bits before the engine's hash partitioning.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The partitioning hash of an airport code.
pub fn origin_hash(o: &Origin) -> u64 {
    let mut b = [0u8; 8];
    let s = o.as_str().as_bytes();
    b[..s.len()].copy_from_slice(s);
    mix(u64::from_le_bytes(b))
}

/// The partitioning hash of an (airport, event time) pair.
pub fn origin_time_hash(o: &Origin, t_ms: i64) -> u64 {
    mix(origin_hash(o) ^ t_ms as u64)
}

/// The departure-delay aggregate of a group of enriched flights.
#[derive(Clone, Copy, Debug, Default)]
pub struct DelayAggregate;

impl AggregateFunction<EnrichedFlight> for DelayAggregate {
    type Acc = DelayStats;
    type Out = DelayStats;
    fn create(&self) -> DelayStats {
        DelayStats::default()
    }
    fn add(&self, acc: &mut DelayStats, e: &EnrichedFlight) {
        acc.add(e.flight.dep_delay);
    }
    fn result(&self, acc: &DelayStats) -> DelayStats {
        *acc
    }
}

type DailyOut = WindowOutput<Origin, DelayStats, EnrichedFlight>;
type ByVisOut = WindowOutput<(Origin, Visibility), DelayStats, EnrichedFlight>;

/// Checks that both inputs open and have the needed columns (reads their
/// headers only), so that such errors are reported before the job starts.
///
/// # Errors
/// The reader's error: a missing file, an empty file, a missing or
/// duplicated column.
pub fn check_inputs(spec: &FlightsJobSpec) -> Result<(), FlightsError> {
    CsvRecordReader::<Flight>::open(&spec.flights, spec.bad_rows)?;
    CsvRecordReader::<Weather>::open(&spec.weather, spec.bad_rows)?;
    Ok(())
}

fn daily_line(r: &DailyRow, b: &mut Vec<u8>) {
    b.extend_from_slice(
        format!(
            "{},{},{},{},{}\n",
            r.origin, r.day, r.stats.departed, r.stats.cancelled, r.stats.dep_delay_sum_min
        )
        .as_bytes(),
    );
}

fn by_visibility_line(r: &ByVisibilityRow, b: &mut Vec<u8>) {
    b.extend_from_slice(
        format!(
            "{},{},{},{},{}\n",
            r.origin,
            r.visibility.name(),
            r.stats.departed,
            r.stats.cancelled,
            r.stats.dep_delay_sum_min
        )
        .as_bytes(),
    );
}

/// Adds the job's operators to `job` and returns its probes. The part
/// folders must exist (see [`prepare_output`]).
pub fn build(job: &JobBuilder, spec: &FlightsJobSpec) -> FlightsProbes {
    let p = spec.parallelism.max(1);
    let bound = spec.max_out_of_orderness_ms;
    let probes = FlightsProbes {
        flights: CsvSourceProbe::new(),
        weather: CsvSourceProbe::new(),
        join: (0..p)
            .map(|_| Arc::new(Mutex::new(JoinCounts::default())))
            .collect(),
        daily_late: (0..p).map(|_| Arc::new(AtomicU64::new(0))).collect(),
    };

    let (fpath, fprobe, bad) = (spec.flights.clone(), probes.flights.clone(), spec.bad_rows);
    let flights = job.source("flights", 1, move |_| {
        CsvSource::<Flight>::new(
            fpath.clone(),
            bad,
            |f| f.time_hour_ms,
            bound,
            fprobe.clone(),
        )
    });
    let (wpath, wprobe) = (spec.weather.clone(), probes.weather.clone());
    let weather = job.source("weather", 1, move |_| {
        CsvSource::<Weather>::new(
            wpath.clone(),
            bad,
            |w| w.time_hour_ms,
            bound,
            wprobe.clone(),
        )
    });

    let join_slots = probes.join.clone();
    let enriched = flights
        .connect(weather)
        .key_by(
            |f: &Flight| origin_time_hash(&f.origin, f.time_hour_ms),
            |w: &Weather| origin_time_hash(&w.origin, w.time_hour_ms),
        )
        .task("enrich", p)
        .process("enrich", move |i| {
            KeyedCoProcessOperator::new(
                EnrichJoin::new(
                    |f: &Flight| f.origin,
                    |f: &Flight| f.time_hour_ms,
                    |w: &Weather| w.origin,
                    |w: &Weather| w.time_hour_ms,
                    |f: Flight, w: Option<&Weather>| EnrichedFlight {
                        flight: f,
                        visibility: w
                            .map_or(Visibility::Unknown, |w| Visibility::from_visib(w.visib)),
                    },
                )
                .with_counts_slot(join_slots[i.index].clone()),
            )
            // Its state is keyed as its input is routed: rescalable.
            .with_routing_key(|(o, t): &(Origin, i64)| origin_time_hash(o, *t))
        });

    let late_slots = probes.daily_late.clone();
    // One task per origin partition feeds both aggregations (a split of
    // the stream: every enriched flight goes to both chains).
    let (daily, by_vis) = enriched
        .key_by(|e: &EnrichedFlight| origin_hash(&e.flight.origin))
        .task("aggregate", p)
        .map(|e: EnrichedFlight| e)
        .split();
    let (daily_dir, vis_dir) = (spec.daily_parts(), spec.by_visibility_parts());
    daily
        .process("daily_window", move |i| {
            WindowOperator::new(
                // 24-hour windows aligned to the epoch start at UTC
                // midnight (epoch time has no leap seconds).
                WindowAssigner::Tumbling {
                    size_ms: MS_PER_DAY,
                    offset_ms: 0,
                },
                DelayAggregate,
                |e: &EnrichedFlight| e.flight.origin,
                |e: &EnrichedFlight| e.flight.time_hour_ms,
            )
            .with_late_count_slot(late_slots[i.index].clone())
            .with_routing_key(origin_hash)
        })
        .flat_map(|o: DailyOut| match o {
            WindowOutput::Fired(r) => Some(DailyRow {
                origin: r.key,
                day: utc_day(r.window.start),
                stats: r.value,
            }),
            // Late records are counted by the window (no side output).
            WindowOutput::Late(_) => None,
        })
        .sink("daily_out", move |i| {
            let fmt: Formatter<DailyRow> = Box::new(daily_line);
            TwoPhaseCommitSink::new(
                TransactionalFileSink::new(daily_dir.clone(), i.index, fmt)
                    .expect("the parts folder is created before the job starts"),
            )
        });
    by_vis
        .process("visibility_window", |_| {
            WindowOperator::new(
                WindowAssigner::Global,
                DelayAggregate,
                |e: &EnrichedFlight| (e.flight.origin, e.visibility),
                |e: &EnrichedFlight| e.flight.time_hour_ms,
            )
            .with_routing_key(|(o, _): &(Origin, Visibility)| origin_hash(o))
        })
        .flat_map(|o: ByVisOut| match o {
            WindowOutput::Fired(r) => Some(ByVisibilityRow {
                origin: r.key.0,
                visibility: r.key.1,
                stats: r.value,
            }),
            WindowOutput::Late(_) => None,
        })
        .sink("visibility_out", move |i| {
            let fmt: Formatter<ByVisibilityRow> = Box::new(by_visibility_line);
            TwoPhaseCommitSink::new(
                TransactionalFileSink::new(vis_dir.clone(), i.index, fmt)
                    .expect("the parts folder is created before the job starts"),
            )
        });
    probes
}

/// Creates the part folders. Unless `keep` (a restore, which goes on with
/// the parts of the checkpoint it restores), parts of earlier runs are
/// removed first.
///
/// # Errors
/// [`FlightsError::Write`] naming the folder.
pub fn prepare_output(spec: &FlightsJobSpec, keep: bool) -> Result<(), FlightsError> {
    let parts = spec.out_dir.join(PARTS_DIR);
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FlightsError::Write { path, source }
    };
    if !keep && parts.exists() {
        std::fs::remove_dir_all(&parts).map_err(err(&parts))?;
    }
    if keep {
        // A restore goes on with the parts its checkpoint committed: with
        // their folders gone it would write a partial output and call it
        // done. (A single part file deleted is not detected: the sink's
        // state does not list what it committed.)
        for d in [spec.daily_parts(), spec.by_visibility_parts()] {
            if !d.is_dir() {
                return Err(FlightsError::Write {
                    path: d.clone(),
                    source: std::io::Error::other(
                        "missing: a restore goes on with the parts its checkpoint committed here",
                    ),
                });
            }
        }
    }
    for d in [spec.daily_parts(), spec.by_visibility_parts()] {
        std::fs::create_dir_all(&d).map_err(err(&d))?;
    }
    Ok(())
}

/// Removes the part folders that hold nothing (`remove_dir` removes only
/// empty folders), deepest first.
fn remove_empty_parts(spec: &FlightsJobSpec) {
    for d in [
        spec.daily_parts(),
        spec.by_visibility_parts(),
        spec.out_dir.join(PARTS_DIR),
    ] {
        let _ = std::fs::remove_dir(d);
    }
}

/// The rows of the committed parts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommittedRows {
    /// `by_visibility.csv` rows (one per key).
    pub by_visibility: Vec<ByVisibilityRow>,
    /// `daily.csv` rows (one per key).
    pub daily: Vec<DailyRow>,
    /// Identical rows found more than once and kept once (possible only
    /// after a restore with at-least-once checkpoints).
    pub duplicates: u64,
}

fn parse_stats(fields: &[&str]) -> Option<DelayStats> {
    Some(DelayStats {
        departed: fields.first()?.parse().ok()?,
        cancelled: fields.get(1)?.parse().ok()?,
        dep_delay_sum_min: fields.get(2)?.parse().ok()?,
    })
}

fn parse_parts<K: std::hash::Hash + Eq, R: PartialEq>(
    dir: &Path,
    parse: impl Fn(&[&str]) -> Option<(K, R)>,
    duplicates: &mut u64,
) -> Result<Vec<R>, String> {
    let bytes = read_committed(dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{}: committed parts are not UTF-8", dir.display()))?;
    let mut rows: HashMap<K, R> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        let (k, r) = parse(&fields).ok_or_else(|| {
            format!(
                "{}: committed row {} is malformed: `{line}`",
                dir.display(),
                n + 1
            )
        })?;
        match rows.get(&k) {
            Some(old) if *old == r => *duplicates += 1,
            Some(_) => {
                return Err(format!(
                    "{}: two different committed rows for one key (`{line}`)",
                    dir.display()
                ))
            }
            None => {
                rows.insert(k, r);
            }
        }
    }
    Ok(rows.into_values().collect())
}

/// Reads the rows of the committed parts of a finished run.
///
/// # Errors
/// A message naming the folder when a part cannot be read, a row is
/// malformed, or two different rows have the same key.
pub fn read_committed_rows(spec: &FlightsJobSpec) -> Result<CommittedRows, String> {
    let mut duplicates = 0;
    let daily = parse_parts(
        &spec.daily_parts(),
        |f| {
            let origin = Origin::new(f.first()?)?;
            let day: i64 = f.get(1)?.parse().ok()?;
            let stats = parse_stats(f.get(2..)?)?;
            (f.len() == 5).then_some(((origin, day), DailyRow { origin, day, stats }))
        },
        &mut duplicates,
    )?;
    let by_visibility = parse_parts(
        &spec.by_visibility_parts(),
        |f| {
            let origin = Origin::new(f.first()?)?;
            let name = *f.get(1)?;
            let visibility = Visibility::ALL.into_iter().find(|v| v.name() == name)?;
            let stats = parse_stats(f.get(2..)?)?;
            (f.len() == 5).then_some((
                (origin, visibility),
                ByVisibilityRow {
                    origin,
                    visibility,
                    stats,
                },
            ))
        },
        &mut duplicates,
    )?;
    Ok(CommittedRows {
        by_visibility,
        daily,
        duplicates,
    })
}

/// Why a run of the job failed.
#[derive(Debug, thiserror::Error)]
pub enum FlightsJobError {
    /// Bad input: a missing file, a bad header, a malformed row (with
    /// [`BadRows::Fail`]); the message names the file, line and reason.
    #[error("{0}")]
    Input(String),
    /// The engine failed (no restart left, a checkpoint storage or restore
    /// problem, an invalid configuration).
    #[error("{0}")]
    Job(#[from] JobError),
    /// The outputs could not be read back or written.
    #[error("{0}")]
    Output(String),
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct FlightsRun {
    /// The operators' counts.
    pub summary: FlightsSummary,
    /// The engine's metrics (checkpoints, restarts).
    pub metrics: JobMetrics,
    /// The rows written.
    pub rows: CommittedRows,
    /// `DIR/by_visibility.csv`.
    pub by_visibility_path: PathBuf,
    /// `DIR/daily.csv`.
    pub daily_path: PathBuf,
}

/// Seeded failures for `--inject-failures` (the load generator's rule):
/// `count` failures over all tasks, each after a record count in
/// `1..=max_records` (see [`FailurePlan::seeded`]).
pub fn seeded_failures(
    spec: &FlightsJobSpec,
    seed: u64,
    count: usize,
    max_records: u64,
) -> FailurePlan {
    if count == 0 {
        return FailurePlan::none();
    }
    let probe = JobBuilder::new(JOB_NAME, JobConfig::default());
    let _ = build(&probe, spec);
    FailurePlan::seeded(seed, count, probe.task_names().len(), max_records.max(1))
}

/// The job's task names in start order (the indices of a
/// [`FailurePlan`]).
pub fn task_names(spec: &FlightsJobSpec) -> Vec<String> {
    let probe = JobBuilder::new(JOB_NAME, JobConfig::default());
    let _ = build(&probe, spec);
    probe.task_names()
}

/// Runs the whole job: checks the inputs, prepares the output folder
/// (keeping its parts on a restore: `config.checkpoint.restore_mode`
/// required, or if-present on a folder that holds a checkpoint), runs the job with
/// `failures` injected, reads the committed parts and writes the two
/// files.
///
/// # Errors
/// [`FlightsJobError::Input`] for bad input, [`FlightsJobError::Job`] when
/// the engine failed for another reason, [`FlightsJobError::Output`] when
/// the outputs cannot be read or written.
pub fn run(
    spec: &FlightsJobSpec,
    config: JobConfig,
    failures: FailurePlan,
) -> Result<FlightsRun, FlightsJobError> {
    check_inputs(spec).map_err(|e| FlightsJobError::Input(e.to_string()))?;
    if spec.parallelism == 0 {
        return Err(FlightsJobError::Job(JobError::Config(
            "parallelism must be at least 1".into(),
        )));
    }
    let mut config = config;
    if config.checkpoint.restore_mode == lockgate::RestoreMode::IfPresent {
        // The output folder is kept only on a restore: decide it here.
        let present = match &config.checkpoint.dir {
            Some(dir) if dir.exists() => lockgate::storage::LocalDirStorage::open(dir)
                .and_then(|s| lockgate::storage::CheckpointStorage::traces(&s))
                .map(|t| !t.is_empty())
                .map_err(|e| FlightsJobError::Job(JobError::Storage(e)))?,
            _ => false,
        };
        config.checkpoint.restore_mode = present.into();
    }
    let restore = config.checkpoint.effective_restore_mode() == lockgate::RestoreMode::Required;
    prepare_output(spec, restore).map_err(|e| {
        // On a restore, a missing part folder is bad input (the output
        // folder is not the checkpoint's), not a failed write.
        if restore {
            FlightsJobError::Input(e.to_string())
        } else {
            FlightsJobError::Output(e.to_string())
        }
    })?;
    let mut app = spec.app_config();
    if config.checkpoint.uses_priority_lanes() {
        // Its checkpoints may hold channel state, which only a job with
        // priority lanes replays: recorded, so that a restore takes it.
        app["checkpoint"] = serde_json::json!({
            "mode": config.checkpoint.mode.as_str(),
            "aligned_checkpoint_timeout_ms": config
                .checkpoint
                .aligned_checkpoint_timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        });
    }
    let job = JobBuilder::new(JOB_NAME, config)
        .with_failures(failures)
        .with_app_config(app);
    let probes = build(&job, spec);
    let result = job.start().and_then(|h| h.wait());
    let metrics = match result {
        Ok(m) => m,
        Err(e) => {
            // A fresh run refused or failed before it committed anything
            // leaves no empty part folders behind. A restore's folders
            // stay: they are the checkpoint's, even empty, and the next
            // restore needs them.
            if !restore {
                remove_empty_parts(spec);
            }
            return Err(match probes.input_error() {
                Some(msg) => FlightsJobError::Input(msg),
                None => FlightsJobError::Job(e),
            });
        }
    };
    let rows = read_committed_rows(spec).map_err(FlightsJobError::Output)?;
    write_outputs(&spec.out_dir, &rows.by_visibility, &rows.daily)
        .map_err(|e| FlightsJobError::Output(e.to_string()))?;
    Ok(FlightsRun {
        summary: probes.summary(),
        metrics,
        rows,
        by_visibility_path: spec.out_dir.join(BY_VISIBILITY_FILE),
        daily_path: spec.out_dir.join(DAILY_FILE),
    })
}
