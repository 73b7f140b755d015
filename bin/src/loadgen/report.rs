//! The saved form of a run (`--json`), built from the reference job's
//! report, and its human summary (also used by `lockgate report show`).

use lockgate::stats::CheckpointStatus;
use lockgate::stats::SubtaskCheckpointStats;
use lockgate_workloads::latency::{histogram_to_base64, Percentiles};
use lockgate_workloads::refjob::RefJobReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The version of the JSON layout below; bumped on incompatible changes.
/// Version 2: each checkpoint has `subtasks` (sync/async parts, sizes)
/// instead of `alignments`, and byte counts; `lockgate report` reads 1 and 2.
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// The oldest version `lockgate report` reads.
pub(crate) const OLDEST_SCHEMA_VERSION: u32 = 1;

/// Where the run ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Environment {
    /// Cores available to the process.
    pub cores: usize,
    /// `model name` from /proc/cpuinfo ("unknown" elsewhere).
    pub cpu_model: String,
    /// `rustc --version` at build time.
    pub rustc: String,
    /// `git rev-parse --short HEAD` at build time.
    pub git_commit: String,
    /// The machine's host name (`/proc/sys/kernel/hostname`, else
    /// `$HOSTNAME`, else "unknown").
    #[serde(default)]
    pub host: String,
}

impl Environment {
    /// This machine and this binary.
    pub(crate) fn detect() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Environment {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            rustc: env!("LOCKGATE_RUSTC").to_string(),
            git_commit: env!("LOCKGATE_GIT_COMMIT").to_string(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "unknown".into()),
        }
    }
}

pub(crate) use lockgate::stats::peak_rss_bytes;

/// Latency percentiles in ns (the JSON's `latency_ns` object).
pub(crate) type LatencyNs = Percentiles;

/// p50, p99 and max over checkpoints, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spread {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

impl Spread {
    /// The engine's summary of a figure over the whole run (quantiles
    /// within 0.1 %).
    fn of_summary(d: &lockgate::stats::Distribution) -> Self {
        Spread {
            p50: d.quantile(0.5),
            p99: d.quantile(0.99),
            max: d.max(),
        }
    }
}

/// One task's alignment for one checkpoint (schema version 1 only).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct TaskAlignmentJson {
    /// The task, e.g. `keyed_sum[1]`.
    pub task: String,
    /// First to last barrier, ns.
    pub alignment_ns: u64,
    /// Most bytes buffered during the alignment.
    pub buffered_bytes: u64,
}

/// One checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct CheckpointJson {
    /// Its id.
    pub id: u64,
    /// `completed`, `aborted` or `pending`.
    pub status: String,
    /// The abort reason (`subsumed`, `timeout`, ...).
    pub reason: Option<String>,
    /// `checkpoint` or `savepoint`; `final` marks the one after the
    /// sources ended.
    pub kind: String,
    /// Trigger time, ns on the engine's monotonic clock.
    pub trigger_ns: u64,
    /// End to end: trigger until every part and the metadata are durable
    /// (or the abort), ns. (Version 1: trigger to the last acknowledgement.)
    pub duration_ns: u64,
    /// The largest start delay of its subtasks, ns. (Version 1: trigger to
    /// the barrier leaving the last source.)
    pub start_delay_ns: u64,
    /// Version 1 only: per task with inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alignments: Vec<TaskAlignmentJson>,
    /// Version 2: every subtask that acknowledged, as the engine reports
    /// it (times in ns, sizes in bytes, `task` as `keyed_sum[1]`).
    #[serde(default)]
    pub subtasks: Vec<SubtaskCheckpointStats>,
    /// Size of a full encoding of the state, all subtasks, bytes.
    pub state_bytes: u64,
    /// Bytes written for it, all parts and the metadata.
    #[serde(default)]
    pub checkpointed_bytes: u64,
    /// In-flight records persisted (unaligned checkpoints), bytes.
    #[serde(default)]
    pub persisted_bytes: u64,
    /// Some part holds only changes.
    #[serde(default)]
    pub incremental: bool,
    /// Unaligned.
    #[serde(default)]
    pub unaligned: bool,
}

/// The checkpoint table.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct CheckpointsJson {
    /// Completed checkpoints.
    pub completed: u64,
    /// Aborted checkpoints.
    pub aborted: u64,
    /// Aborted, by reason.
    pub aborted_by_reason: BTreeMap<String, u64>,
    /// Over completed checkpoints, each taking its slowest task.
    pub alignment_ns: Spread,
    /// End-to-end durations of completed checkpoints.
    pub duration_ns: Spread,
    /// Most bytes any task buffered in any alignment.
    pub buffered_bytes_max: u64,
    /// State size of the last completed checkpoint, bytes.
    pub state_bytes_last: u64,
    /// Over the subtasks of completed checkpoints: the synchronous part, ns.
    #[serde(default)]
    pub sync_ns: Spread,
    /// Over the subtasks of completed checkpoints: the asynchronous part, ns.
    #[serde(default)]
    pub async_ns: Spread,
    /// Over completed checkpoints: bytes written per checkpoint.
    #[serde(default)]
    pub checkpointed_bytes: Spread,
    /// Over completed checkpoints: in-flight bytes persisted as channel
    /// state per checkpoint (unaligned checkpoints; 0 otherwise).
    #[serde(default)]
    pub persisted_bytes: Spread,
    /// Completed checkpoints taken unaligned (all of them with
    /// `--checkpoint unaligned`; with an aligned-checkpoint timeout, those
    /// whose alignment timed out).
    #[serde(default)]
    pub unaligned_completed: u64,
    /// The last checkpoints (the engine's `checkpoint.history`, 1,000 by
    /// default), oldest first; the counts and spreads above cover every
    /// checkpoint of the run.
    pub list: Vec<CheckpointJson>,
    /// True when the run had more checkpoints than `list` holds.
    #[serde(default)]
    pub list_truncated: bool,
}

