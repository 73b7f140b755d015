//! The checkpoint coordinator: what the job thread decides about
//! checkpoints, as a state machine fed with task events and clock ticks.
//!
//! Semantics follow Flink's `CheckpointCoordinator`:
//! - trigger checkpoint n at every running source every `interval`, with at
//!   most `max_concurrent` in flight and at least `min_pause` after the
//!   previous one ended;
//! - a task acknowledges n when its part is durable (its snapshot thread
//!   wrote it); once every task that was running at n's trigger
//!   acknowledged (a task that finished meanwhile counts as acknowledged),
//!   the metadata is written and published off the job thread, and n
//!   completes when that is durable too: then every task is notified;
//! - a decline, a timeout (which covers the whole checkpoint, writes
//!   included), or a failed storage write aborts n; a late result of an
//!   aborted checkpoint is discarded; completing n aborts every older
//!   pending checkpoint as `subsumed`;
//! - timeouts, storage errors and declines by failing snapshots count
//!   against `tolerable_failures` (Flink's `CheckpointFailureManager`);
//!   subsumption, cancellation and the alignment limit do not;
//! - when every source has ended, a final checkpoint is taken (FLIP-147) so
//!   that two-phase-commit sinks commit the tail of the output;
//! - in unaligned mode, and for aligned checkpoints with a timeout, the
//!   coordinator says when each pending checkpoint's barrier is due on the
//!   priority lanes ([`CoordinatorOutput::PriorityBarrier`]): at the
//!   trigger, or the timeout after it (rule 19).
//!
//! The coordinator is the one owner of a checkpoint's state while it is
//! pending (its acknowledgements, parts, statistics and deadlines); the
//! job thread delivers its outputs, the publisher thread
//! (`super::publisher`) carries out its storage requests.

use super::observer::CheckpointObserver;
use super::stats::CheckpointHistory;
use super::{CheckpointStats, CheckpointStatus, PartHandle, RestoredState, SubtaskCheckpointStats};
use crate::barrier::AbortReason;
use crate::config::CheckpointConfig;
use crate::transport::handoff::OutputSender;
use crate::types::control::{CheckpointEnd, Control};
use crate::types::element::{CheckpointBarrier, CheckpointId, CheckpointOptions, SnapshotKind};
use crossbeam_channel::Sender;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What the coordinator asks the job thread to do, in order: controls go
/// to tasks, priority barriers on every channel's priority lane, storage
/// requests to the publisher thread.
#[derive(Debug)]
pub(crate) enum CoordinatorOutput {
    /// Send `msg` to task `task`.
    Control { task: usize, msg: Control },
    /// Put this barrier on every channel's priority lane now (unaligned
    /// mode, or an aligned checkpoint past its timeout): it overtakes
    /// everything in flight (FLIP-76; FLINK-27251 for the timeout, as
    /// barriers still queued in outputs overtake too). A full lane drops
    /// its copy: the in-band barrier then switches each task on arrival.
    PriorityBarrier(CheckpointBarrier),
    /// Work for the publisher thread.
    Storage(StorageRequest),
}

/// What the publisher thread does for the coordinator, off the job thread.
#[derive(Debug)]
pub(crate) enum StorageRequest {
    /// Every part of `id` is durable: write its metadata and publish it,
    /// then answer with [`Coordinator::published`].
    Publish {
        id: CheckpointId,
        kind: SnapshotKind,
        trigger_ns: u64,
        parts: Vec<PartHandle>,
    },
    /// `id` was aborted: drop its unpublished parts.
    Discard { id: CheckpointId },
    /// `id` was published after it was aborted (a late result): delete it.
    Remove { id: CheckpointId },
    /// A checkpoint completed: apply the retention of completed ones.
    Retain,
}

struct Pending {
    kind: SnapshotKind,
    is_final: bool,
    trigger_ns: u64,
    barrier: CheckpointBarrier,
    /// When its barrier is due on the priority lanes (ns on the engine's
    /// clock), until it is put there.
    priority_due_ns: Option<u64>,
    /// Tasks whose acknowledgement is still missing.
    waiting: Vec<bool>,
    num_waiting: usize,
    parts: Vec<PartHandle>,
    subtasks: Vec<SubtaskCheckpointStats>,
    /// Every task acknowledged; the metadata is being written.
    publishing: bool,
    reply: Option<Sender<Result<CheckpointId, AbortReason>>>,
}

