//! What the reference job's tasks share across the run's attempts
//! ([`Shared`]): each source's counters and schedule start, and the
//! sink's slot ([`SinkSlot`]) with its check and its latency recordings
//! ([`Recorded`](super::recorded::Recorded)), rolled back with the sink's state on a restart. The
//! report (`report`) is collected from it.

use super::config::RefJobConfig;
use super::recorded::Recorded;
use crate::workload::{SinkChanges, SinkCheck};
use lockgate::{BoxError, CheckpointId, CheckpointMode};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// One source subtask's counters (over all attempts).
#[derive(Debug, Default)]
pub(super) struct SourceStats {
    /// Records emitted, replays included.
    pub(super) emitted: AtomicU64,
    /// First emission, ns (0: none yet).
    pub(super) first_emit_ns: AtomicU64,
    /// Last emission, ns.
    pub(super) last_emit_ns: AtomicU64,
    /// Most a batch's first record was late on its schedule, ns.
    pub(super) max_behind_ns: AtomicU64,
    /// This source's schedule start in this process (see `RefSource::t0`):
    /// an in-process restart keeps it.
    pub(super) t0: OnceLock<i128>,
    /// True once a first attempt of this source started (a later instance
    /// is a restart and shifts its schedule).
    pub(super) started: AtomicBool,
    /// The next record's `n` after the last poll (W4's expected records
    /// are those below each source's final position).
    pub(super) position: AtomicU64,
}

/// What the sink keeps outside its operator (one per sink subtask, i.e.
/// per recording thread), across the run's attempts.
///
/// Each latency is recorded once: without checkpoints into `recorded`;
/// with them into `open_interval`, the interval since the sink's last
/// snapshot. A snapshot of `id` closes that interval into `unsettled`; when
/// `id` completes, the intervals up to it move to `settled`, and a
/// thread at idle priority adds them into `merged`
/// ([`Shared::merge_all_settled`]); a
/// restart from `c` settles the intervals up to `c` and drops the later
/// ones. The report's latencies are `recorded`, `merged` and every
/// interval not merged yet ([`SinkSlot::total`]).
#[derive(Debug)]
pub(super) struct SinkSlot {
    pub(super) check: SinkCheck,
    /// Without checkpoints: every latency (no restart takes any out).
    pub(super) recorded: Recorded,
    /// With checkpoints: the intervals of completed checkpoints, merged.
    /// A thread at idle priority merges [`SinkSlot::settled`] into it
    /// (locking this slot only to take them), so the sink's checkpoints
    /// spend no completed checkpoint's merge (100-300 µs a checkpoint at
    /// W2, measured with a temporary timer around the merge) unless that
    /// thread fell `MAX_SETTLED` intervals behind. A restart from nothing
    /// replaces it (a merge under way goes to the replaced one).
    pub(super) merged: Arc<Mutex<Recorded>>,
    /// With checkpoints: the intervals of completed checkpoints not yet
    /// in `merged` (moved here by the completion, in no time).
    pub(super) settled: Vec<Recorded>,
    /// With checkpoints: what was recorded before the sink's snapshot of
    /// each checkpoint not yet known complete (and after the one before).
    pub(super) unsettled: std::collections::BTreeMap<CheckpointId, Recorded>,
    /// With checkpoints: what was recorded since the last snapshot.
    pub(super) open_interval: Option<Recorded>,
    /// Empty [`Recorded`]s made off the sink's thread for the next
    /// intervals, so that the sink's synchronous snapshot part allocates
    /// and zeroes nothing (two full histograms: ~420 KiB), at most
    /// [`SPARES`] ([`SinkSlot::offer_spare`]).
    pub(super) spares: Vec<Recorded>,
    /// A [`SinkChanges`] the snapshot thread is done with, for
    /// the sink's next synchronous snapshot part to fill
    /// ([`SinkCheck::take_changes_into`]): its lists keep their capacity,
    /// so that part allocates nothing.
    pub(super) spare_changes: Option<SinkChanges>,
    pub(super) deliveries: u64,
    pub(super) first_recorded_ns: u64,
    pub(super) last_delivery_ns: u64,
    /// Sink instances made so far (one per attempt of the job).
    pub(super) attempts: u32,
    /// The first delivery of every attempt after the first, ns.
    pub(super) attempt_starts: Vec<u64>,
    /// Committed output: the records since the sink's last barrier.
    pub(super) open_txn: super::committed::OpenTxn,
    /// Committed output: transactions pre-committed (made compact by the
    /// snapshot thread) and not committed yet, by checkpoint.
    pub(super) pending: std::collections::BTreeMap<u64, super::committed::Txn>,
}