impl CheckpointsJson {
    /// Writes the report's checkpoint lines (counts, alignment, end-to-end
    /// duration, sync and async parts, bytes) for a run in checkpoint
    /// `mode` (`exactly-once`, `at-least-once` or `unaligned`) into `s`: the summary
    /// `loadgen` and `kafka run` print.
    pub(crate) fn write_summary(&self, s: &mut String, mode: &str) {
        let cp = self;
        // `1 aborted (timeout)`; with several reasons, a count each.
        let reasons: Vec<String> = if cp.aborted_by_reason.len() == 1 {
            cp.aborted_by_reason.keys().cloned().collect()
        } else {
            cp.aborted_by_reason
                .iter()
                .map(|(r, n)| format!("{n} {r}"))
                .collect()
        };
        let _ = writeln!(
            s,
            "  checkpoints: {} completed, {} aborted{} (whole run)",
            cp.completed,
            cp.aborted,
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            }
        );
        if cp.completed == 0 {
            let _ = writeln!(s, "    none completed: no durations or sizes to show");
        } else if mode == "at-least-once" {
            // As Flink's BarrierTracker: barriers are counted, no
            // channel is blocked, so there is no alignment.
            let _ = writeln!(
                s,
                "    alignment   none (at-least-once: barriers are counted, channels never blocked)"
            );
        } else if mode == "unaligned" {
            let _ = writeln!(
                s,
                "    alignment   none (unaligned: barriers overtake the records in flight, channels never blocked)"
            );
        } else {
            let (v, unit) = in_unit(
                &[
                    cp.alignment_ns.p50,
                    cp.alignment_ns.p99,
                    cp.alignment_ns.max,
                ],
                Unit::Ms,
            );
            let _ = writeln!(
                s,
                "    alignment   p50 {:>8}  p99 {:>8}  max {:>8} {unit}",
                v[0], v[1], v[2]
            );
            if self.unaligned_completed > 0 {
                let _ = writeln!(
                    s,
                    "    {} of {} completed checkpoints switched to unaligned (the aligned-checkpoint timeout passed; the final checkpoint and savepoints stay aligned)",
                    self.unaligned_completed, cp.completed
                );
            }
        }
        if cp.completed > 0 {
            let (v, unit) = in_unit(
                &[cp.duration_ns.p50, cp.duration_ns.p99, cp.duration_ns.max],
                Unit::Ms,
            );
            let _ = writeln!(
                s,
                "    end-to-end  p50 {:>8}  p99 {:>8}  max {:>8} {unit}",
                v[0], v[1], v[2]
            );
            let v2 = cp.sync_ns != Spread::default() || cp.async_ns != Spread::default();
            if v2 {
                // Two lines: the parts differ by orders of magnitude.
                for (name, part, unit) in [
                    ("sync part ", cp.sync_ns, Unit::Us),
                    ("async part", cp.async_ns, Unit::Ms),
                ] {
                    let (v, unit) = in_unit(&[part.p50, part.p99, part.max], unit);
                    let _ = writeln!(
                        s,
                        "    {name}  p50 {:>8}  p99 {:>8}  max {:>8} {unit} (per subtask)",
                        v[0], v[1], v[2]
                    );
                }
                let _ = writeln!(
                    s,
                    "    written per checkpoint p50 {} B (p99 {} B; as stored, metadata and padding included, to 3 significant digits), full state at the last checkpoint {} B; max buffered in alignment {} B",
                    cp.checkpointed_bytes.p50,
                    cp.checkpointed_bytes.p99,
                    cp.state_bytes_last,
                    cp.buffered_bytes_max
                );
                if mode == "unaligned" || self.unaligned_completed > 0 {
                    let _ = writeln!(
                        s,
                        "    persisted in flight per checkpoint p50 {} B (p99 {} B, max {} B; channel state, not in the bytes written above)",
                        cp.persisted_bytes.p50, cp.persisted_bytes.p99, cp.persisted_bytes.max
                    );
                }
            } else {
                let _ = writeln!(
                    s,
                    "    max buffered in alignment {} B, last state size {} B",
                    cp.buffered_bytes_max, cp.state_bytes_last
                );
            }
        }
    }

    pub(crate) fn from_metrics(m: &lockgate::JobMetrics) -> Self {
        let counts = &m.checkpoint_counts;
        let sum = &m.checkpoint_summary;
        let mut c = CheckpointsJson {
            completed: counts.completed,
            aborted: counts.aborted,
            aborted_by_reason: counts
                .aborted_by_reason
                .iter()
                .map(|(r, n)| (r.as_str().to_string(), *n))
                .collect(),
            alignment_ns: Spread::of_summary(&sum.alignment_ns),
            duration_ns: Spread::of_summary(&sum.duration_ns),
            buffered_bytes_max: sum.buffered_bytes.max(),
            state_bytes_last: m
                .last_completed_checkpoint
                .as_ref()
                .map_or(0, |l| l.state_bytes),
            sync_ns: Spread::of_summary(&sum.sync_ns),
            async_ns: Spread::of_summary(&sum.async_ns),
            checkpointed_bytes: Spread::of_summary(&sum.checkpointed_bytes),
            persisted_bytes: Spread::of_summary(&sum.persisted_bytes),
            unaligned_completed: counts.unaligned_completed,
            list_truncated: counts.triggered > m.checkpoints.len() as u64,
            list: Vec::new(),
        };
        for s in &m.checkpoints {
            let (status, reason) = match s.status {
                CheckpointStatus::Completed => ("completed", None),
                CheckpointStatus::Aborted(r) => ("aborted", Some(r.as_str().to_string())),
                CheckpointStatus::Pending => ("pending", None),
            };
            let kind = match s.kind {
                lockgate::SnapshotKind::Savepoint => "savepoint",
                _ => "checkpoint",
            };
            c.list.push(CheckpointJson {
                id: s.id.get(),
                status: status.into(),
                reason,
                kind: if s.is_final {
                    format!("{kind} (final)")
                } else {
                    kind.into()
                },
                trigger_ns: s.trigger_ns,
                duration_ns: s.duration_ns,
                start_delay_ns: s.start_delay_ns,
                alignments: Vec::new(),
                subtasks: s.subtasks.clone(),
                state_bytes: s.state_bytes,
                checkpointed_bytes: s.checkpointed_bytes,
                persisted_bytes: s.persisted_bytes,
                incremental: s.incremental,
                unaligned: s.unaligned,
            });
        }
        c
    }
}

