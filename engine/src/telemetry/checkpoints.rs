//! What each checkpoint shows outside the job: metrics as it ends, a
//! `checkpoint` span from its trigger to its end (debug level), an event
//! per subtask part (debug) and a warning per aborted one. Runs on the
//! job thread, called by the coordinator ([`CheckpointObserver`]).

use super::health::HealthCell;
use super::names::*;
use crate::barrier::AbortReason;
use crate::checkpoint::observer::CheckpointObserver;
use crate::checkpoint::{CheckpointStats, CheckpointStatus};
use crate::types::element::{CheckpointId, SnapshotKind};
use crate::types::task_id::TaskId;
use metrics::{Counter, Gauge, Histogram};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tracing::field::Empty;

/// Every abort reason, in [`reason_index`]'s order.
const REASONS: [AbortReason; 7] = [
    AbortReason::Subsumed,
    AbortReason::Canceled,
    AbortReason::AlignmentLimit,
    AbortReason::Timeout,
    AbortReason::Declined,
    AbortReason::TaskFailure,
    AbortReason::StorageError,
];

/// `r`'s place in [`REASONS`] (a new reason fails to compile here).
fn reason_index(r: AbortReason) -> usize {
    match r {
        AbortReason::Subsumed => 0,
        AbortReason::Canceled => 1,
        AbortReason::AlignmentLimit => 2,
        AbortReason::Timeout => 3,
        AbortReason::Declined => 4,
        AbortReason::TaskFailure => 5,
        AbortReason::StorageError => 6,
    }
}

/// Spans of checkpoints triggered and not ended that are kept at most (a
/// checkpoint dropped without an end, which the coordinator does not do,
/// cannot grow the list).
const MAX_OPEN_SPANS: usize = 64;

struct SubtaskHandles {
    sync: Histogram,
    async_: Histogram,
    alignment: Histogram,
    start_delay: Histogram,
    state_size: Gauge,
}

/// A job's checkpoint metrics and spans (see the module docs).
pub(crate) struct CheckpointTelemetry {
    job_name: String,
    mode: &'static str,
    health: Arc<HealthCell>,
    open: VecDeque<(CheckpointId, tracing::Span)>,
    completed: Counter,
    aborted: Vec<Counter>,
    in_progress: Gauge,
    consecutive: Gauge,
    duration: Histogram,
    checkpointed_bytes: Counter,
    persisted_bytes: Counter,
    last_completed: Gauge,
    subtasks: HashMap<TaskId, SubtaskHandles>,
}