/// Spares a sink slot keeps at most: two, so that the sink's snapshot
/// finds one left after its synchronous part took the other, and the
/// interval the completed checkpoint settled comes back as the next one
/// (with one, the snapshot allocated a new spare at every checkpoint and
/// the merge dropped the recycled one).
pub(super) const SPARES: usize = 2;

/// Intervals of the merged recordings kept whole (the newest): 2 s.
const KEEP_WHOLE_INTERVALS: usize = 20;

/// Settled intervals a sink slot holds at most before its snapshot merges
/// them itself: the thread that merges them runs in idle time, and a
/// closed loop (W1) leaves it little, so memory stays bounded (W1's
/// intervals are two histograms, ~420 KiB each).
pub(super) const MAX_SETTLED: usize = 16;

impl SinkSlot {
    /// Rolls the recordings back to the sink's snapshot of `to` (`None`:
    /// to nothing, a restart from the beginning).
    pub(super) fn roll_back(&mut self, to: Option<CheckpointId>) -> Result<(), BoxError> {
        let Some(to) = to else {
            self.recorded = Recorded::new();
            self.merged = Arc::new(Mutex::new(Recorded::new()));
            self.settled.clear();
            self.unsettled.clear();
            self.open_interval = self.open_interval.take().map(|_| Recorded::new());
            self.open_txn = Default::default();
            self.pending.clear();
            return Ok(());
        };
        // Up to `to`: part of the restored state; after it: replayed.
        self.settle(to);
        self.unsettled.clear();
        self.open_interval = self.open_interval.take().map(|_| Recorded::new());
        // Replayed: taken again into newer transactions. The restored
        // checkpoint's pending ones are committed by the restore.
        self.open_txn = Default::default();
        self.pending.clear();
        Ok(())
    }

    /// Keeps `recycled` (an emptied merged interval) as a spare while the
    /// slot has fewer than [`SPARES`]; without one, allocates a new spare
    /// here, off the sink's thread, only if the slot has none. Never while
    /// holding the slot's lock.
    pub(super) fn offer_spare(slot: &Mutex<SinkSlot>, recycled: Option<Recorded>) {
        let have = lock(slot).spares.len();
        let spare = match recycled {
            Some(r) if have < SPARES => r,
            None if have == 0 => Recorded::new(),
            _ => return,
        };
        let mut s = lock(slot);
        if s.spares.len() < SPARES {
            s.spares.push(spare);
        }
    }

    /// Settles the intervals up to `id` (checkpoint `id` completed: no
    /// restart goes back before it): they move to `settled`, to be
    /// merged ([`SinkSlot::merge_settled`]).
    pub(super) fn settle(&mut self, id: CheckpointId) {
        let later = self.unsettled.split_off(&id.next());
        let settled = std::mem::replace(&mut self.unsettled, later);
        self.settled.extend(settled.into_values());
    }

    /// Merges the settled intervals into `merged`, holding this slot's
    /// lock (`slot`) only to take them: the merge itself runs under
    /// `merged`'s lock, which the sink's thread does not take (the merge
    /// runs at idle priority, where it may wait long for a core). Lock
    /// order merged → slot, as every reader's ([`with_merged`]): the
    /// sink's snapshot also merges when too many wait (`MAX_SETTLED`), and
    /// on a cooperative worker its yield points suspend it until the
    /// worker's next slice, so a reader that held the slot while it waited
    /// for `merged` would stop the sink (which waits for the slot on that
    /// same worker) and with it the merge.
    ///
    /// Returns one of the merged intervals, emptied, for reuse as the next
    /// spare (`None` when nothing was settled).
    pub(super) fn merge_settled(slot: &Mutex<SinkSlot>) -> Result<Option<Recorded>, BoxError> {
        let mut merged = lock(slot).merged.clone();
        loop {
            let mut m = lock(&merged);
            let mut s = lock(slot);
            if !Arc::ptr_eq(&s.merged, &merged) {
                // A restart from nothing replaced it meanwhile.
                let now = s.merged.clone();
                drop(s);
                drop(m);
                merged = now;
                continue;
            }
            if s.settled.is_empty() {
                return Ok(None);
            }
            let settled = std::mem::take(&mut s.settled);
            drop(s);
            for r in &settled {
                // Each add is some 100 µs.
                lockgate::tuning::yield_point();
                m.add(r)?;
            }
            // All but the last few intervals compressed: a later record of an
            // older interval (delivered late) merges into its compressed form.
            if let Some(&last) = m.intervals.keys().next_back() {
                lockgate::tuning::yield_point();
                m.compact_before(last.saturating_sub(KEEP_WHOLE_INTERVALS))?;
            }
            drop(m);
            return Ok(settled.into_iter().next().map(|mut r| {
                r.reset();
                r
            }));
        }
    }