/// The latency timeline of a run (W2/W3): p50, p99 and max per interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct TimelineJson {
    /// Where interval 0 starts, ns, on the clock of `trigger_ns`.
    pub start_ns: u64,
    /// The intervals' length, ns (100 ms).
    pub interval_ns: u64,
    /// One per interval from the start, empty ones included (count 0).
    pub points: Vec<lockgate_workloads::charts::TimelinePoint>,
    /// Every checkpoint of the run as a band, trigger to end, on the clock
    /// of `trigger_ns` (bands under 1 ms apart merged); absent in files of
    /// older builds, whose bands come from `checkpoints.list`.
    #[serde(default)]
    pub checkpoint_bands: Option<lockgate_workloads::refjob::CheckpointBands>,
    /// `--output committed`: the committed latency per interval, as
    /// `points` (by intended send time, as they are).
    #[serde(default)]
    pub committed_points: Vec<lockgate_workloads::charts::TimelinePoint>,
}

/// What a run with committed output committed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct CommittedJson {
    /// Records committed (each once).
    pub records: u64,
    /// Records committed twice (at-least-once only).
    pub duplicated: u64,
    /// Records neither committed nor received.
    pub lost: u64,
    /// Records received and never committed (0 after the final checkpoint).
    pub uncommitted: u64,
    /// Records whose commit a restore retracted (committed again after).
    pub retracted: u64,
}

/// A task failure of a run, as the JSON lists it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct FailureJson {
    /// The failed task, e.g. `keyed_sum[1]`.
    pub task: String,
    /// The failure's cause in words.
    pub cause: String,
    /// When the job learned of it, ns, on the clock of
    /// `checkpoints.list[].trigger_ns`.
    pub at_ns: u64,
    /// From the failure to the first record the sink received after it,
    /// ns (`null`: none was received after it).
    pub recovery_ns: Option<u64>,
    /// The checkpoint id the restart restored (`null`: from the start, or
    /// no restart).
    pub restored_from: Option<u64>,
}

/// A run as saved by `--json` and read by `lockgate report`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct RunReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the run started, RFC 3339 in UTC (e.g.
    /// `2026-12-01T14:03:07.123456789Z`; empty in files of older builds).
    #[serde(default)]
    pub started_at: String,
    /// Machine and build.
    pub environment: Environment,
    /// Every flag's effective value, keyed by flag name with `_`.
    pub config: serde_json::Value,
    /// `W1`, `W2` or `W3`.
    pub workload: String,
    /// Checkpointing as on the command line.
    pub mode: String,
    /// Records in the recorded window (after warm-up).
    pub records: u64,
    /// Length of the recorded window, s.
    pub seconds: f64,
    /// `records / seconds`.
    pub records_per_s: f64,
    /// Cores available.
    pub cores: usize,
    /// Pinning as on the command line.
    pub pinning: String,
    /// Latency from the intended send time, ns.
    pub latency_ns: LatencyNs,
    /// `--output committed`: latency from the intended send time to the
    /// commit (the completion of the first checkpoint whose barrier
    /// followed the record at the sink), ns.
    #[serde(default)]
    pub committed_latency_ns: Option<LatencyNs>,
    /// `--output committed`: what was committed.
    #[serde(default)]
    pub committed: Option<CommittedJson>,
    /// `--ab`: checkpointing on against off inside the run.
    #[serde(default)]
    pub ab: Option<super::ab::AbReport>,
    /// Set when the latency is not a latency test (W1, closed loop).
    pub latency_note: Option<String>,
    /// Checkpoints.
    pub checkpoints: CheckpointsJson,
    /// Failures that struck.
    pub failures_injected: u64,
    /// Failures planned (`--inject-failures`).
    pub failures_planned: u64,
    /// Restarts from a checkpoint.
    pub recoveries: u64,
    /// Every task failure, oldest first, with its recovery time.
    #[serde(default)]
    pub failures: Vec<FailureJson>,
    /// The run's first emission, ns, on the clock of `trigger_ns` and
    /// `at_ns` (0: nothing emitted).
    #[serde(default)]
    pub started_ns: u64,
    /// When the job had ended, ns on the same clock (0 in files of older
    /// builds).
    #[serde(default)]
    pub ended_ns: u64,
    /// The error the job ended with (no restart left, too many checkpoint
    /// failures, ...), if it failed.
    #[serde(default)]
    pub job_error: Option<String>,
    /// The latency timeline (empty for W1 and in files of older builds).
    #[serde(default)]
    pub timeline: TimelineJson,
    /// With `--restore`: the checkpoint id restored.
    #[serde(default)]
    pub restored_checkpoint: Option<u64>,
    /// With `--restore`: the records received before that checkpoint.
    #[serde(default)]
    pub restored_records: Option<u64>,
    /// With `--restore` at another parallelism: the checkpoint's (a
    /// rescale).
    #[serde(default)]
    pub rescaled_from: Option<usize>,
    /// The requested rate, records/s (W2/W3).
    pub requested_rate: Option<u64>,
    /// What the sources emitted per second (replays included).
    pub achieved_rate: f64,
    /// The most a record was sent after its schedule time, ns.
    pub behind_schedule_max_ns: u64,
    /// Records the run emits in total.
    pub total_records: u64,
    /// Records the sink received, replays included.
    pub delivered: u64,
    /// Sequence numbers never received of the records sent (0 for an
    /// interrupted run: see `not_sent`).
    pub lost: u64,
    /// Records never sent: an interrupted run's not received (a stop
    /// drains what is in flight, so a record not received was not sent),
    /// a failed run's that no source generated.
    #[serde(default)]
    pub not_sent: u64,
    /// Records received more than once.
    pub duplicated: u64,
    /// Latency from the actual send time (uncorrected), ns.
    pub latency_uncorrected_ns: LatencyNs,
    /// The closed form's fingerprint.
    pub expected_fingerprint: u64,
    /// The sink's fingerprint.
    pub fingerprint: u64,
    /// The correctness check in words.
    pub check: String,
    /// Peak resident memory, bytes.
    pub peak_rss_bytes: u64,
    /// Per task: records, batches (so the mean batch size of its output
    /// edge), busy, idle and backpressured time.
    #[serde(default)]
    pub tasks: Vec<lockgate::stats::TaskMetricsSnapshot>,
    /// The latency histogram, HdrHistogram V2 compressed, base64.
    pub latency_histogram: String,
    /// `--output committed`: the committed latency histogram, as
    /// `latency_histogram`.
    #[serde(default)]
    pub committed_latency_histogram: Option<String>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// Why the result is not ok.
    pub failure: Option<String>,
    /// The correctness check passed.
    pub ok: bool,
}

