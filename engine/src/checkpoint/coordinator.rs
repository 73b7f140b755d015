//! The checkpoint coordinator: what the job thread decides about
//! checkpoints, as a state machine fed with task events and clock ticks.
//!
//! Semantics follow Flink's `CheckpointCoordinator`:
//! - trigger checkpoint n at every running source every `interval`, with at
//!   most `max_concurrent` in flight and at least `min_pause` after the
//!   previous one ended;
//! - n completes when every task that was running at its trigger
//!   acknowledged it (a task that finished meanwhile counts as acknowledged);
//!   it is then written to storage and every task is notified;
//! - a decline, a timeout, or a failed storage write aborts n; completing n
//!   aborts every older pending checkpoint as `subsumed`;
//! - timeouts, storage errors and declines by failing snapshots count
//!   against `tolerable_failures` (Flink's `CheckpointFailureManager`);
//!   subsumption, cancellation and the alignment limit do not;
//! - when every source has ended, a final checkpoint is taken (FLIP-147) so
//!   that two-phase-commit sinks commit the tail of the output.

use super::{CheckpointStats, CheckpointStatus, RestoredState, TaskAlignment};
use crate::barrier::{AbortReason, AlignmentStats};
use crate::config::CheckpointConfig;
use crate::element::{CheckpointBarrier, CheckpointId, CheckpointOptions, SnapshotKind};
use crate::protocol::{Control, OperatorSnapshot};
use crate::task_id::TaskId;
use crossbeam_channel::Sender;
use std::collections::{BTreeMap, HashMap};

/// Where completed checkpoints go (the storage adapter of the job).
pub(crate) trait CompletedSink: Send {
    /// Persists a completed checkpoint; returns the bytes written.
    fn persist(
        &mut self,
        id: CheckpointId,
        kind: SnapshotKind,
        trigger_ns: u64,
        states: &HashMap<TaskId, Vec<OperatorSnapshot>>,
    ) -> Result<u64, String>;
}

/// What the coordinator asks the job thread to send.
pub(crate) enum CoordinatorOutput {
    Control { task: usize, msg: Control },
}

struct Pending {
    kind: SnapshotKind,
    is_final: bool,
    trigger_ns: u64,
    /// Tasks whose acknowledgement is still missing.
    waiting: Vec<bool>,
    num_waiting: usize,
    states: HashMap<TaskId, Vec<OperatorSnapshot>>,
    alignments: Vec<TaskAlignment>,
    sources_acked: usize,
    last_source_ack_ns: u64,
    state_bytes: u64,
    reply: Option<Sender<Result<CheckpointId, AbortReason>>>,
}

