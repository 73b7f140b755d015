//! The asynchronous phase of a task's checkpoint (as Flink's
//! `AsyncCheckpointRunnable`): the task hands over the synchronous parts of
//! its operators' snapshots and goes back to its records; the task's
//! snapshot thread runs the rest (deferred encodings, the task's part
//! encoded, written and `fsync`ed) and acknowledges the checkpoint once the
//! part is durable.
//!
//! One snapshot thread per task, as Flink gives each `StreamTask` its own
//! asynchronous operations pool: a task's checkpoints are finished in the
//! order they were taken, and the parts of different tasks are written side
//! by side.

use crate::barrier::AbortReason;
use crate::checkpoint::{CheckpointStorage, SubtaskCheckpointStats, TaskStateKey};
use crate::element::CheckpointId;
use crate::error::TaskError;
use crate::failure::{injected, FailurePoint, InjectedFailure};
use crate::protocol::{OperatorSnapshot, PendingSnapshot, TaskEvent};
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// One checkpoint of one task, its synchronous part done.
pub(crate) struct SnapshotJob {
    pub(crate) id: CheckpointId,
    pub(crate) parts: Vec<PendingSnapshot>,
    /// Filled in by the task: everything but the asynchronous part's
    /// figures.
    pub(crate) stats: SubtaskCheckpointStats,
}

/// The handle of a task's snapshot thread.
pub(crate) struct SnapshotWorker {
    jobs: Option<Sender<SnapshotJob>>,
    thread: Option<JoinHandle<()>>,
}

/// What the snapshot thread needs.
pub(crate) struct WorkerSetup {
    pub(crate) task: usize,
    pub(crate) key: TaskStateKey,
    pub(crate) storage: Option<Arc<dyn CheckpointStorage>>,
    pub(crate) events: Sender<TaskEvent>,
    /// Armed only for [`FailurePoint::DuringAsyncSnapshot`].
    pub(crate) failure: Option<InjectedFailure>,
}

impl SnapshotWorker {
    /// Starts the snapshot thread `lg-snap-<task>`.
    ///
    /// # Errors
    /// When the OS refuses a thread.
    pub(crate) fn spawn(setup: WorkerSetup) -> Result<Self, TaskError> {
        let task_name = setup.key.task.clone();
        // Unbounded: a task never waits for its snapshot thread (jobs are
        // bounded by the coordinator's concurrent checkpoints anyway).
        let (tx, rx) = crossbeam_channel::unbounded();
        let name = format!("lg-snap-{}", setup.task);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                lower_priority();
                run(setup, rx)
            })
            .map_err(|e| {
                TaskError::from_operator(&task_name, "spawning its snapshot thread", e.into())
            })?;
        Ok(SnapshotWorker {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `job` for the snapshot thread.
    pub(crate) fn submit(&self, job: SnapshotJob) {
        if let Some(tx) = &self.jobs {
            // The thread ends only when `jobs` drops, so this cannot fail
            // unless it panicked, which the missing ack then shows.
            let _ = tx.send(job);
        }
    }

    /// Waits until every queued job is done (a task that ends cleanly does,
    /// so its last acknowledgements precede its end).
    pub(crate) fn drain(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Gives the calling thread the lowest normal priority (nice 19), so that
/// on a machine with fewer cores than threads the scheduler prefers the
/// task threads: a snapshot thread's encoding and checksums then fill idle
/// time instead of delaying records (on the 2-core reference machine the
/// snapshot threads at nice 0 delayed the barrier's way through the job by
/// up to 1-2 ms; see BENCHMARKS.md). Unlike `SCHED_IDLE`, nice 19 never
/// starves a snapshot thread when the tasks keep every core busy (W1): it
/// still gets a share (about 1.5 % of a core against one nice-0 thread,
/// by the CFS weight table). Linux only; elsewhere a no-op.
#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: setpriority takes plain integers; on Linux PRIO_PROCESS with
    // who = 0 changes only the calling thread's nice value (threads have
    // their own, see setpriority(2), "BUGS"); no memory is passed.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if rc != 0 {
        tracing::debug!("setpriority failed; the snapshot thread keeps its priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

fn run(setup: WorkerSetup, jobs: Receiver<SnapshotJob>) {
    for job in jobs {
        let id = job.id;
        let ev = finish(&setup, job);
        let failed = matches!(ev, TaskEvent::Failed { .. });
        // The job thread may be gone at teardown; then nothing matters.
        let _ = setup.events.send(ev);
        if failed {
            // The job restarts or ends: this attempt's later snapshots
            // are moot.
            tracing::debug!(task = setup.task, checkpoint = %id, "asynchronous part failed");
            return;
        }
    }
}

/// Runs the asynchronous part of `job`; returns the acknowledgement, or
/// the decline (a failed write) or failure to report instead.
fn finish(setup: &WorkerSetup, job: SnapshotJob) -> TaskEvent {
    let start = crate::clock::now_ns();
    let fail = |error| TaskEvent::Failed {
        task: setup.task,
        error,
    };
    let mut states = Vec::with_capacity(job.parts.len());
    for p in job.parts {
        match p.snapshot.run() {
            Ok(bytes) => states.push(OperatorSnapshot {
                operator: p.operator,
                bytes,
            }),
            Err(e) => {
                return fail(TaskError::from_operator(
                    &p.operator,
                    "snapshot_state_async",
                    e,
                ))
            }
        }
    }
    if let Some(f) = setup.failure {
        if f.at == FailurePoint::DuringAsyncSnapshot {
            return fail(injected(&f));
        }
    }
    let mut stats = job.stats;
    let mut part = None;
    if let Some(storage) = &setup.storage {
        let bytes = match postcard::to_allocvec(&states) {
            Ok(b) => b,
            Err(e) => {
                return fail(TaskError::from_operator(
                    &setup.key.task,
                    "encoding its snapshot",
                    e.into(),
                ))
            }
        };
        stats.state_bytes = bytes.len() as u64;
        match storage.write_part(job.id, &setup.key, &bytes) {
            Ok(h) => {
                stats.checkpointed_bytes = h.written_bytes;
                part = Some(h);
            }
            Err(e) => {
                return TaskEvent::Decline {
                    task: setup.task,
                    id: job.id,
                    reason: AbortReason::StorageError,
                    detail: Some(e.to_string()),
                }
            }
        }
    } else {
        stats.state_bytes = states.iter().map(|s| s.bytes.len() as u64).sum();
    }
    stats.async_ns = crate::clock::now_ns().saturating_sub(start);
    TaskEvent::Ack {
        task: setup.task,
        id: job.id,
        states,
        part,
        stats,
    }
}