impl RunReport {
    /// The saved form of `r`.
    pub(crate) fn new(
        r: &RefJobReport,
        config: serde_json::Value,
        mode: &str,
        pinning: &str,
        started: std::time::SystemTime,
    ) -> anyhow::Result<Self> {
        let env = Environment::detect();
        let paced = r.config.workload.is_paced();
        let failure = r.failure();
        Ok(RunReport {
            schema_version: SCHEMA_VERSION,
            started_at: humantime::format_rfc3339_nanos(started).to_string(),
            cores: env.cores,
            environment: env,
            config,
            workload: r.config.workload.name().into(),
            mode: mode.into(),
            records: r.recorded_records,
            seconds: r.recorded_seconds,
            records_per_s: r.records_per_s(),
            pinning: pinning.into(),
            latency_ns: r.percentiles(),
            latency_note: match r.config.workload {
                lockgate_workloads::workload::Workload::W4 => Some(
                    "overloaded by design (W4): measured from the actual emission time, not a latency test"
                        .into(),
                ),
                _ if !paced => Some(
                    "closed loop: measured from the actual emission time, not a latency test".into(),
                ),
                _ => None,
            },
            checkpoints: CheckpointsJson::from_metrics(&r.metrics),
            failures_injected: r.failures_struck as u64,
            failures_planned: r.failures_planned as u64,
            recoveries: u64::from(r.metrics.restarts),
            failures: r
                .recoveries
                .iter()
                .map(|x| FailureJson {
                    task: x.failure.task.clone(),
                    cause: x.failure.cause.clone(),
                    at_ns: x.failure.at_ns,
                    recovery_ns: x.recovery_ns,
                    restored_from: x.failure.restored_from.map(|c| c.get()),
                })
                .collect(),
            started_ns: r.started_ns,
            ended_ns: r.ended_ns,
            job_error: r.job_error.clone(),
            timeline: TimelineJson {
                start_ns: r.intervals_start_ns,
                interval_ns: r.config.interval_ns,
                points: r
                    .intervals
                    .iter()
                    .enumerate()
                    .map(|(i, h)| {
                        lockgate_workloads::charts::TimelinePoint::of(
                            i,
                            r.config.interval_ns,
                            h,
                        )
                    })
                    .collect(),
                checkpoint_bands: Some(r.checkpoint_bands.clone()),
                committed_points: r
                    .committed
                    .iter()
                    .flat_map(|c| c.intervals.iter().enumerate())
                    .map(|(i, h)| {
                        lockgate_workloads::charts::TimelinePoint::of(
                            i,
                            r.config.interval_ns,
                            h,
                        )
                    })
                    .collect(),
            },
            committed_latency_ns: r
                .committed
                .as_ref()
                .map(|c| lockgate_workloads::latency::Percentiles::from_histogram(&c.latency)),
            ab: None,
            committed: r.committed.as_ref().map(|c| CommittedJson {
                records: c.committed,
                duplicated: c.duplicated,
                lost: c.lost,
                uncommitted: c.uncommitted,
                retracted: c.retracted,
            }),
            restored_checkpoint: r.restored_from.map(|(id, _)| id.get()),
            restored_records: r.restored_from.map(|(_, n)| n),
            rescaled_from: r.rescaled_from,
            requested_rate: paced.then_some(r.config.rate),
            achieved_rate: r.sources.achieved_rate,
            behind_schedule_max_ns: r.sources.max_behind_ns,
            total_records: r.total_records,
            delivered: r.delivered,
            lost: if r.interrupted { 0 } else { r.lost },
            not_sent: if r.interrupted {
                r.lost + r.not_sent
            } else {
                r.not_sent
            },
            duplicated: r.duplicated,
            latency_uncorrected_ns: Percentiles::from_histogram(&r.latency_uncorrected),
            expected_fingerprint: r.check.expected_fingerprint,
            fingerprint: r.check.fingerprint,
            check: if r.interrupted {
                format!(
                    "interrupted: {} of {} records received before the stop, {} not sent, {} duplicated",
                    r.check.distinct,
                    r.total_records,
                    r.lost + r.not_sent,
                    r.duplicated
                )
            } else if r.job_error.is_some() {
                format!(
                    "failed: {} of {} records received before the failure, {} lost, {} not sent, {} duplicated",
                    r.check.distinct, r.total_records, r.lost, r.not_sent, r.duplicated
                )
            } else {
                r.check.to_string()
            },
            peak_rss_bytes: peak_rss_bytes(),
            tasks: r.metrics.tasks.clone(),
            latency_histogram: histogram_to_base64(&r.latency)?,
            committed_latency_histogram: match &r.committed {
                Some(c) => Some(histogram_to_base64(&c.latency)?),
                None => None,
            },
            interrupted: r.interrupted,
            ok: failure.is_none(),
            failure,
        })
    }

