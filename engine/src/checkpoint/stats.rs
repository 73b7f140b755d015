//! Checkpoint statistics, as Flink's checkpoint UI shows them: per
//! checkpoint ([`CheckpointStats`]) and per subtask
//! ([`SubtaskCheckpointStats`]). Times are ns, sizes bytes.

use crate::barrier::AbortReason;
use crate::types::element::{CheckpointId, SnapshotKind};
use crate::types::task_id::TaskId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Where a checkpoint stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum CheckpointStatus {
    /// Triggered, not complete yet (acknowledgements or the metadata
    /// write outstanding).
    Pending,
    /// Every task's part and the metadata are durable.
    Completed,
    /// Given up, with the reason.
    Aborted(AbortReason),
}

/// One subtask's part of one checkpoint (Flink's `SubtaskStateStats`).
/// Times in ns on [`crate::tuning::now_ns`]'s clock, sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskCheckpointStats {
    /// The subtask, shown as `keyed_sum[1]`.
    pub task: TaskId,
    /// The synchronous part: from the trigger (a source) or the last
    /// barrier (a task with inputs) until the task processes records
    /// again, the barrier forwarded and the state copied.
    pub sync_ns: u64,
    /// The asynchronous part, on the task's snapshot thread: encoding,
    /// checksum, write and `fsync` of its part.
    pub async_ns: u64,
    /// Time the task's channels were blocked for the alignment, first to
    /// last barrier (exactly-once with two inputs or more; 0 otherwise).
    pub alignment_ns: u64,
    /// First to last barrier of the checkpoint at the task, in every mode.
    pub barrier_spread_ns: u64,
    /// Most bytes held in the task's blocker during the alignment.
    pub buffered_bytes: u64,
    /// Trigger to the first barrier at this subtask (for a source: to
    /// the trigger's arrival), Flink's start delay.
    pub start_delay_ns: u64,
    /// Bytes written for this subtask's part (file header included).
    pub checkpointed_bytes: u64,
    /// In-flight records persisted as channel state by an unaligned
    /// checkpoint, bytes of their encoding (0 in the other modes); not in
    /// `checkpointed_bytes` or `state_bytes`.
    pub persisted_bytes: u64,
    /// The exact size of a full encoding of the subtask's state.
    pub state_bytes: u64,
    /// True when the part holds only the changes since an earlier one.
    pub incremental: bool,
    /// True for an unaligned checkpoint.
    pub unaligned: bool,
}

/// Statistics of one checkpoint (Flink's checkpoint statistics).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStats {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// True for the final checkpoint after all sources ended (FLIP-147).
    pub is_final: bool,
    /// Pending, completed or aborted (with the reason).
    pub status: CheckpointStatus,
    /// When it was triggered, ns on [`crate::tuning::now_ns`]'s clock.
    pub trigger_ns: u64,
    /// End to end: from the trigger until the checkpoint is complete
    /// (every part and the metadata durable), or until the abort; ns.
    pub duration_ns: u64,
    /// The largest start delay of its subtasks, ns.
    pub start_delay_ns: u64,
    /// Every subtask that acknowledged, in the order they did.
    pub subtasks: Vec<SubtaskCheckpointStats>,
    /// The exact size of a full encoding of the state it represents, all
    /// subtasks, bytes.
    pub state_bytes: u64,
    /// Bytes written for it, every part and `_metadata` (0 without
    /// storage), bytes.
    pub checkpointed_bytes: u64,
    /// In-flight records persisted as channel state, all tasks, bytes
    /// (unaligned checkpoints; 0 otherwise).
    pub persisted_bytes: u64,
    /// True when some part holds only changes (incremental).
    pub incremental: bool,
    /// True for an unaligned checkpoint.
    pub unaligned: bool,
}

impl CheckpointStats {
    /// True when completed.
    pub fn is_completed(&self) -> bool {
        self.status == CheckpointStatus::Completed
    }

    /// The slowest subtask's alignment, ns.
    pub fn max_alignment_ns(&self) -> u64 {
        self.subtasks
            .iter()
            .map(|a| a.alignment_ns)
            .max()
            .unwrap_or(0)
    }

    /// The most bytes any subtask buffered in alignment.
    pub fn max_buffered_bytes(&self) -> u64 {
        self.subtasks
            .iter()
            .map(|a| a.buffered_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// A figure's distribution over a whole run, in bounded memory: the exact
/// count, minimum and maximum, and quantiles from an HdrHistogram (three
/// significant digits: a quantile is within 0.1 % of the exact one). It
/// serializes as `{count, min, mean, p50, p90, p99, max}`.
#[derive(Clone)]
pub struct Distribution {
    hist: hdrhistogram::Histogram<u64>,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution {
            hist: hdrhistogram::Histogram::new(3).expect("3 significant digits are valid"),
        }
    }
}

impl std::fmt::Debug for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distribution")
            .field("count", &self.count())
            .field("p50", &self.quantile(0.5))
            .field("max", &self.max())
            .finish()
    }
}