/// The coordinator (see the module docs).
pub(crate) struct Coordinator {
    config: CheckpointConfig,
    enabled: bool,
    task_names: Vec<TaskId>,
    sources: Vec<usize>,
    finished: Vec<bool>,
    drained: Vec<bool>,
    next_id: u64,
    pending: BTreeMap<CheckpointId, Pending>,
    stats: Vec<CheckpointStats>,
    latest: Option<RestoredState>,
    sink: Option<Box<dyn CompletedSink>>,
    last_trigger_ns: u64,
    last_end_ns: u64,
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
        task_names: Vec<TaskId>,
        sink: Option<Box<dyn CompletedSink>>,
        restored: Option<RestoredState>,
    ) -> Self {
        let n = task_names.len();
        let next_id = restored.as_ref().map_or(1, |r| r.checkpoint.get() + 1);
        Coordinator {
            enabled: config.mode != crate::CheckpointMode::None,
            config,
            task_names,
            sources: Vec::new(),
            finished: vec![false; n],
            drained: vec![false; n],
            next_id,
            pending: BTreeMap::new(),
            stats: Vec::new(),
            latest: restored,
            sink,
            last_trigger_ns: 0,
            last_end_ns: 0,
            consecutive_failures: 0,
            last_failure: None,
            last_storage_error: None,
            final_kind: SnapshotKind::Checkpoint,
            final_done: false,
        }
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
        self.last_trigger_ns = crate::clock::now_ns();
    }

    pub(crate) fn stats(&self) -> Vec<CheckpointStats> {
        self.stats.clone()
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

    pub(crate) fn latest_restore_point(&self) -> Option<RestoredState> {
        self.latest.clone()
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
                msg: Control::Done(id, completed),
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
        let now = crate::clock::now_ns();
        self.last_trigger_ns = now;
        let waiting: Vec<bool> = (0..self.finished.len())
            .map(|t| !self.finished[t])
            .collect();
        let num_waiting = waiting.iter().filter(|w| **w).count();
        self.pending.insert(
            id,
            Pending {
                kind,
                is_final,
                trigger_ns: now,
                waiting,
                num_waiting,
                states: HashMap::new(),
                alignments: Vec::new(),
                sources_acked: 0,
                last_source_ack_ns: now,
                state_bytes: 0,
                reply,
            },
        );
        self.stats.push(CheckpointStats {
            id,
            kind,
            is_final,
            status: CheckpointStatus::Pending,
            trigger_ns: now,
            duration_ns: 0,
            start_delay_ns: 0,
            alignments: Vec::new(),
            state_bytes: 0,
        });
        let barrier = CheckpointBarrier {
            id,
            timestamp_ns: now,
            options: CheckpointOptions { kind, is_final },
        };
        for &task in &self.sources {
            if !self.finished[task] {
                out.push(CoordinatorOutput::Control {
                    task,
                    msg: Control::Trigger(barrier),
                });
            }
        }
        if num_waiting == 0 {
            out.extend(self.complete(id));
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

    /// When [`Coordinator::tick`] has something to do next (a trigger or a
    /// checkpoint timeout), in ns on [`crate::clock::now_ns`]'s clock;
    /// `None` when nothing is scheduled (no checkpointing).
    pub(crate) fn next_wakeup_ns(&self) -> Option<u64> {
        if !self.enabled {
            return None;
        }
        let timeout = self.config.timeout.as_nanos() as u64;
        let expiry = self
            .pending
            .values()
            .map(|p| p.trigger_ns.saturating_add(timeout + 1))
            .min();
        let trigger = if self.all_drained() {
            // the final checkpoint is triggered once nothing is pending
            (self.pending.is_empty() && !self.final_done).then(crate::clock::now_ns)
        } else if self.pending.len() < self.config.max_concurrent {
            self.config.interval.map(|i| {
                let due = self.last_trigger_ns.saturating_add(i.as_nanos() as u64);
                let paused = self
                    .last_end_ns
                    .saturating_add(self.config.min_pause.as_nanos() as u64);
                due.max(paused)
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
        let now = crate::clock::now_ns();
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
        if let Some(interval) = self.config.interval {
            let due = now.saturating_sub(self.last_trigger_ns) >= interval.as_nanos() as u64;
            let paused =
                now.saturating_sub(self.last_end_ns) >= self.config.min_pause.as_nanos() as u64;
            if due && paused && self.pending.len() < self.config.max_concurrent {
                out.extend(self.trigger(SnapshotKind::Checkpoint, false, None));
            }
        }
        out
    }

    pub(crate) fn ack(
        &mut self,
        task: usize,
        id: CheckpointId,
        states: Vec<OperatorSnapshot>,
        alignment: AlignmentStats,
    ) -> Vec<CoordinatorOutput> {
        let is_source = self.sources.contains(&task);
        let Some(p) = self.pending.get_mut(&id) else {
            return Vec::new(); // already aborted
        };
        if !p.waiting[task] {
            return Vec::new();
        }
        p.waiting[task] = false;
        p.num_waiting -= 1;
        p.state_bytes += states.iter().map(|s| s.bytes.len() as u64).sum::<u64>();
        p.states.insert(self.task_names[task].clone(), states);
        if is_source {
            p.sources_acked += 1;
            p.last_source_ack_ns = crate::clock::now_ns();
        } else {
            p.alignments.push(TaskAlignment {
                task: self.task_names[task].clone(),
                duration_ns: alignment.duration_ns,
                buffered_bytes: alignment.buffered_bytes,
            });
        }
        if p.num_waiting == 0 {
            self.complete(id)
        } else {
            Vec::new()
        }
    }

    fn complete(&mut self, id: CheckpointId) -> Vec<CoordinatorOutput> {
        let mut out = Vec::new();
        let Some(p) = self.pending.remove(&id) else {
            return out;
        };
        if let Some(sink) = self.sink.as_mut() {
            if let Err(e) = sink.persist(id, p.kind, p.trigger_ns, &p.states) {
                tracing::warn!(checkpoint = %id, error = %e, "writing the checkpoint failed");
                self.last_storage_error = Some(e.clone());
                self.pending.insert(id, p);
                return self.abort(id, AbortReason::StorageError);
            }
        }
        let now = crate::clock::now_ns();
        self.last_end_ns = now;
        self.consecutive_failures = 0;
        if p.is_final {
            self.final_done = true;
        }
        if let Some(s) = self.stats.iter_mut().find(|s| s.id == id) {
            s.status = CheckpointStatus::Completed;
            s.duration_ns = now.saturating_sub(p.trigger_ns);
            s.start_delay_ns = p.last_source_ack_ns.saturating_sub(p.trigger_ns);
            s.alignments = p.alignments.clone();
            s.state_bytes = p.state_bytes;
        }
        self.latest = Some(RestoredState {
            checkpoint: id,
            states: p.states,
        });
        if let Some(r) = p.reply {
            let _ = r.send(Ok(id));
        }
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
        let Some(p) = self.pending.remove(&id) else {
            return out;
        };
        let now = crate::clock::now_ns();
        self.last_end_ns = now;
        if reason.counts_as_failure() {
            self.consecutive_failures += 1;
            self.last_failure = Some(reason);
        }
        if let Some(s) = self.stats.iter_mut().find(|s| s.id == id) {
            s.status = CheckpointStatus::Aborted(reason);
            s.duration_ns = now.saturating_sub(p.trigger_ns);
            s.alignments = p.alignments;
        }
        if let Some(r) = p.reply {
            let _ = r.send(Err(reason));
        }
        tracing::debug!(checkpoint = %id, %reason, "checkpoint aborted");
        self.notify_all(id, false, &mut out);
        out
    }

    pub(crate) fn decline(
        &mut self,
        _task: usize,
        id: CheckpointId,
        reason: AbortReason,
    ) -> Vec<CoordinatorOutput> {
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
                    out.extend(self.complete(id));
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
    pub(crate) fn abort_all(&mut self, reason: AbortReason) {
        let ids: Vec<CheckpointId> = self.pending.keys().copied().collect();
        for id in ids {
            let _ = self.abort(id, reason);
        }
    }
}