    /// True when the sources fell short of the requested rate by more than
    /// 1% (a finite run's rate estimate is a little noisy; 1% is well above
    /// that noise and well below a real shortfall).
    pub(crate) fn rate_shortfall(&self) -> bool {
        !self.nothing_left_after_restore()
            && self
                .requested_rate
                .is_some_and(|req| self.achieved_rate < req as f64 * 0.99)
    }

    /// True for a run restored from the final checkpoint of a run that had
    /// ended: its input was all done, so it delivered nothing. A run that
    /// failed (its restore, or later) delivered nothing either, but is not
    /// one.
    pub(crate) fn nothing_left_after_restore(&self) -> bool {
        self.records == 0
            && self.failure.is_none()
            && self.config.get("restore").is_some_and(|r| !r.is_null())
    }

    /// Why a run with `--restore` failed before its restore took place
    /// (the result line says), `None` otherwise: a run that restored a
    /// checkpoint (`restored_checkpoint`) and failed later is not one.
    fn restore_failed(&self) -> Option<&str> {
        self.failure
            .as_deref()
            .filter(|_| self.restored_checkpoint.is_none())
    }

    /// How a run that restored a checkpoint and then failed ended: `then
    /// failed at T (from its first record) because …`; `None` for any
    /// other run.
    fn failed_after_restore(&self) -> Option<String> {
        if self.interrupted || self.restored_checkpoint.is_none() {
            return None;
        }
        let why = self.job_error.as_deref().or(self.failure.as_deref())?;
        let at = if self.started_ns > 0 && self.ended_ns >= self.started_ns {
            format!(" at {}", fmt_ns(self.ended_ns - self.started_ns))
        } else {
            String::new()
        };
        Some(format!("then failed{at} because {why}"))
    }

    /// The warning printed when [`RunReport::rate_shortfall`]: loud when
    /// the sources could not keep up; a note when recoveries explain it
    /// (each restart restarts the schedule from the restored position, so
    /// the run takes longer than its schedule).
    pub(crate) fn rate_warning(&self) -> Option<String> {
        if !self.rate_shortfall() {
            return None;
        }
        let req = self.requested_rate.unwrap_or(0);
        Some(if self.recoveries > 0 {
            format!(
                "note: the sources achieved {:.0} records/s for the requested {req}: the {} recoveries held them up (the latency figures include that: replayed records keep their scheduled times)",
                self.achieved_rate, self.recoveries
            )
        } else {
            format!(
                "WARNING: the sources achieved {:.0} records/s, below the requested {req} records/s: they fell up to {} behind schedule, and the latency figures include that backlog",
                self.achieved_rate,
                fmt_ns(self.behind_schedule_max_ns)
            )
        })
    }

    /// The warning printed when the sources fell further behind their
    /// schedule than the p99 latency the run reports (W2/W3, no recovery,
    /// the rate met): then some records waited longer than the p99 before
    /// they were even sent (a starved generator thread, or backpressure),
    /// so the tail beyond the p99 is partly the sources' own delay, not
    /// the path through the job. Being behind by less stays inside the
    /// body of the distribution.
    pub(crate) fn behind_warning(&self) -> Option<String> {
        let behind = self.behind_schedule_max_ns;
        (self.requested_rate.is_some()
            && self.recoveries == 0
            && !self.rate_shortfall()
            && self.latency_ns.count > 0
            && behind > self.latency_ns.p99)
            .then(|| {
                format!(
                    "WARNING: the sources fell up to {} behind their schedule, more than the p99 latency ({}): the tail beyond the p99 includes records that waited that long to be sent (the generator could not run, or backpressure held it)",
                    fmt_ns(behind),
                    fmt_ns(self.latency_ns.p99)
                )
            })
    }

    /// The warning printed when some task threads could not be pinned as
    /// `--pin` asked (they ran unpinned), naming them.
    pub(crate) fn pinning_warning(&self) -> Option<String> {
        let failed: Vec<String> = self
            .tasks
            .iter()
            .filter_map(|t| match t.pinning {
                lockgate::stats::Pinning::Failed(core) => Some(format!("{} (core {core})", t.name)),
                _ => None,
            })
            .collect();
        (!failed.is_empty()).then(|| {
            format!(
                "WARNING: pinning failed for {} of {} tasks, which ran unpinned: {}",
                failed.len(),
                self.tasks.len(),
                failed.join(", ")
            )
        })
    }