impl PartialEq for Distribution {
    fn eq(&self, other: &Self) -> bool {
        self.hist == other.hist
    }
}

impl Distribution {
    /// Adds one value.
    pub fn record(&mut self, v: u64) {
        // The histogram grows to take `v` (`saturating_record` would clamp
        // it to the current highest value instead: grow first).
        if self.hist.record(v).is_err() {
            self.hist.saturating_record(v);
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The value at quantile `q` (0 to 1; 0 when nothing was recorded).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            return 0;
        }
        self.hist.value_at_quantile(q)
    }

    /// The smallest value (0 when nothing was recorded).
    pub fn min(&self) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.min()
        }
    }

    /// The largest value (0 when nothing was recorded).
    pub fn max(&self) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.max()
        }
    }

    /// The mean (0 when nothing was recorded).
    pub fn mean(&self) -> f64 {
        if self.hist.is_empty() {
            0.0
        } else {
            self.hist.mean()
        }
    }
}

impl Serialize for Distribution {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Distribution", 7)?;
        st.serialize_field("count", &self.count())?;
        st.serialize_field("min", &self.min())?;
        st.serialize_field("mean", &self.mean())?;
        st.serialize_field("p50", &self.quantile(0.5))?;
        st.serialize_field("p90", &self.quantile(0.9))?;
        st.serialize_field("p99", &self.quantile(0.99))?;
        st.serialize_field("max", &self.max())?;
        st.end()
    }
}

/// Exact counts of a run's checkpoints by outcome, however long it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckpointCounts {
    /// Checkpoints triggered (savepoints and the final one included).
    pub triggered: u64,
    /// Completed.
    pub completed: u64,
    /// Aborted, every reason.
    pub aborted: u64,
    /// Aborted, by reason.
    pub aborted_by_reason: BTreeMap<AbortReason, u64>,
    /// Triggered, neither completed nor aborted yet.
    pub in_progress: u64,
    /// Completed checkpoints taken unaligned.
    pub unaligned_completed: u64,
}

/// Distributions of the figures of a run's completed checkpoints (Flink's
/// checkpoint summary), in bounded memory however long the job runs. Times
/// in ns, sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CheckpointSummary {
    /// End to end, trigger to complete ([`CheckpointStats::duration_ns`]).
    pub duration_ns: Distribution,
    /// Per checkpoint, its largest start delay.
    pub start_delay_ns: Distribution,
    /// Per checkpoint, its slowest subtask's alignment.
    pub alignment_ns: Distribution,
    /// Per checkpoint, the most bytes a subtask buffered in its alignment.
    pub buffered_bytes: Distribution,
    /// Per subtask and checkpoint, the synchronous part.
    pub sync_ns: Distribution,
    /// Per subtask and checkpoint, the asynchronous part.
    pub async_ns: Distribution,
    /// Per checkpoint, the full size of the state it represents.
    pub state_bytes: Distribution,
    /// Per checkpoint, the bytes written for it.
    pub checkpointed_bytes: Distribution,
    /// Per checkpoint, in-flight bytes persisted as channel state.
    pub persisted_bytes: Distribution,
}

impl CheckpointSummary {
    fn add(&mut self, c: &CheckpointStats) {
        self.duration_ns.record(c.duration_ns);
        self.start_delay_ns.record(c.start_delay_ns);
        self.alignment_ns.record(c.max_alignment_ns());
        self.buffered_bytes.record(c.max_buffered_bytes());
        for t in &c.subtasks {
            self.sync_ns.record(t.sync_ns);
            self.async_ns.record(t.async_ns);
        }
        self.state_bytes.record(c.state_bytes);
        self.checkpointed_bytes.record(c.checkpointed_bytes);
        self.persisted_bytes.record(c.persisted_bytes);
    }
}

/// A job's checkpoint statistics, kept in bounded memory: the last
/// `capacity` checkpoints in full, exact counts and summaries of all. The
/// coordinator updates it as checkpoints are triggered and end (O(1) each,
/// amortized); [`crate::JobHandle::metrics`] copies at most `capacity`
/// entries.
#[derive(Debug)]
pub(crate) struct CheckpointHistory {
    capacity: usize,
    /// Pending checkpoints, by id.
    pending: BTreeMap<CheckpointId, CheckpointStats>,
    /// The last `capacity` that ended, oldest first.
    ended: VecDeque<CheckpointStats>,
    counts: CheckpointCounts,
    summary: CheckpointSummary,
    last_completed: Option<CheckpointStats>,
}

impl CheckpointHistory {
    /// An empty history keeping the last `capacity` checkpoints.
    pub(crate) fn new(capacity: usize) -> Self {
        CheckpointHistory {
            capacity,
            pending: BTreeMap::new(),
            ended: VecDeque::new(),
            counts: CheckpointCounts::default(),
            summary: CheckpointSummary::default(),
            last_completed: None,
        }
    }

    /// Checkpoint `stats.id` was triggered.
    pub(crate) fn triggered(&mut self, stats: CheckpointStats) {
        self.counts.triggered += 1;
        self.counts.in_progress += 1;
        self.pending.insert(stats.id, stats);
    }