    /// Every latency recorded and not rolled back: the report's (a copy);
    /// `merged` is this slot's, locked ([`with_merged`]).
    pub(super) fn total(&self, merged: &Recorded) -> Result<Recorded, BoxError> {
        let mut t = Recorded::new();
        t.add(&self.recorded)?;
        t.add(merged)?;
        for r in self
            .settled
            .iter()
            .chain(self.unsettled.values())
            .chain(self.open_interval.iter())
        {
            t.add(r)?;
        }
        Ok(t)
    }

    /// The sink's snapshot of `id`: what was recorded since the last one
    /// is kept for a rollback until `id` completes.
    pub(super) fn close_interval(&mut self, id: CheckpointId) {
        if self.open_interval.is_some() {
            let fresh = self.spares.pop().unwrap_or_else(Recorded::new);
            if let Some(open) = self.open_interval.replace(fresh) {
                self.unsettled.insert(id, open);
            }
        }
    }
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) cfg: RefJobConfig,
    pub(super) mode: CheckpointMode,
    /// Set when a source restored a position from a checkpoint (after an
    /// in-process restart, or in a new process restoring a folder).
    pub(super) restored: std::sync::atomic::AtomicBool,
    pub(super) total: u64,
    pub(super) first_recorded_n: u64,
    /// The schedule's `t0` of a fresh job (first poll of any source).
    pub(super) t0: OnceLock<u64>,
    /// What the first attempt's sink restored (a `--restore` in a new
    /// process): the checkpoint and the distinct records it had received.
    pub(super) process_restore: OnceLock<(CheckpointId, u64)>,
    /// The sources' parallelism in the checkpoint that the first rescaled
    /// restore read (set by the sources' `restore_rescaled`).
    pub(super) rescaled_from: OnceLock<usize>,
    /// Where the sink's interval 0 starts (its first delivery's view of
    /// the schedule's start).
    pub(super) intervals_start: OnceLock<u64>,
    /// W4: the first send time recorded (after the warm-up), ns.
    pub(super) record_from: OnceLock<u64>,
    pub(super) sources: Vec<SourceStats>,
    /// Per split (index = split), the farthest position its records were
    /// generated to in this process, over every attempt (each source
    /// folds its lanes' positions in when it is dropped): the records at
    /// or after it were never generated, so never sent.
    pub(super) generated: Mutex<Vec<u64>>,
    pub(super) slots: Vec<Mutex<SinkSlot>>,
    /// Every checkpoint of the run as timeline bands, folded in as they
    /// end by the thread that reads the job's checkpoint events.
    pub(super) bands: Mutex<CheckpointBands>,
    /// That thread and the one it wakes after each completed checkpoint
    /// to merge the sink's settled intervals
    /// ([`Shared::merge_all_settled`]), joined when the report is
    /// collected.
    pub(super) events_thread:
        Mutex<Option<(std::thread::JoinHandle<()>, std::thread::JoinHandle<()>)>>,
    /// The first merge of settled intervals that failed: the sink's next
    /// snapshot fails with it.
    pub(super) settle_error: Mutex<Option<String>>,
    /// The checkpoints that ended since the load generator last asked
    /// ([`super::RefJobResults::take_checkpoint_interval`]).
    pub(super) interval: Mutex<CheckpointInterval>,
    /// Committed output: what the sink committed, outside the job's state.
    pub(super) committed: Option<Mutex<super::committed::CommittedOutput>>,
}

