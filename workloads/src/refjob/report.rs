//! What a reference job reports: the handle to its shared results
//! ([`RefJobResults`]), a live view for progress lines ([`RefProgress`]),
//! and, once it ended, the [`RefJobReport`]: latencies merged over the
//! sink's recordings, the sources against their schedule, the check
//! against the closed form, failures and recoveries.

use super::committed::CommittedOutput;
use super::config::{OutputMode, RefJobConfig, RefJobError};
use super::recorded::Recorded;
use super::shared::{
    lock, with_merged, CheckpointBands, CheckpointInterval, Shared, SinkSlot, SourceStats,
};
use crate::latency::{merge, new_interval_histogram, LatencyError, Percentiles};
use crate::workload::{CheckReport, ExpectedResult, KeySpace, SinkCheck, Workload};
use hdrhistogram::Histogram;
use lockgate::{error::JobFailure, CheckpointId, CheckpointMode, JobError, JobMetrics};
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, OnceLock};

/// A live view of a running reference job, for progress lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RefProgress {
    /// Records the sources emitted so far (replays included).
    pub emitted: u64,
    /// Records the sink received so far (replays included).
    pub delivered: u64,
    /// Latencies recorded so far (after the warm-up).
    pub recorded: u64,
    /// The 99th percentile of the latencies so far, ns.
    pub p99_ns: u64,
    /// When the job's first record was emitted, ns on the engine clock (0:
    /// not yet).
    pub started_ns: u64,
}

/// The results a running reference job fills in (histograms, counters, the
/// sink's check), shared with the job's tasks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RefJobResults {
    pub(super) shared: Arc<Shared>,
    expected: Arc<OnceLock<ExpectedResult>>,
}

/// How the sources did against their schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SourceSummary {
    /// Records emitted, replays included.
    pub emitted: u64,
    /// First emission to last emission, ns.
    pub span_ns: u64,
    /// `emitted / span` in records/s (0 for an instant run).
    pub achieved_rate: f64,
    /// The most a record was sent after its schedule time, ns (W2/W3; 0
    /// for W1, whose schedule is its send time).
    pub max_behind_ns: u64,
}

/// Everything a finished (or stopped) reference job measured.
#[derive(Clone, Debug)]
pub struct RefJobReport {
    /// What ran.
    pub config: RefJobConfig,
    /// The checkpointing mode.
    pub mode: CheckpointMode,
    /// Records the job emits when complete.
    pub total_records: u64,
    /// The sink's check against the closed form.
    pub check: CheckReport,
    /// Records the sink received, replays included.
    pub delivered: u64,
    /// Sequence numbers the sink never received (in a failed run: of the
    /// records generated; see `not_sent`).
    pub lost: u64,
    /// A failed run's records that no source generated (the run ended
    /// before their time): never sent, so not lost. 0 for a run that did
    /// not fail (an interrupted one counts what it cut off in `lost`).
    pub not_sent: u64,
    /// Records the sink received more than once.
    pub duplicated: u64,
    /// Latency `now - intended send time` (after the warm-up), merged over
    /// recording threads.
    pub latency: Histogram<u64>,
    /// Latency `now - actual send time`, the uncorrected figure.
    pub latency_uncorrected: Histogram<u64>,
    /// Latency per interval ([`RefJobConfig::interval_ns`]) since [`RefJobReport::intervals_start_ns`]
    /// (index = interval), merged; W2/W3 only ([`new_interval_histogram`]s:
    /// 2 significant digits).
    pub intervals: Vec<Histogram<u64>>,
    /// Where interval 0 starts, ns on the clock of [`lockgate::tuning::now_ns`] (0:
    /// nothing recorded).
    pub intervals_start_ns: u64,
    /// Records in the recorded window (post-warm-up deliveries; W1: all).
    pub recorded_records: u64,
    /// The recorded window, s: W1, first emission to last delivery; W2/W3,
    /// first recorded delivery to last delivery.
    pub recorded_seconds: f64,
    /// The sources against their schedule.
    pub sources: SourceSummary,
    /// The engine's metrics (tasks, checkpoints, restarts).
    pub metrics: JobMetrics,
    /// The job ended with this error (no restart left, ...).
    pub job_error: Option<String>,
    /// The job was stopped before the end (Ctrl-C).
    pub interrupted: bool,
    /// Failures planned by the failure plan.
    pub failures_planned: usize,
    /// Planned failures that struck.
    pub failures_struck: usize,
    /// The sources restored a checkpoint (after a failure in this process,
    /// or a `--restore` of a folder left by another one).
    pub restored: bool,
    /// Every task failure, oldest first, with its recovery time.
    pub recoveries: Vec<Recovery>,
    /// The run's first emission, ns on the clock of [`lockgate::tuning::now_ns`]
    /// (0: nothing was emitted).
    pub started_ns: u64,
    /// When the job had ended (the report was collected), ns on the same
    /// clock.
    pub ended_ns: u64,
    /// With a restore in a new process: the checkpoint restored and the
    /// records the sink had received before it (distinct).
    pub restored_from: Option<(CheckpointId, u64)>,
    /// With a restore at another parallelism: the sources' parallelism in
    /// the checkpoint restored.
    pub rescaled_from: Option<usize>,
    /// Every checkpoint of the run as timeline bands (the engine's
    /// metrics list only the last few).
    pub checkpoint_bands: CheckpointBands,
    /// Committed output (`--output committed`): what the sink committed.
    pub committed: Option<CommittedReport>,
}