    /// A checkpoint ended (completed or aborted): `stats` are its final
    /// figures.
    pub(crate) fn ended(&mut self, stats: CheckpointStats) {
        if self.pending.remove(&stats.id).is_some() {
            self.counts.in_progress -= 1;
        }
        match stats.status {
            CheckpointStatus::Completed => {
                self.counts.completed += 1;
                self.counts.unaligned_completed += u64::from(stats.unaligned);
                self.summary.add(&stats);
                self.last_completed = Some(stats.clone());
            }
            CheckpointStatus::Aborted(r) => {
                self.counts.aborted += 1;
                *self.counts.aborted_by_reason.entry(r).or_default() += 1;
            }
            CheckpointStatus::Pending => {}
        }
        if self.capacity == 0 {
            return;
        }
        if self.ended.len() == self.capacity {
            self.ended.pop_front();
        }
        self.ended.push_back(stats);
    }

    /// The last `capacity` checkpoints, pending ones included, by id.
    pub(crate) fn recent(&self) -> Vec<CheckpointStats> {
        let mut all: Vec<CheckpointStats> = self
            .ended
            .iter()
            .chain(self.pending.values())
            .cloned()
            .collect();
        all.sort_by_key(|c| c.id);
        let extra = all.len().saturating_sub(self.capacity);
        all.drain(..extra);
        all
    }

    pub(crate) fn counts(&self) -> &CheckpointCounts {
        &self.counts
    }

    pub(crate) fn summary(&self) -> &CheckpointSummary {
        &self.summary
    }

    pub(crate) fn last_completed(&self) -> Option<&CheckpointStats> {
        self.last_completed.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(id: u64, status: CheckpointStatus) -> CheckpointStats {
        CheckpointStats {
            id: CheckpointId(id),
            kind: SnapshotKind::Checkpoint,
            is_final: false,
            status,
            trigger_ns: id,
            duration_ns: id % 1000,
            start_delay_ns: 0,
            subtasks: Vec::new(),
            state_bytes: 10,
            checkpointed_bytes: 5,
            persisted_bytes: 0,
            incremental: false,
            unaligned: false,
        }
    }

    /// 100,000 checkpoints through the history: at most `capacity` kept
    /// in full, the newest ones, and exact counts of all.
    #[test]
    fn a_long_run_keeps_the_last_n_and_exact_counts() {
        let mut h = CheckpointHistory::new(1000);
        for id in 1..=100_000u64 {
            h.triggered(stats(id, CheckpointStatus::Pending));
            let status = if id % 10 == 0 {
                CheckpointStatus::Aborted(AbortReason::Timeout)
            } else if id % 10 == 5 {
                CheckpointStatus::Aborted(AbortReason::Subsumed)
            } else {
                CheckpointStatus::Completed
            };
            h.ended(stats(id, status));
        }
        // One still pending at the end.
        h.triggered(stats(100_001, CheckpointStatus::Pending));
        let recent = h.recent();
        assert_eq!(recent.len(), 1000);
        assert_eq!(recent.first().unwrap().id, CheckpointId(99_002));
        assert_eq!(recent.last().unwrap().id, CheckpointId(100_001));
        assert_eq!(recent.last().unwrap().status, CheckpointStatus::Pending);
        let c = h.counts();
        assert_eq!(
            (c.triggered, c.completed, c.aborted, c.in_progress),
            (100_001, 80_000, 20_000, 1)
        );
        assert_eq!(c.aborted_by_reason[&AbortReason::Timeout], 10_000);
        assert_eq!(c.aborted_by_reason[&AbortReason::Subsumed], 10_000);
        let s = h.summary();
        assert_eq!(s.duration_ns.count(), 80_000);
        assert_eq!(s.duration_ns.max(), 999);
        assert!((495..=505).contains(&s.duration_ns.quantile(0.5)));
        assert_eq!(h.last_completed().unwrap().id, CheckpointId(99_999));
    }

    /// Values of any size are kept within 0.1 %: no clamping to what the
    /// histogram held first.
    #[test]
    fn a_distribution_takes_values_of_every_size() {
        let mut d = Distribution::default();
        for v in [3, 2_500_000, 60_000_000_000, 7] {
            d.record(v);
        }
        assert_eq!((d.count(), d.min()), (4, 3));
        assert!(d.max().abs_diff(60_000_000_000) <= 60_000_000);
        let p50 = d.quantile(0.5);
        assert!(p50 == 7, "p50 {p50}");
        let p75 = d.quantile(0.75);
        assert!(p75.abs_diff(2_500_000) <= 2_500, "p75 {p75}");
    }

    #[test]
    fn a_history_of_none_keeps_counts_only() {
        let mut h = CheckpointHistory::new(0);
        h.triggered(stats(1, CheckpointStatus::Pending));
        h.ended(stats(1, CheckpointStatus::Completed));
        assert!(h.recent().is_empty());
        assert_eq!(h.counts().completed, 1);
    }
}