impl CheckpointTelemetry {
    pub(crate) fn new(
        job_name: &str,
        mode: &'static str,
        tasks: &[TaskId],
        health: Arc<HealthCell>,
    ) -> Self {
        let job = job_name.to_string();
        let l = [(LABEL_JOB_NAME, job.clone())];
        let subtasks = tasks
            .iter()
            .map(|t| {
                let l = [
                    (LABEL_JOB_NAME, job.clone()),
                    (LABEL_TASK, t.operator.clone()),
                    (LABEL_SUBTASK, t.subtask.to_string()),
                ];
                let h = SubtaskHandles {
                    sync: metrics::histogram!(CHECKPOINT_SYNC_DURATION, &l),
                    async_: metrics::histogram!(CHECKPOINT_ASYNC_DURATION, &l),
                    alignment: metrics::histogram!(CHECKPOINT_ALIGNMENT_DURATION, &l),
                    start_delay: metrics::histogram!(CHECKPOINT_START_DELAY, &l),
                    state_size: metrics::gauge!(STATE_SIZE_BYTES, &l),
                };
                (t.clone(), h)
            })
            .collect();
        CheckpointTelemetry {
            mode,
            health,
            open: VecDeque::new(),
            completed: metrics::counter!(CHECKPOINTS_COMPLETED, &l),
            aborted: REASONS
                .iter()
                .map(|r| {
                    metrics::counter!(
                        CHECKPOINTS_ABORTED,
                        LABEL_JOB_NAME => job.clone(),
                        LABEL_REASON => r.as_str()
                    )
                })
                .collect(),
            in_progress: metrics::gauge!(CHECKPOINTS_IN_PROGRESS, &l),
            consecutive: metrics::gauge!(CHECKPOINT_CONSECUTIVE_FAILURES, &l),
            duration: metrics::histogram!(CHECKPOINT_DURATION, &l),
            checkpointed_bytes: metrics::counter!(CHECKPOINTED_BYTES, &l),
            persisted_bytes: metrics::counter!(CHECKPOINT_PERSISTED_BYTES, &l),
            last_completed: metrics::gauge!(LAST_CHECKPOINT_COMPLETED_TIME, &l),
            subtasks,
            job_name: job,
        }
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl CheckpointObserver for CheckpointTelemetry {
    fn triggered(&mut self, id: CheckpointId, kind: SnapshotKind, is_final: bool) {
        let span = tracing::debug_span!(
            "checkpoint",
            job = %self.job_name,
            id = id.get(),
            kind = match kind {
                SnapshotKind::Checkpoint => "checkpoint",
                SnapshotKind::Savepoint => "savepoint",
            },
            mode = self.mode,
            is_final,
            status = Empty,
            duration_ms = Empty,
            checkpointed_bytes = Empty,
            persisted_bytes = Empty,
            state_bytes = Empty,
            unaligned = Empty,
        );
        if self.open.len() >= MAX_OPEN_SPANS {
            self.open.pop_front();
        }
        self.open.push_back((id, span));
        self.in_progress.set(self.open.len() as f64);
    }

    fn ended(&mut self, s: &CheckpointStats) {
        let span = self
            .open
            .iter()
            .position(|(id, _)| *id == s.id)
            .and_then(|i| self.open.remove(i))
            .map_or_else(tracing::Span::none, |(_, span)| span);
        self.in_progress.set(self.open.len() as f64);
        let aborted = match s.status {
            CheckpointStatus::Aborted(r) => Some(r),
            _ => None,
        };
        let in_a_row = self.health.checkpoint_ended(aborted);
        self.consecutive.set(f64::from(in_a_row));
        let status = aborted.map_or("completed", AbortReason::as_str);
        span.record("status", status);
        span.record("duration_ms", ms(s.duration_ns));
        span.record("checkpointed_bytes", s.checkpointed_bytes);
        span.record("persisted_bytes", s.persisted_bytes);
        span.record("state_bytes", s.state_bytes);
        span.record("unaligned", s.unaligned);
        for t in &s.subtasks {
            tracing::debug!(
                parent: &span,
                task = %t.task,
                sync_ms = ms(t.sync_ns),
                async_ms = ms(t.async_ns),
                alignment_ms = ms(t.alignment_ns),
                start_delay_ms = ms(t.start_delay_ns),
                checkpointed_bytes = t.checkpointed_bytes,
                "subtask part"
            );
        }
        match aborted {
            None => {
                self.completed.increment(1);
                self.duration.record(secs(s.duration_ns));
                self.checkpointed_bytes.increment(s.checkpointed_bytes);
                self.persisted_bytes.increment(s.persisted_bytes);
                self.last_completed.set(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64()),
                );
                for t in &s.subtasks {
                    if let Some(h) = self.subtasks.get(&t.task) {
                        h.sync.record(secs(t.sync_ns));
                        h.async_.record(secs(t.async_ns));
                        h.alignment.record(secs(t.alignment_ns));
                        h.start_delay.record(secs(t.start_delay_ns));
                        h.state_size.set(t.state_bytes as f64);
                    }
                }
            }
            Some(r) => {
                self.aborted[reason_index(r)].increment(1);
                // A subsumed checkpoint is superseded by a newer one that
                // completed, and one aborted by a task failure follows that
                // failure (warned itself): no warning. A timeout is warned
                // by the coordinator as it happens, with what still waits.
                if !matches!(
                    r,
                    AbortReason::Subsumed | AbortReason::TaskFailure | AbortReason::Timeout
                ) {
                    tracing::warn!(
                        parent: &span,
                        checkpoint = s.id.get(),
                        reason = r.as_str(),
                        in_a_row,
                        "checkpoint {} aborted: {r} after {:.1} ms{}",
                        s.id,
                        ms(s.duration_ns),
                        if r.counts_as_failure() {
                            format!(" ({in_a_row} failed in a row)")
                        } else {
                            String::new()
                        }
                    );
                }
            }
        }
    }
}