/// What a restart restores from.
#[derive(Clone, Debug)]
pub(crate) enum RestorePoint {
    /// The state the job was started from (given whole, e.g. merged from
    /// several folders): no checkpoint of this job completed since.
    Initial(RestoredState),
    /// A checkpoint this job completed, to read back from storage.
    Completed(CheckpointId),
}

/// The coordinator (see the module docs).
pub(crate) struct Coordinator {
    config: CheckpointConfig,
    enabled: bool,
    sources: Vec<usize>,
    finished: Vec<bool>,
    drained: Vec<bool>,
    next_id: u64,
    pending: BTreeMap<CheckpointId, Pending>,
    /// The statistics a [`crate::JobHandle`] reads: pending checkpoints,
    /// the last few ended ones, counts and summaries of all.
    history: Arc<Mutex<CheckpointHistory>>,
    /// Where each ended checkpoint's statistics go, when asked
    /// ([`crate::JobBuilder::checkpoint_events`]).
    events: Option<OutputSender<CheckpointStats>>,
    /// Told of each trigger and end (the job's telemetry).
    observer: Option<Box<dyn CheckpointObserver>>,
    latest: Option<RestorePoint>,
    /// Unaligned mode or an aligned-checkpoint timeout: how long after its
    /// trigger a checkpoint's barrier goes on the priority lanes.
    priority_after_ns: Option<u64>,
    /// False while periodic checkpoints are paused
    /// ([`crate::JobHandle::set_periodic_checkpoints`]).
    periodic: bool,
    last_trigger_ns: u64,
    /// When the last checkpoint marked full was triggered (`None`: none
    /// yet in this attempt, or it was aborted): the next is full.
    last_full_ns: Option<u64>,
    last_end_ns: u64,
    /// The newest completed checkpoint not yet read back by the publisher,
    /// and when it completed: with incremental checkpoints the next
    /// periodic one waits for it (see [`Coordinator::verified`]).
    unverified: Option<(CheckpointId, u64)>,
    consecutive_failures: u32,
    last_failure: Option<AbortReason>,
    /// What the storage said when it last failed a write.
    last_storage_error: Option<String>,
    final_kind: SnapshotKind,
    final_done: bool,
}

impl Coordinator {
    pub(crate) fn new(
        config: CheckpointConfig,
        num_tasks: usize,
        restored: Option<RestoredState>,
        history: Arc<Mutex<CheckpointHistory>>,
        events: Option<OutputSender<CheckpointStats>>,
    ) -> Self {
        let n = num_tasks;
        let next_id = restored.as_ref().map_or(1, |r| r.checkpoint.get() + 1);
        Coordinator {
            enabled: config.mode != crate::CheckpointMode::None,
            priority_after_ns: config.unaligned_after_ns(),
            periodic: true,
            config,
            sources: Vec::new(),
            finished: vec![false; n],
            drained: vec![false; n],
            next_id,
            pending: BTreeMap::new(),
            history,
            events,
            observer: None,
            latest: restored.map(RestorePoint::Initial),
            last_trigger_ns: 0,
            last_full_ns: None,
            unverified: None,
            last_end_ns: 0,
            consecutive_failures: 0,
            last_failure: None,
            last_storage_error: None,
            final_kind: SnapshotKind::Checkpoint,
            final_done: false,
        }
    }

    /// Tells `observer` of each checkpoint's trigger and end.
    pub(crate) fn set_observer(&mut self, observer: Box<dyn CheckpointObserver>) {
        self.observer = Some(observer);
    }

    /// The next checkpoint gets id `id` (after the ids already in storage).
    pub(crate) fn set_next_id(&mut self, id: CheckpointId) {
        self.next_id = self.next_id.max(id.get());
    }

    pub(crate) fn begin_attempt(
        &mut self,
        _restored: Option<CheckpointId>,
        sources: Vec<usize>,
        num_tasks: usize,
    ) {
        self.sources = sources;
        self.finished = vec![false; num_tasks];
        self.drained = vec![false; num_tasks];
        self.pending.clear();
        self.final_done = false;
        self.last_full_ns = None;
        self.last_trigger_ns = crate::util::clock::now_ns();
    }

    /// Records that `stats`'s checkpoint ended, and sends it to whoever
    /// subscribed.
    fn ended(&mut self, stats: CheckpointStats) {
        if let Some(o) = &mut self.observer {
            o.ended(&stats);
        }
        if let Some(tx) = &self.events {
            if tx.send(stats.clone()).is_err() {
                // The application dropped its end: no more events.
                self.events = None;
            }
        }
        lock(&self.history).ended(stats);
    }