/// What a run with committed output committed (see `refjob::committed`).
#[derive(Clone, Debug)]
pub struct CommittedReport {
    /// Latency from the intended send time to the commit, of the records
    /// committed by this process (after the warm-up).
    pub latency: Histogram<u64>,
    /// The same per interval ([`RefJobConfig::interval_ns`]) of intended send
    /// time since [`RefJobReport::intervals_start_ns`] (W2/W3).
    pub intervals: Vec<Histogram<u64>>,
    /// Records committed (each once), by this process or earlier ones.
    pub committed: u64,
    /// Records committed again while committed (at-least-once only).
    pub duplicated: u64,
    /// Records whose commit a restore retracted (a fall back past a
    /// committed checkpoint), committed again after.
    pub retracted: u64,
    /// Records of the run neither committed nor received by the sink.
    pub lost: u64,
    /// Records the sink received that were never committed (0 once the
    /// final checkpoint completed).
    pub uncommitted: u64,
}

impl CommittedReport {
    /// True when every record was committed once and nothing is left
    /// uncommitted (`relaxed`: at-least-once, duplicates allowed).
    pub fn is_exact(&self, relaxed: bool) -> bool {
        self.lost == 0 && self.uncommitted == 0 && (relaxed || self.duplicated == 0)
    }
}

/// A task failure of the run and how long the job took to recover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// The failure as the engine reports it.
    pub failure: JobFailure,
    /// From the failure to the first record the sink received after it, ns
    /// (the restart, the restore and the replay's first hop); `None` when
    /// none was received after it (the job ended with it).
    pub recovery_ns: Option<u64>,
}

impl RefJobReport {
    /// `records / seconds` of the recorded window (0 when empty).
    pub fn records_per_s(&self) -> f64 {
        if self.recorded_seconds > 0.0 {
            self.recorded_records as f64 / self.recorded_seconds
        } else {
            0.0
        }
    }

    /// The latency percentiles.
    pub fn percentiles(&self) -> Percentiles {
        Percentiles::from_histogram(&self.latency)
    }

    /// `None` when the correctness check passed, else why not: runs without
    /// failures and exactly-once runs must match the closed form exactly
    /// (count, per-key sums, fingerprint, 0 lost, 0 duplicated);
    /// at-least-once runs that restored a checkpoint (after a failure in
    /// this process or a restore of another process's folder) must lose
    /// nothing, and may apply records twice: that is what at-least-once
    /// allows.
    pub fn failure(&self) -> Option<String> {
        if self.interrupted {
            return Some("interrupted".into());
        }
        if let Some(e) = &self.job_error {
            return Some(format!("the job failed: {e}"));
        }
        if let Some(c) = &self.committed {
            let relaxed = self.mode == CheckpointMode::AtLeastOnce;
            if !c.is_exact(relaxed) {
                return Some(format!(
                    "committed output: {} lost, {} duplicated, {} uncommitted",
                    c.lost, c.duplicated, c.uncommitted
                ));
            }
        }
        let relaxed = self.mode == CheckpointMode::AtLeastOnce
            && (self.metrics.restarts > 0 || self.restored);
        if relaxed {
            if self.check.lost > 0 || self.check.out_of_range > 0 {
                return Some(format!(
                    "{} records lost in an at-least-once run ({})",
                    self.check.lost, self.check
                ));
            }
            None
        } else if !self.check.is_exact() {
            Some(self.check.to_string())
        } else {
            None
        }
    }