/// The checkpoints that ended in an interval of a run: counts, and the
/// end-to-end durations of the completed ones.
#[derive(Clone, Debug, Default)]
pub struct CheckpointInterval {
    /// Completed in the interval.
    pub completed: u64,
    /// Aborted in the interval.
    pub aborted: u64,
    /// End-to-end durations of those completed, ns.
    pub duration_ns: lockgate::stats::Distribution,
}

impl CheckpointInterval {
    /// Adds an ended checkpoint.
    pub fn add(&mut self, c: &lockgate::CheckpointStats) {
        match c.status {
            lockgate::stats::CheckpointStatus::Completed => {
                self.completed += 1;
                self.duration_ns.record(c.duration_ns);
            }
            lockgate::stats::CheckpointStatus::Aborted(_) => self.aborted += 1,
            lockgate::stats::CheckpointStatus::Pending => {}
        }
    }
}

/// The run's checkpoints as spans of time, trigger to end: completed and
/// aborted apart, spans less than [`CheckpointBands::MERGE_GAP_NS`] apart
/// merged, so that a run of any length with checkpoints every millisecond
/// keeps a bounded list (the timeline draws 100 ms intervals).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointBands {
    /// Completed checkpoints: `(trigger_ns, end_ns)`, ascending.
    pub completed: Vec<(u64, u64)>,
    /// Aborted checkpoints: `(trigger_ns, end_ns)`, ascending.
    pub aborted: Vec<(u64, u64)>,
}

impl CheckpointBands {
    /// Spans closer than this merge (1 ms).
    pub const MERGE_GAP_NS: u64 = 1_000_000;

    /// Adds an ended checkpoint.
    pub fn add(&mut self, c: &lockgate::CheckpointStats) {
        let span = (c.trigger_ns, c.trigger_ns.saturating_add(c.duration_ns));
        let list = match c.status {
            lockgate::stats::CheckpointStatus::Completed => &mut self.completed,
            lockgate::stats::CheckpointStatus::Aborted(_) => &mut self.aborted,
            lockgate::stats::CheckpointStatus::Pending => return,
        };
        match list.last_mut() {
            Some(last) if span.0 <= last.1.saturating_add(Self::MERGE_GAP_NS) => {
                last.1 = last.1.max(span.1);
            }
            _ => list.push(span),
        }
    }
}

impl Shared {
    /// Merges every sink slot's settled intervals into its `merged`, and
    /// offers each slot an emptied merged one as a spare
    /// ([`SinkSlot::offer_spare`]): on a thread at idle priority, after a
    /// checkpoint completed. A failure is kept for the sink's next
    /// snapshot to report.
    pub(super) fn merge_all_settled(&self) {
        for slot in &self.slots {
            match SinkSlot::merge_settled(slot) {
                Ok(recycled) => SinkSlot::offer_spare(slot, recycled),
                Err(e) => {
                    lock(&self.settle_error).get_or_insert(e.to_string());
                }
            }
        }
    }

    /// Records of the run that no source generated (see
    /// [`Shared::generated`]): those of each split from its farthest
    /// position on.
    pub(super) fn never_generated(&self) -> u64 {
        let splits = u64::from(crate::workload::SPLITS);
        // Records n < x of split s (n % SPLITS == s).
        let below = |s: u64, x: u64| if x > s { (x - s - 1) / splits + 1 } else { 0 };
        lock(&self.generated)
            .iter()
            .enumerate()
            .map(|(s, &pos)| {
                let s = s as u64;
                below(s, self.total) - below(s, pos.min(self.total))
            })
            .sum()
    }
}

/// Runs `f` with sink slot `slot` and its merged recordings, locked in
/// the order merged → slot (see [`SinkSlot::merge_settled`]).
pub(super) fn with_merged<R>(
    slot: &Mutex<SinkSlot>,
    f: impl FnOnce(&SinkSlot, &Recorded) -> R,
) -> R {
    let mut merged = lock(slot).merged.clone();
    loop {
        let m = lock(&merged);
        let s = lock(slot);
        if Arc::ptr_eq(&s.merged, &merged) {
            return f(&s, &m);
        }
        let now = s.merged.clone();
        drop(s);
        drop(m);
        merged = now;
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned slot means the sink panicked mid-batch; its data is still
    // the best we have for the report.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