    /// `Some(why)` once more checkpoints failed in a row than tolerated.
    pub(crate) fn too_many_failures(&self) -> Option<String> {
        (self.consecutive_failures > self.config.tolerable_failures).then(|| {
            let mut why = format!(
                "{} checkpoints failed in a row (tolerated: {}), the last with reason {}",
                self.consecutive_failures,
                self.config.tolerable_failures,
                self.last_failure.map_or("unknown", |r| r.as_str())
            );
            if self.last_failure == Some(AbortReason::StorageError) {
                if let Some(e) = &self.last_storage_error {
                    why.push_str(&format!(" ({e})"));
                }
            }
            why
        })
    }

    /// What a restart restores from (`None`: the beginning).
    pub(crate) fn latest_restore_point(&self) -> Option<RestorePoint> {
        self.latest.clone()
    }

    /// Pauses (`false`) or resumes the periodic triggers; checkpoints
    /// pending go on, and on-demand ones, savepoints and the final one are
    /// still taken. A resume triggers at once when an interval has passed.
    pub(crate) fn set_periodic(&mut self, periodic: bool) {
        self.periodic = periodic;
    }

    pub(crate) fn set_final_kind(&mut self, kind: SnapshotKind) {
        self.final_kind = kind;
    }

    fn running_tasks(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.finished.len()).filter(|t| !self.finished[*t])
    }

    /// Every running task, non-sources first: a source that learns that the
    /// final checkpoint completed ends its output, and downstream tasks must
    /// have their notification queued before that end reaches them.
    fn notify_all(&self, id: CheckpointId, completed: bool, out: &mut Vec<CoordinatorOutput>) {
        let (srcs, others): (Vec<usize>, Vec<usize>) =
            self.running_tasks().partition(|t| self.sources.contains(t));
        for task in others.into_iter().chain(srcs) {
            out.push(CoordinatorOutput::Control {
                task,
                msg: Control::Ended(
                    id,
                    if completed {
                        CheckpointEnd::Completed
                    } else {
                        CheckpointEnd::Aborted
                    },
                ),
            });
        }
    }

    fn trigger(
        &mut self,
        kind: SnapshotKind,
        is_final: bool,
        reply: Option<Sender<Result<CheckpointId, AbortReason>>>,
    ) -> Vec<CoordinatorOutput> {
        let mut out = Vec::new();
        let id = CheckpointId(self.next_id);
        // Ids start at most at storage's MAX_CHECKPOINT_ID + 1 (2^53):
        // saturating here is only a guard.
        self.next_id = self.next_id.saturating_add(1);
        let now = crate::util::clock::now_ns();
        self.last_trigger_ns = now;
        let waiting: Vec<bool> = (0..self.finished.len())
            .map(|t| !self.finished[t])
            .collect();
        let num_waiting = waiting.iter().filter(|w| **w).count();
        let full = kind == SnapshotKind::Savepoint
            || self.last_full_ns.is_none_or(|t| {
                now.saturating_sub(t) >= self.config.full_min_interval.as_nanos() as u64
            });
        if full {
            self.last_full_ns = Some(now);
        }
        let barrier = CheckpointBarrier {
            id,
            timestamp_ns: now,
            options: CheckpointOptions {
                kind,
                is_final,
                full,
            },
        };
        // Savepoints and the final checkpoint stay aligned
        // (`CheckpointBarrier::must_align`, rule 18).
        let priority_due_ns = self
            .priority_after_ns
            .filter(|_| !barrier.must_align())
            .map(|t| now.saturating_add(t));
        self.pending.insert(
            id,
            Pending {
                kind,
                is_final,
                trigger_ns: now,
                barrier,
                priority_due_ns,
                waiting,
                num_waiting,
                parts: Vec::new(),
                subtasks: Vec::new(),
                publishing: false,
                reply,
            },
        );
        lock(&self.history).triggered(CheckpointStats {
            id,
            kind,
            is_final,
            status: CheckpointStatus::Pending,
            trigger_ns: now,
            duration_ns: 0,
            start_delay_ns: 0,
            subtasks: Vec::new(),
            state_bytes: 0,
            checkpointed_bytes: 0,
            persisted_bytes: 0,
            incremental: false,
            unaligned: false,
        });
        if let Some(o) = &mut self.observer {
            o.triggered(id, kind, is_final);
        }
        // Due at once in unaligned mode (T = 0): on the lanes before any
        // task hears of the checkpoint.
        self.due_priority_barriers(now, &mut out);
        for &task in &self.sources {
            if !self.finished[task] {
                out.push(CoordinatorOutput::Control {
                    task,
                    msg: Control::Trigger(barrier),
                });
            }
        }
        if num_waiting == 0 {
            out.extend(self.all_acknowledged(id));
        }
        out
    }

    pub(crate) fn trigger_on_demand(
        &mut self,
        reply: Sender<Result<CheckpointId, AbortReason>>,
    ) -> Vec<CoordinatorOutput> {
        if !self.enabled || self.all_drained() {
            let _ = reply.send(Err(AbortReason::Declined));
            return Vec::new();
        }
        self.trigger(SnapshotKind::Checkpoint, false, Some(reply))
    }

    fn all_drained(&self) -> bool {
        !self.sources.is_empty()
            && self
                .sources
                .iter()
                .all(|s| self.drained[*s] || self.finished[*s])
    }

    /// The publisher read checkpoint `id` back: its parts may be bases.
    ///
    /// Until then the next periodic checkpoint waits (at most 50 ms after
    /// the completion; reading back a 5 MB checkpoint took over 10 ms with
    /// both cores busy): triggered at once, its parts would build on
    /// the checkpoint before, with the changes of two intervals, or after
    /// a pause of the periodic checkpoints with all of the pause's changes
    /// twice (two such checkpoints of 190 ms in a row, W2 with 1,000,000
    /// keys under `loadgen --ab`).
    pub(crate) fn verified(&mut self, id: CheckpointId) {
        if self.unverified.is_some_and(|(u, _)| u <= id) {
            self.unverified = None;
        }
    }

    /// When the next periodic trigger may come for the read-back of the
    /// newest completed checkpoint ([`Coordinator::verified`]).
    fn verified_by_ns(&self) -> u64 {
        let wait = std::time::Duration::from_millis(50);
        self.unverified
            .map_or(0, |(_, t)| t.saturating_add(wait.as_nanos() as u64))
    }

    /// When [`Coordinator::tick`] has something to do next (a trigger or a
    /// checkpoint timeout), in ns on [`crate::util::clock::now_ns`]'s clock;
    /// `None` when nothing is scheduled (no checkpointing).
    pub(crate) fn next_wakeup_ns(&self) -> Option<u64> {
        if !self.enabled {
            return None;
        }
        let timeout = self.config.timeout.as_nanos() as u64;
        let expiry = self
            .pending
            .values()
            .flat_map(|p| {
                [
                    Some(p.trigger_ns.saturating_add(timeout + 1)),
                    p.priority_due_ns,
                ]
            })
            .flatten()
            .min();
        let trigger = if self.all_drained() {
            // the final checkpoint is triggered once nothing is pending
            (self.pending.is_empty() && !self.final_done).then(crate::util::clock::now_ns)
        } else if self.periodic && self.pending.len() < self.config.max_concurrent {
            self.config.interval.map(|i| {
                let due = self.last_trigger_ns.saturating_add(i.as_nanos() as u64);
                let paused = self
                    .last_end_ns
                    .saturating_add(self.config.min_pause.as_nanos() as u64);
                due.max(paused).max(self.verified_by_ns())
            })
        } else {
            None
        };
        match (expiry, trigger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn tick(&mut self) -> Vec<CoordinatorOutput> {
        let mut out = Vec::new();
        if !self.enabled {
            return out;
        }
        let now = crate::util::clock::now_ns();
        self.due_priority_barriers(now, &mut out);
        let timeout = self.config.timeout.as_nanos() as u64;
        let expired: Vec<CheckpointId> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.trigger_ns) > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            out.extend(self.abort(id, AbortReason::Timeout));
        }
        if self.all_drained() {
            if !self.final_done
                && !self.pending.values().any(|p| p.is_final)
                && self.pending.is_empty()
            {
                out.extend(self.trigger(self.final_kind, true, None));
            }
            return out;
        }
        if let Some(interval) = self.config.interval.filter(|_| self.periodic) {
            let due = now.saturating_sub(self.last_trigger_ns) >= interval.as_nanos() as u64;
            let paused =
                now.saturating_sub(self.last_end_ns) >= self.config.min_pause.as_nanos() as u64;
            let verified = now >= self.verified_by_ns();
            if due && paused && verified && self.pending.len() < self.config.max_concurrent {
                out.extend(self.trigger(SnapshotKind::Checkpoint, false, None));
            }
        }
        out
    }

    /// Puts on the priority lanes the barrier of every pending checkpoint
    /// due by `now`, once each.
    fn due_priority_barriers(&mut self, now: u64, out: &mut Vec<CoordinatorOutput>) {
        for p in self.pending.values_mut() {
            if p.priority_due_ns.is_some_and(|due| due <= now) {
                p.priority_due_ns = None;
                out.push(CoordinatorOutput::PriorityBarrier(p.barrier));
            }
        }
    }

    /// Task `task`'s part of `id` is complete and durable in `part`.
    pub(crate) fn ack(
        &mut self,
        task: usize,
        id: CheckpointId,
        part: PartHandle,
        stats: SubtaskCheckpointStats,
    ) -> Vec<CoordinatorOutput> {
        let Some(p) = self.pending.get_mut(&id) else {
            return Vec::new(); // already aborted
        };
        if !p.waiting[task] {
            return Vec::new();
        }
        p.waiting[task] = false;
        p.num_waiting -= 1;
        p.parts.push(part);
        p.subtasks.push(stats);
        if p.num_waiting == 0 {
            self.all_acknowledged(id)
        } else {
            Vec::new()
        }
    }

    /// Every task acknowledged `id`: publish it.
    fn all_acknowledged(&mut self, id: CheckpointId) -> Vec<CoordinatorOutput> {
        let Some(p) = self.pending.get_mut(&id) else {
            return Vec::new();
        };
        p.publishing = true;
        vec![CoordinatorOutput::Storage(StorageRequest::Publish {
            id,
            kind: p.kind,
            trigger_ns: p.trigger_ns,
            parts: p.parts.clone(),
        })]
    }

    /// The publisher's answer for `id`: its bytes written, or what the
    /// storage said. A late answer (the checkpoint was aborted meanwhile,
    /// e.g. it timed out) is discarded: a published one is deleted.
    pub(crate) fn published(
        &mut self,
        id: CheckpointId,
        result: Result<u64, String>,
    ) -> Vec<CoordinatorOutput> {
        let publishing = self.pending.get(&id).is_some_and(|p| p.publishing);
        match result {
            Ok(_) if !publishing => vec![CoordinatorOutput::Storage(StorageRequest::Remove { id })],
            Err(_) if !publishing => Vec::new(),
            Ok(bytes) => self.complete(id, bytes),
            Err(e) => {
                tracing::warn!(checkpoint = %id, error = %e, "writing the checkpoint failed");
                self.last_storage_error = Some(e);
                self.abort(id, AbortReason::StorageError)
            }
        }
    }

    fn complete(&mut self, id: CheckpointId, written_bytes: u64) -> Vec<CoordinatorOutput> {
        let mut out = Vec::new();
        let Some(mut p) = self.pending.remove(&id) else {
            return out;
        };
        let now = crate::util::clock::now_ns();
        self.last_end_ns = now;
        if self.config.incremental {
            self.unverified = Some((id, now));
        }
        self.consecutive_failures = 0;
        if p.is_final {
            self.final_done = true;
        }
        let mut s = p.stats(CheckpointStatus::Completed, now);
        // Everything written (parts, headers, `_metadata`), less the
        // channel state, which `persisted_bytes` counts.
        s.checkpointed_bytes = written_bytes.saturating_sub(s.persisted_bytes);
        self.ended(s);
        // A restart reads the checkpoint back (its chains of incremental
        // parts are in storage): only the id is kept.
        self.latest = Some(RestorePoint::Completed(id));
        if let Some(r) = p.reply {
            let _ = r.send(Ok(id));
        }
        out.push(CoordinatorOutput::Storage(StorageRequest::Retain));
        // Completing n subsumes every older pending checkpoint.
        let older: Vec<CheckpointId> = self.pending.range(..id).map(|(k, _)| *k).collect();
        for o in older {
            out.extend(self.abort(o, AbortReason::Subsumed));
        }
        self.notify_all(id, true, &mut out);
        out
    }

    fn abort(&mut self, id: CheckpointId, reason: AbortReason) -> Vec<CoordinatorOutput> {
        let mut out = Vec::new();
        let Some(mut p) = self.pending.remove(&id) else {
            return out;
        };
        let now = crate::util::clock::now_ns();
        self.last_end_ns = now;
        if p.barrier.options.full {
            self.last_full_ns = None;
        }
        if reason.counts_as_failure() {
            self.consecutive_failures += 1;
            self.last_failure = Some(reason);
        }
        let s = p.stats(CheckpointStatus::Aborted(reason), now);
        self.ended(s);
        if let Some(r) = p.reply {
            let _ = r.send(Err(reason));
        }
        if reason == AbortReason::Timeout {
            // Said when it happens: a storage that hangs shows nothing else
            // until the job fails.
            let timeouts = lock(&self.history)
                .counts()
                .aborted_by_reason
                .get(&AbortReason::Timeout)
                .copied()
                .unwrap_or(0);
            let waiting: Vec<String> = crate::util::calls::storage_calls_in_progress()
                .iter()
                .take(3)
                .map(ToString::to_string)
                .collect();
            tracing::warn!(
                checkpoint = %id,
                timeouts,
                in_a_row = self.consecutive_failures,
                tolerated = self.config.tolerable_failures,
                "checkpoint {id} timed out after {:.1} s ({timeouts} so far){}",
                self.config.timeout.as_secs_f64(),
                if waiting.is_empty() {
                    String::new()
                } else {
                    format!("; storage calls still waiting: {}", waiting.join("; "))
                }
            );
        } else {
            tracing::debug!(checkpoint = %id, %reason, "checkpoint aborted");
        }
        out.push(CoordinatorOutput::Storage(StorageRequest::Discard { id }));
        self.notify_all(id, false, &mut out);
        out
    }

    /// Task `task` declined `id`; `detail`: what the storage said, for a
    /// failed write of its part.
    pub(crate) fn decline(
        &mut self,
        _task: usize,
        id: CheckpointId,
        reason: AbortReason,
        detail: Option<String>,
    ) -> Vec<CoordinatorOutput> {
        if !self.pending.contains_key(&id) {
            return Vec::new();
        }
        if let Some(d) = detail {
            tracing::warn!(checkpoint = %id, error = %d, "writing a task's part failed");
            self.last_storage_error = Some(d);
        }
        self.abort(id, reason)
    }

    pub(crate) fn task_finished(&mut self, task: usize) -> Vec<CoordinatorOutput> {
        self.finished[task] = true;
        let mut out = Vec::new();
        let ids: Vec<CheckpointId> = self.pending.keys().copied().collect();
        for id in ids {
            let p = self.pending.get_mut(&id).expect("listed");
            if p.waiting[task] {
                p.waiting[task] = false;
                p.num_waiting -= 1;
                if p.num_waiting == 0 {
                    out.extend(self.all_acknowledged(id));
                }
            }
        }
        out
    }

    pub(crate) fn source_drained(
        &mut self,
        task: usize,
        _savepoint: bool,
    ) -> Vec<CoordinatorOutput> {
        self.drained[task] = true;
        self.tick()
    }

    /// A failure ended the attempt: every pending checkpoint is aborted.
    /// Returns what is left to do for storage (its controls reach no task:
    /// the attempt's tasks are gone).
    pub(crate) fn abort_all(&mut self, reason: AbortReason) -> Vec<CoordinatorOutput> {
        let ids: Vec<CheckpointId> = self.pending.keys().copied().collect();
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.abort(id, reason));
        }
        out
    }
}