    /// True when [`RefJobReport::failure`] is `None`.
    pub fn ok(&self) -> bool {
        self.failure().is_none()
    }
}

impl RefJobResults {
    pub(super) fn new(cfg: &RefJobConfig, mode: CheckpointMode) -> Result<Self, RefJobError> {
        cfg.validate()?;
        let total = cfg.total_records();
        let slots = vec![Mutex::new(SinkSlot {
            check: SinkCheck::new(total, cfg.keys)?,
            recorded: Recorded::new(),
            merged: Arc::new(Mutex::new(Recorded::new())),
            settled: Vec::new(),
            unsettled: Default::default(),
            open_interval: (mode != CheckpointMode::None).then(Recorded::new),
            deliveries: 0,
            first_recorded_ns: 0,
            last_delivery_ns: 0,
            attempts: 0,
            attempt_starts: Vec::new(),
            // The first checkpoint's fresh interval: made here, not by the
            // sink's synchronous part (two histograms allocated and
            // faulted in there took 0.8-13 ms at W1's first checkpoint;
            // later ones come from the idle merge or the sink's deferred
            // snapshot, `SinkSlot::offer_spare`).
            spares: (mode != CheckpointMode::None)
                .then(Recorded::new)
                .into_iter()
                .collect(),
            spare_changes: None,
            open_txn: Default::default(),
            pending: Default::default(),
        })];
        Ok(RefJobResults {
            shared: Arc::new(Shared {
                cfg: cfg.clone(),
                mode,
                restored: std::sync::atomic::AtomicBool::new(false),
                total,
                first_recorded_n: cfg.first_recorded_n(),
                t0: OnceLock::new(),
                process_restore: OnceLock::new(),
                rescaled_from: OnceLock::new(),
                intervals_start: OnceLock::new(),
                record_from: OnceLock::new(),
                sources: (0..cfg.parallelism)
                    .map(|_| SourceStats::default())
                    .collect(),
                generated: Mutex::new(vec![0; usize::from(crate::workload::SPLITS)]),
                slots,
                bands: Mutex::new(CheckpointBands::default()),
                events_thread: Mutex::new(None),
                settle_error: Mutex::new(None),
                interval: Mutex::new(CheckpointInterval::default()),
                committed: match cfg.output {
                    OutputMode::Committed => Some(Mutex::new(
                        CommittedOutput::open(total, cfg.committed_log_dir.as_deref())
                            .map_err(|e| RefJobError::Config(format!("committed output: {e}")))?,
                    )),
                    OutputMode::Processing => None,
                },
            }),
            expected: Arc::new(OnceLock::new()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RefJobConfig {
        &self.shared.cfg
    }

    /// The checkpoints that ended since the last call (or the start),
    /// emptied: for a line per interval of a long run, whose whole-run
    /// figures hide a drift.
    pub fn take_checkpoint_interval(&self) -> CheckpointInterval {
        std::mem::take(&mut *lock(&self.shared.interval))
    }

    /// Counters and the p99 so far (locks the sink's slot briefly).
    pub fn progress(&self) -> RefProgress {
        let emitted = self
            .shared
            .sources
            .iter()
            .map(|s| s.emitted.load(Relaxed))
            .sum();
        let started_ns = self
            .shared
            .sources
            .iter()
            .map(|s| s.first_emit_ns.load(Relaxed))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let (mut delivered, mut recorded) = (0, 0);
        let mut hists = Vec::new();
        for slot in &self.shared.slots {
            with_merged(slot, |s, merged| {
                delivered += s.deliveries;
                let mut h = s.recorded.latency.histogram().clone();
                let _ = h.add(merged.latency.histogram());
                for r in s
                    .settled
                    .iter()
                    .chain(s.unsettled.values())
                    .chain(s.open_interval.iter())
                {
                    let _ = h.add(r.latency.histogram());
                }
                recorded += h.len();
                hists.push(h);
            });
        }
        let p99_ns = merge(hists.iter())
            .map(|h| Percentiles::from_histogram(&h).p99)
            .unwrap_or(0);
        RefProgress {
            emitted,
            delivered,
            recorded,
            p99_ns,
            started_ns,
        }
    }

    /// The closed-form answer of this run (computed once, O(records)).
    ///
    /// For W4 (sources that stop at their time) it is the records below the
    /// sources' positions now: final once the job ended, and not cached.
    pub fn expected(&self) -> std::borrow::Cow<'_, ExpectedResult> {
        let keys = || {
            KeySpace::new(self.shared.cfg.keys, self.shared.cfg.key_dist)
                .expect("validated in RefJobResults::new")
        };
        if self.shared.cfg.workload == Workload::W4 {
            let positions: Vec<u64> = self
                .shared
                .sources
                .iter()
                .map(|s| s.position.load(Relaxed))
                .collect();
            return std::borrow::Cow::Owned(ExpectedResult::of_positions(
                &positions,
                self.shared.total,
                &keys(),
            ));
        }
        std::borrow::Cow::Borrowed(
            self.expected
                .get_or_init(|| ExpectedResult::compute(self.shared.total, &keys())),
        )
    }

    /// Planned failures that struck (the engine reports each as an
    /// injected failure).
    fn failures_struck(&self, failures: &[JobFailure]) -> usize {
        failures
            .iter()
            .filter(|f| f.cause.contains("injected failure: planned"))
            .count()
    }

    /// Each failure with its recovery time: from the failure to the first
    /// record delivered after it (`None`: nothing was delivered after it).
    fn recoveries(&self, failures: &[JobFailure]) -> Vec<Recovery> {
        let mut starts: Vec<u64> = self
            .shared
            .slots
            .iter()
            .flat_map(|s| lock(s).attempt_starts.clone())
            .collect();
        starts.sort_unstable();
        failures
            .iter()
            .map(|f| Recovery {
                failure: f.clone(),
                recovery_ns: starts.iter().find(|t| **t >= f.at_ns).map(|t| t - f.at_ns),
            })
            .collect()
    }

    fn source_summary(&self) -> SourceSummary {
        let s = &self.shared.sources;
        let emitted: u64 = s.iter().map(|s| s.emitted.load(Relaxed)).sum();
        let first = s
            .iter()
            .map(|s| s.first_emit_ns.load(Relaxed))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let last = s
            .iter()
            .map(|s| s.last_emit_ns.load(Relaxed))
            .max()
            .unwrap_or(0);
        let span_ns = last.saturating_sub(first);
        SourceSummary {
            emitted,
            span_ns,
            achieved_rate: if span_ns > 0 {
                // n records emitted over a span hold n - 1 gaps.
                emitted.saturating_sub(1) as f64 * 1e9 / span_ns as f64
            } else {
                0.0
            },
            max_behind_ns: s
                .iter()
                .map(|s| s.max_behind_ns.load(Relaxed))
                .max()
                .unwrap_or(0),
        }
    }

    /// Collects the report once the job ended (or was stopped):
    /// `outcome` is what [`JobHandle::wait`](lockgate::JobHandle::wait) returned, `last_metrics` the
    /// metrics read just before (used when the job failed).
    ///
    /// # Errors
    /// [`RefJobError::Latency`] when histograms cannot be merged.
    pub fn finish(
        &self,
        outcome: Result<JobMetrics, JobError>,
        last_metrics: JobMetrics,
        interrupted: bool,
        failures_planned: usize,
    ) -> Result<RefJobReport, RefJobError> {
        let ended_ns = lockgate::tuning::now_ns();
        let (metrics, job_error) = match outcome {
            Ok(m) => (m, None),
            Err(e) => (last_metrics, Some(e.to_string())),
        };
        let metrics_failures = metrics.failures.clone();
        // The events end with the job: fold in the last ones.
        if let Some((events, settler)) = lock(&self.shared.events_thread).take() {
            let _ = events.join();
            let _ = settler.join();
        }
        let expected = self.expected();
        let sources = self.source_summary();
        let mut lat = Vec::new();
        let mut unc = Vec::new();
        let mut intervals: Vec<Histogram<u64>> = Vec::new();
        let (mut delivered, mut recorded) = (0, 0);
        let (mut first_rec, mut last_del) = (u64::MAX, 0);
        let mut check: Option<CheckReport> = None;
        for slot in &self.shared.slots {
            let (total, deliveries, first_recorded_ns, last_delivery_ns, slot_check) =
                with_merged(slot, |s, merged| {
                    (
                        s.total(merged),
                        s.deliveries,
                        s.first_recorded_ns,
                        s.last_delivery_ns,
                        s.check.verify(&expected),
                    )
                });
            let mut total = total.map_err(|e| LatencyError::Merge(e.to_string()))?;
            total
                .expand()
                .map_err(|e| LatencyError::Merge(e.to_string()))?;
            let r = &total;
            lat.push(r.latency.histogram().clone());
            // W1's records carry their actual send time as intended time:
            // both figures are the same histogram, recorded once.
            unc.push(if self.shared.cfg.workload.is_paced() {
                r.uncorrected.histogram().clone()
            } else {
                r.latency.histogram().clone()
            });
            for (&i, h) in &r.intervals {
                if intervals.len() <= i {
                    intervals.resize_with(i + 1, new_interval_histogram);
                }
                intervals[i]
                    .add(h)
                    .map_err(|e| LatencyError::Merge(format!("{e:?}")))?;
            }
            delivered += deliveries;
            recorded += r.latency.count();
            if first_recorded_ns > 0 {
                first_rec = first_rec.min(first_recorded_ns);
            }
            last_del = last_del.max(last_delivery_ns);
            check = Some(slot_check);
        }
        let check = check.expect("one sink slot");
        // A failed run's records never generated were never sent: not
        // lost (W4's expectation holds only the records generated).
        let not_sent = if job_error.is_some() && self.shared.cfg.workload != Workload::W4 {
            self.shared.never_generated().min(check.lost)
        } else {
            0
        };
        let first_emit = self
            .shared
            .sources
            .iter()
            .map(|s| s.first_emit_ns.load(Relaxed))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let window_start = if self.shared.cfg.workload.is_timed() {
            first_rec
        } else {
            first_emit
        };
        let recorded_seconds = if window_start == u64::MAX || window_start == 0 {
            0.0
        } else {
            last_del.saturating_sub(window_start) as f64 / 1e9
        };
        Ok(RefJobReport {
            restored: self
                .shared
                .restored
                .load(std::sync::atomic::Ordering::Relaxed),
            config: self.shared.cfg.clone(),
            mode: self.shared.mode,
            total_records: expected.total_records(),
            lost: check.lost - not_sent,
            not_sent,
            duplicated: check.duplicates,
            check,
            delivered,
            latency: merge(lat.iter())?,
            latency_uncorrected: merge(unc.iter())?,
            intervals,
            recorded_records: recorded,
            recorded_seconds,
            sources,
            metrics,
            job_error,
            interrupted,
            failures_planned,
            failures_struck: self.failures_struck(&metrics_failures),
            recoveries: self.recoveries(&metrics_failures),
            started_ns: first_emit,
            ended_ns,
            intervals_start_ns: self.shared.intervals_start.get().copied().unwrap_or(0),
            restored_from: self.shared.process_restore.get().copied(),
            rescaled_from: self.shared.rescaled_from.get().copied(),
            checkpoint_bands: lock(&self.shared.bands).clone(),
            committed: self.committed_report(not_sent)?,
        })
    }

    /// What was committed, against what the sink received (`not_sent`:
    /// records a failed run never generated, not lost).
    fn committed_report(&self, not_sent: u64) -> Result<Option<CommittedReport>, RefJobError> {
        let Some(committed) = &self.shared.committed else {
            return Ok(None);
        };
        // W4's sources stop at their time: only what they generated counts.
        let expected = self.expected();
        let slot = lock(&self.shared.slots[0]);
        let mut c = lock(committed);
        let total = self.shared.total;
        let (mut lost, mut uncommitted) = (0u64, 0u64);
        for n in 0..total {
            if !c.contains(n) && expected.was_generated(n) {
                if slot.check.contains(n) {
                    uncommitted += 1;
                } else {
                    lost += 1;
                }
            }
        }
        drop(slot);
        c.recorded
            .expand()
            .map_err(|e| LatencyError::Merge(e.to_string()))?;
        let mut intervals: Vec<Histogram<u64>> = Vec::new();
        for (&i, h) in &c.recorded.intervals {
            if intervals.len() <= i {
                intervals.resize_with(i + 1, new_interval_histogram);
            }
            intervals[i]
                .add(h)
                .map_err(|e| LatencyError::Merge(format!("{e:?}")))?;
        }
        Ok(Some(CommittedReport {
            latency: c.recorded.latency.histogram().clone(),
            intervals,
            committed: c.committed,
            duplicated: c.duplicated,
            retracted: c.retracted,
            lost: lost.saturating_sub(not_sent),
            uncommitted,
        }))
    }
}