    /// The last line: `result: ok`, `result: interrupted (...)` or
    /// `result: FAILED (<why>)`.
    pub(crate) fn result_line(&self) -> String {
        match (&self.failure, self.interrupted) {
            (None, _) => "result: ok".into(),
            (Some(_), true) => format!(
                "result: interrupted ({} of {} records delivered)",
                self.delivered, self.total_records
            ),
            (Some(why), false) => format!("result: FAILED ({why})"),
        }
    }

    /// The human summary, ending with [`RunReport::result_line`].
    pub(crate) fn human(&self) -> String {
        let mut s = String::new();
        let c = &self.config;
        let get = |k: &str| c.get(k).cloned().unwrap_or(serde_json::Value::Null);
        let _ = writeln!(
            s,
            "lockgate loadgen {}: {}{}{}{}",
            self.workload,
            if self.mode == "none" {
                "no checkpoints".to_string()
            } else {
                format!("{} checkpoints", self.mode)
            },
            match get("checkpoint_interval_ms").as_u64() {
                Some(ms) if self.mode != "none" => format!(" every {ms} ms"),
                _ => String::new(),
            },
            match get("aligned_checkpoint_timeout_ms").as_u64() {
                Some(ms) => format!(", aligned-checkpoint timeout {ms} ms"),
                None => String::new(),
            },
            if self.interrupted {
                " [INTERRUPTED]"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "  machine:     {} cores ({}), pinning {}, {}, commit {}",
            self.cores,
            self.environment.cpu_model,
            self.pinning,
            self.environment.rustc,
            self.environment.git_commit
        );
        let _ = writeln!(
            s,
            "  settings:    parallelism {}, keys {} {}, payload {} B, batch {}, channel {}, buffer timeout {} µs, wait {}, {}",
            get("parallelism"),
            get("keys"),
            get("key_dist").as_str().unwrap_or("?"),
            get("payload_bytes"),
            get("batch_size"),
            get("channel_capacity"),
            get("buffer_timeout_us"),
            get("wait_strategy").as_str().unwrap_or("?"),
            threading(&self.config),
        );
        if let Some(dir) = get("restore").as_str() {
            let which = match (self.restored_checkpoint, self.restored_records) {
                (Some(id), Some(n)) => format!("from chk-{id} ({n} records before it) in {dir}"),
                _ => format!("from the latest complete checkpoint in {dir}"),
            };
            let which = match self.rescaled_from {
                Some(p) => format!(
                    "{which}, rescaled from parallelism {p} to {}",
                    get("parallelism")
                ),
                None => which,
            };
            if self.restore_failed().is_some() {
                let _ = writeln!(
                    s,
                    "  restore:     from {dir} failed before any record: see the result line"
                );
            } else if let Some(failed) = self.failed_after_restore() {
                let _ = writeln!(
                    s,
                    "  restored:    {which}; the run went on from its sources' positions, {failed}"
                );
            } else {
                let _ = writeln!(
                    s,
                    "  restored:    {which}{}",
                    if self.nothing_left_after_restore() {
                        " (it is the run's final checkpoint: nothing was left to run)"
                    } else {
                        "; the run went on from its sources' positions"
                    }
                );
            }
        }
        // W2/W3/W4 run for a time: their window starts after the warm-up
        // (or, restored in this process, after the restore: the warm-up
        // was the first process').
        let restored = get("restore").as_str().is_some();
        let window = if restored && self.requested_rate.is_some() {
            "recorded window: first to last delivery after the restore".to_string()
        } else if self.requested_rate.is_some() || self.workload == "W4" {
            match get("warmup").as_f64() {
                Some(w) if w > 0.0 => {
                    format!("recorded window: first to last delivery after a {w} s warm-up")
                }
                _ => "recorded window: first to last delivery".into(),
            }
        } else {
            "first emission to last delivery".into()
        };
        let _ = writeln!(
            s,
            "  records:     {} in {:.3} s = {:.0} records/s ({window})",
            self.records, self.seconds, self.records_per_s
        );
        match self.requested_rate {
            Some(req) => {
                let _ = writeln!(
                    s,
                    "  rate:        requested {req} records/s, achieved {:.0} records/s; sources at most {} behind schedule",
                    self.achieved_rate,
                    fmt_ns(self.behind_schedule_max_ns)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "  rate:        closed loop, sources emitted {:.0} records/s",
                    self.achieved_rate
                );
            }
        }
        if let Some(w) = self.rate_warning() {
            let _ = writeln!(s, "  {w}");
        }
        if let Some(w) = self.behind_warning() {
            let _ = writeln!(s, "  {w}");
        }
        if let Some(w) = self.pinning_warning() {
            let _ = writeln!(s, "  {w}");
        }
        if self.interrupted {
            let _ = writeln!(
                s,
                "  correctness: {} records in the whole run (warm-up included), {} delivered, {} not sent (interrupted), {} duplicated",
                self.total_records, self.delivered, self.not_sent, self.duplicated
            );
        } else {
            let not_sent = if self.not_sent > 0 {
                format!(", {} not sent (the job failed first)", self.not_sent)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "  correctness: {} records in the whole run (warm-up included), {} delivered, {} lost{not_sent}, {} duplicated; fingerprint {:#018x} (expected {:#018x})",
                self.total_records,
                self.delivered,
                self.lost,
                self.duplicated,
                self.fingerprint,
                self.expected_fingerprint
            );
        }
        let label = match &self.latency_note {
            Some(n) => format!("latency ({n})"),
            None => "latency (from the intended send time)".into(),
        };
        let _ = writeln!(s, "  {label}, µs, {} values:", self.latency_ns.count);
        let _ = writeln!(s, "    {}", fmt_lat(&self.latency_ns));
        if self.latency_note.is_none() {
            let _ = writeln!(
                s,
                "  latency uncorrected (from the actual send time), µs:\n    {}",
                fmt_lat(&self.latency_uncorrected_ns)
            );
        }
        if let Some(l) = &self.committed_latency_ns {
            let label = match &self.latency_note {
                Some(n) => format!("committed latency ({n})"),
                None => "committed latency (from the intended send time to the commit)".into(),
            };
            let _ = writeln!(s, "  {label}, µs, {} values:", l.count);
            let _ = writeln!(s, "    {}", fmt_lat(l));
        }
        if let Some(c) = &self.committed {
            let _ = writeln!(
                s,
                "  committed:   {} records committed, {} lost, {} duplicated, {} uncommitted{}",
                c.records,
                c.lost,
                c.duplicated,
                c.uncommitted,
                if c.retracted > 0 {
                    format!("; {} retracted by a restore that fell back past their checkpoint, then committed again", c.retracted)
                } else {
                    String::new()
                }
            );
        }
        if self.mode != "none" {
            self.checkpoints.write_summary(&mut s, &self.mode);
        }
        if let Some(ab) = &self.ab {
            s.push_str(&ab.human());
        }
        let _ = writeln!(
            s,
            "  failures:    {} injected ({} planned), {} recoveries",
            self.failures_injected, self.failures_planned, self.recoveries
        );
        for f in &self.failures {
            let from = match f.restored_from {
                Some(id) => format!("restored chk-{id}"),
                None => "from the start".into(),
            };
            let at = if self.started_ns > 0 && f.at_ns >= self.started_ns {
                format!(" at {}", fmt_ns(f.at_ns - self.started_ns))
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "    {}{at}: {}",
                f.task,
                match f.recovery_ns {
                    Some(r) => format!("recovered in {} ({from})", fmt_ns(r)),
                    None => format!("no record delivered after it ({from})"),
                }
            );
        }
        let _ = writeln!(
            s,
            "  memory:      peak RSS {:.1} MiB",
            self.peak_rss_bytes as f64 / (1024.0 * 1024.0)
        );
        let batches: Vec<String> = self
            .tasks
            .iter()
            .filter(|t| t.batches_out > 0)
            .map(|t| format!("{} {:.1}", t.name, t.mean_batch_out()))
            .collect();
        if !batches.is_empty() {
            let _ = writeln!(s, "  batches:     mean records per output batch:");
            // Folded at 80 columns under the label (parallelism 16 makes
            // 32 tasks).
            let mut line = String::new();
            for b in batches {
                if !line.is_empty() && 15 + line.len() + 2 + b.len() > 80 {
                    let _ = writeln!(s, "               {line},");
                    line.clear();
                }
                if !line.is_empty() {
                    line += ", ";
                }
                line += &b;
            }
            let _ = writeln!(s, "               {line}");
        }
        let _ = write!(s, "{}", self.result_line());
        s
    }
}

/// A fixed unit of a row of durations, the same in every run (so that two
/// reports compare by eye): µs with 1 decimal, or ms with 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Microseconds, 1 decimal.
    Us,
    /// Milliseconds, 3 decimals.
    Ms,
}