impl Pending {
    /// The checkpoint's final statistics, ended now (`now_ns`) with
    /// `status`; the checkpoint-level figures from its subtasks' (Flink's
    /// rules: the start delay is the largest subtask's; sizes add up).
    fn stats(&mut self, status: CheckpointStatus, now_ns: u64) -> CheckpointStats {
        let subtasks = std::mem::take(&mut self.subtasks);
        CheckpointStats {
            id: self.barrier.id,
            kind: self.kind,
            is_final: self.is_final,
            status,
            trigger_ns: self.trigger_ns,
            duration_ns: now_ns.saturating_sub(self.trigger_ns),
            start_delay_ns: subtasks.iter().map(|t| t.start_delay_ns).max().unwrap_or(0),
            state_bytes: subtasks.iter().map(|t| t.state_bytes).sum(),
            persisted_bytes: subtasks.iter().map(|t| t.persisted_bytes).sum(),
            checkpointed_bytes: subtasks.iter().map(|t| t.checkpointed_bytes).sum(),
            incremental: subtasks.iter().any(|t| t.incremental),
            unaligned: subtasks.iter().any(|t| t.unaligned),
            subtasks,
        }
    }
}

/// The history's lock; a panic while it was held cannot leave it
/// half-updated in a way that matters for statistics.
fn lock(h: &Mutex<CheckpointHistory>) -> std::sync::MutexGuard<'_, CheckpointHistory> {
    h.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