impl Unit {
    /// Its symbol.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Unit::Us => "µs",
            Unit::Ms => "ms",
        }
    }

    /// `ns` in this unit, without the symbol.
    pub(crate) fn show(self, ns: u64) -> String {
        match self {
            Unit::Us => format!("{:.1}", ns as f64 / 1e3),
            Unit::Ms => format!("{:.3}", ns as f64 / 1e6),
        }
    }
}

/// Durations in ns shown in `unit`: the numbers and the unit's symbol.
pub(crate) fn in_unit(ns: &[u64], unit: Unit) -> (Vec<String>, &'static str) {
    (ns.iter().map(|v| unit.show(*v)).collect(), unit.name())
}

/// A duration in ns, shown in the unit that reads best.
pub(crate) fn fmt_ns(ns: u64) -> String {
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 10_000_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

fn fmt_lat(l: &LatencyNs) -> String {
    let us = |v: u64| format!("{:.1}", v as f64 / 1e3);
    format!(
        "p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}",
        us(l.p50),
        us(l.p90),
        us(l.p99),
        us(l.p999),
        us(l.p9999),
        us(l.max)
    )
}

/// How a run's tasks got threads, from its JSON `config`: "a thread per
/// task" or "N cooperative workers".
pub(crate) fn threading(config: &serde_json::Value) -> String {
    match config.get("workers").and_then(|w| w.as_u64()) {
        Some(1) => "1 cooperative worker".to_string(),
        Some(n) => format!("{n} cooperative workers"),
        None => "a thread per task".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockgate::{stats::Pinning, stats::TaskMetricsSnapshot};

    fn task(name: &str, pinning: Pinning) -> TaskMetricsSnapshot {
        TaskMetricsSnapshot {
            name: name.into(),
            pinning,
            ..TaskMetricsSnapshot::default()
        }
    }

    #[test]
    fn failed_pins_are_named_in_a_warning_and_in_the_report() {
        let mut r = RunReport {
            tasks: vec![
                task("source[0]", Pinning::Pinned(0)),
                task("sink[0]", Pinning::Failed(7)),
            ],
            ..RunReport::default()
        };
        let w = r.pinning_warning().expect("one pin failed");
        assert!(w.contains("1 of 2 tasks"), "{w}");
        assert!(w.contains("sink[0] (core 7)"), "{w}");
        assert!(r.human().contains(&w), "the report shows it");
        r.tasks[1].pinning = Pinning::Unpinned;
        assert_eq!(r.pinning_warning(), None);
    }

    #[test]
    fn a_restore_that_failed_is_not_reported_as_a_finished_run() {
        let mut r = RunReport {
            config: serde_json::json!({"restore": "/tmp/ck"}),
            ..RunReport::default()
        };
        assert!(r.nothing_left_after_restore(), "0 records after a restore");
        assert!(r.human().contains("nothing was left to run"));
        r.failure = Some("operator 'sink' failed in restore_state".into());
        assert!(!r.nothing_left_after_restore());
        let h = r.human();
        assert!(h.contains("from /tmp/ck failed before any record"), "{h}");
        assert!(!h.contains("restored:"), "{h}");
    }

    #[test]
    fn a_restore_that_succeeded_and_then_failed_says_both() {
        let why = "checkpointing failed: 4 checkpoints failed in a row (No space left on device)";
        for records in [0, 2_007] {
            let r = RunReport {
                config: serde_json::json!({"restore": "/tmp/ck"}),
                records,
                restored_checkpoint: Some(30),
                restored_records: Some(14_872),
                failure: Some(format!("the job failed: {why}")),
                job_error: Some(why.into()),
                started_ns: 1_000_000_000,
                ended_ns: 1_390_000_000,
                ..RunReport::default()
            };
            assert!(!r.nothing_left_after_restore());
            let h = r.human();
            assert!(
                h.contains(&format!(
                    "restored:    from chk-30 (14872 records before it) in /tmp/ck; the run went on from its sources' positions, then failed at {} because {why}",
                    fmt_ns(390_000_000)
                )),
                "{h}"
            );
            assert!(!h.contains("failed before any record"), "{h}");
        }
    }

    #[test]
    fn a_failed_run_says_which_records_were_never_sent() {
        let r = RunReport {
            total_records: 50_000,
            delivered: 2_007,
            lost: 12,
            not_sent: 33_109,
            failure: Some("the job failed: out of space".into()),
            job_error: Some("out of space".into()),
            ..RunReport::default()
        };
        let h = r.human();
        assert!(
            h.contains(
                "2007 delivered, 12 lost, 33109 not sent (the job failed first), 0 duplicated"
            ),
            "{h}"
        );
    }

    #[test]
    fn batch_lines_are_folded_at_80_columns() {
        let r = RunReport {
            tasks: (0..32)
                .map(|i| TaskMetricsSnapshot {
                    name: format!("keyed_sum[{i}]"),
                    batches_out: 1,
                    records_out: 3,
                    ..TaskMetricsSnapshot::default()
                })
                .collect(),
            ..RunReport::default()
        };
        let h = r.human();
        let lines: Vec<&str> = h.lines().skip_while(|l| !l.contains("batches:")).collect();
        assert!(lines.len() > 3, "{h}");
        let shown: usize = lines.iter().map(|l| l.matches("keyed_sum[").count()).sum();
        assert_eq!(shown, 32, "{h}");
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{h}");
    }

    #[test]
    fn behind_schedule_beyond_the_p99_is_warned_about() {
        let mut r = RunReport {
            requested_rate: Some(1000),
            achieved_rate: 1000.0,
            behind_schedule_max_ns: 108_000_000,
            ..RunReport::default()
        };
        r.latency_ns.count = 10;
        r.latency_ns.p99 = 5_000_000;
        let w = r.behind_warning().expect("108 ms behind, p99 5 ms");
        assert!(w.contains("108") && w.contains("p99"), "{w}");
        assert!(r.human().contains(&w));
        r.latency_ns.p99 = 200_000_000;
        assert_eq!(r.behind_warning(), None);
        r.latency_ns.p99 = 5_000_000;
        r.recoveries = 1;
        assert_eq!(r.behind_warning(), None, "the failures list explains it");
    }

    #[test]
    fn a_line_of_figures_has_one_unit() {
        assert_eq!(
            in_unit(&[31_400, 5_291_800, 36_070_000], Unit::Ms),
            (vec!["0.031".into(), "5.292".into(), "36.070".into()], "ms")
        );
        assert_eq!(in_unit(&[612], Unit::Us).0, ["0.6"]);
        let mut r = RunReport {
            mode: "exactly-once".into(),
            ..RunReport::default()
        };
        r.checkpoints.completed = 1;
        r.checkpoints.sync_ns.p50 = 31_400;
        r.checkpoints.async_ns.p99 = 36_070_000;
        let h = r.human();
        let line = |what: &str| h.lines().find(|l| l.contains(what)).unwrap().to_string();
        assert!(line("sync part").ends_with("µs (per subtask)"), "{h}");
        assert!(line("sync part").contains("p50     31.4"), "{h}");
        assert!(line("async part").ends_with("ms (per subtask)"), "{h}");
    }

    #[test]
    fn checkpoint_lines_say_what_there_is() {
        let mut r = RunReport {
            mode: "at-least-once".into(),
            ..RunReport::default()
        };
        r.checkpoints.aborted = 1;
        r.checkpoints.aborted_by_reason.insert("timeout".into(), 1);
        let h = r.human();
        assert!(h.contains("0 completed, 1 aborted (timeout)"), "{h}");
        assert!(h.contains("none completed"), "{h}");
        assert!(!h.contains("end-to-end"), "{h}");
        r.checkpoints.aborted = 3;
        r.checkpoints.aborted_by_reason.insert("subsumed".into(), 2);
        r.checkpoints.completed = 4;
        let h = r.human();
        assert!(h.contains("3 aborted (2 subsumed, 1 timeout)"), "{h}");
        // At-least-once counts barriers and never blocks: no alignment.
        assert!(h.contains("alignment   none (at-least-once"), "{h}");
        assert!(h.contains("end-to-end"), "{h}");
        r.mode = "exactly-once".into();
        assert!(r.human().contains("alignment   p50"));
    }
}
