//! Where a task's loop runs: on its own OS thread (the default), or on a
//! cooperative worker thread with other tasks ([`crate::JobConfig::workers`],
//! timely's model: each worker runs every operator of its share of the
//! dataflow).
//!
//! A worker steps its tasks in turn, in the plan's order (sources first,
//! then each operator downstream of them), each for at most
//! [`STEP_BUDGET`] elements, so a batch a source emits is processed by the
//! downstream tasks of the same worker in the same round, with no wake-up
//! and no queueing behind other threads. A task never waits inside a step:
//! its input gate returns instead of parking (`GateEvent::Idle`), and its
//! writers keep what a full channel cannot take (the rest of one batch's
//! output, FLIP-227's per-batch overdraft) and take no input until it is
//! sent. When no task moved, the worker backs off by the job's
//! [`WaitStrategy`] and then parks on everything its tasks wait for
//! ([`TaskBody::watch`]: input channels, priority lanes, control, room in
//! a full output channel, a credit) and the job's cancel channel, until
//! the earliest deadline a task named (a paced source's next record, a
//! processing-time timer).
//!
//! Failure handling is the thread-per-task mode's: a task that fails or
//! panics reports it and is dropped (its channels close); the others of
//! its worker go on until the job cancels the attempt, which every worker
//! sees on its next round or while parked.

use super::plan::{Step, TaskBody, TaskRt};
use crate::checkpoint::snapshot::SnapshotSlices;
use crate::runtime::events::TaskEvent;
use crate::transport::input_gate::{WaitStrategy, SPIN_YIELD_EVERY};
use crate::types::error::{panic_message, TaskError};
use crate::types::metrics::TaskMetrics;
use crossbeam_channel::{Receiver, Select, TryRecvError};
use std::sync::Arc;

/// Elements (or source polls) one task handles per step: 16. A round over
/// a worker's tasks then costs a few dynamic calls and empty polls next to
/// up to 16 batches of work (in W1, 16 batches of 1,024 records take
/// about 0.3 ms), and a busy task keeps the others of its worker waiting
/// for at most that long.
pub(crate) const STEP_BUDGET: u32 = 16;

/// Yields between spinning and parking, as the input gate's spin-park.
const YIELDS_BEFORE_PARK: u32 = 2;

/// One task as a worker runs it.
pub(crate) struct WorkerTask {
    pub(crate) task: usize,
    pub(crate) body: Box<dyn TaskBody>,
    pub(crate) rt: TaskRt,
    pub(crate) metrics: Arc<TaskMetrics>,
}

/// Reports how a task ended to the job thread, after its last
/// acknowledgements, then drops the task (its channels close after the
/// report: a neighbour that sees them disconnect reports only after the
/// real cause).
pub(crate) fn end_task(
    task: usize,
    mut rt: TaskRt,
    slices: Option<SnapshotSlices>,
    body: Box<dyn TaskBody>,
    metrics: &TaskMetrics,
    res: std::thread::Result<Result<(), TaskError>>,
) {
    metrics.end();
    let ev = match res {
        Ok(Ok(())) => {
            // Its last acknowledgements go before its end.
            if let Some(mut w) = rt.snapshots.take() {
                let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    w.drain(slices);
                }));
                if let Err(p) = finished {
                    let _ = rt.events.send(TaskEvent::Failed {
                        task,
                        error: TaskError::Panic(panic_message(&*p)),
                    });
                    drop(body);
                    return;
                }
            }
            TaskEvent::Finished { task }
        }
        Ok(Err(error)) => TaskEvent::Failed { task, error },
        Err(p) => TaskEvent::Failed {
            task,
            error: TaskError::Panic(panic_message(&*p)),
        },
    };
    let _ = rt.events.send(ev);
    drop(body);
}

/// A task on its worker, with its checkpoint work in slices (created on
/// the worker's thread: a slice's stack never changes threads).
struct Running {
    t: WorkerTask,
    slices: Option<SnapshotSlices>,
}

impl Running {
    fn end(self, res: std::thread::Result<Result<(), TaskError>>) {
        let Running { t, slices } = self;
        end_task(t.task, t.rt, slices, t.body, &t.metrics, res);
    }
}

/// While a worker's tasks keep it busy, it still runs one slice of their
/// checkpoint work once this long has passed since the last one (ns): 1
/// ms, so that checkpoints complete under full load at the cost of at most
/// ~5 % of the worker's time (a slice is ~50 µs).
const SLICE_EVERY_BUSY_NS: u64 = 1_000_000;

/// Runs `tasks` cooperatively on the calling thread until every one ended
/// or the attempt is cancelled (`cancel` disconnects).
///
/// The tasks' checkpoint work (the asynchronous phase, when the storage
/// stages parts in memory) runs here too, one slice of at most ~50 µs at
/// a time: in a round where no task moved, before the worker spins or
/// parks, and at least every [`SLICE_EVERY_BUSY_NS`] while the tasks keep
/// it busy. A slice that panics fails its task.
pub(crate) fn run_worker(tasks: Vec<WorkerTask>, cancel: Receiver<()>, wait: WaitStrategy) {
    let mut tasks: Vec<Running> = tasks
        .into_iter()
        .map(|mut t| {
            let name = t.rt.task_id.to_string();
            let slices =
                t.rt.snapshots
                    .as_mut()
                    .and_then(|s| s.take_slices(t.task, &name, true));
            Running { t, slices }
        })
        .collect();
    for r in &tasks {
        r.t.metrics.start();
    }
    let mut idle_rounds: u32 = 0;
    // Without checkpointing no task has slices: busy rounds then read no
    // clock for them.
    let sliced = tasks.iter().any(|r| r.slices.is_some());
    let mut last_slice_ns = crate::util::clock::now_ns();
    let mut next_slice = 0usize;
    while !tasks.is_empty() {
        if matches!(cancel.try_recv(), Err(TryRecvError::Disconnected)) {
            for r in tasks.drain(..) {
                r.end(Ok(Err(TaskError::Cancelled)));
            }
            return;
        }
        let mut busy = false;
        let mut deadline: Option<u64> = None;
        let mut i = 0;
        while i < tasks.len() {
            let t = &mut tasks[i].t;
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                t.body.step(&mut t.rt, STEP_BUDGET)
            }));
            let ended = match res {
                Ok(Ok(Step::Busy)) => None,
                Ok(Ok(Step::Idle(d))) => {
                    deadline = crate::runtime::chain::earliest(deadline, d);
                    i += 1;
                    continue;
                }
                Ok(Ok(Step::Done)) => Some(Ok(Ok(()))),
                Ok(Err(e)) => Some(Ok(Err(e))),
                Err(p) => Some(Err(p)),
            };
            busy = true;
            match ended {
                Some(res) => tasks.remove(i).end(res),
                None => i += 1,
            }
        }
        if busy || tasks.is_empty() {
            idle_rounds = 0;
            if sliced
                && crate::util::clock::now_ns().saturating_sub(last_slice_ns) >= SLICE_EVERY_BUSY_NS
            {
                // With nothing to do, it looks again a millisecond later.
                run_one_slice(&mut tasks, &mut next_slice);
                last_slice_ns = crate::util::clock::now_ns();
            }
            continue;
        }
        if deadline.is_some_and(|d| crate::util::clock::now_ns() >= d) {
            continue;
        }
        if run_one_slice(&mut tasks, &mut next_slice) {
            last_slice_ns = crate::util::clock::now_ns();
            idle_rounds = 0;
            continue;
        }
        idle_rounds += 1;
        match wait {
            WaitStrategy::SpinPark { spins } if idle_rounds <= spins => {
                std::hint::spin_loop();
                continue;
            }
            // While a background thread has work, the worker parks at
            // once instead of yielding: a yielding worker stays runnable
            // and leaves that thread no core, while a parked one gives its
            // core up and wakes when a record comes or a task's deadline
            // (a source's next send) is due.
            WaitStrategy::SpinPark { spins }
                if idle_rounds <= spins + YIELDS_BEFORE_PARK
                    && !crate::util::background::any_busy() =>
            {
                std::thread::yield_now();
                continue;
            }
            WaitStrategy::Spin => {
                if idle_rounds % SPIN_YIELD_EVERY == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            WaitStrategy::SpinPark { .. } | WaitStrategy::Park => {}
        }
        park(&tasks, &cancel, deadline);
        idle_rounds = 0;
    }
}

/// Runs one slice of the checkpoint work of the first task from
/// `*next` on that has some (round robin); false when none has. A task
/// whose slice panicked ends failed.
fn run_one_slice(tasks: &mut Vec<Running>, next: &mut usize) -> bool {
    let n = tasks.len();
    for k in 0..n {
        let i = (*next + k) % n;
        let Some(s) = tasks[i].slices.as_mut().filter(|s| s.has_work()) else {
            continue;
        };
        *next = i + 1;
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.run_slice()));
        if let Err(p) = res {
            tasks.remove(i).end(Err(p));
        }
        return true;
    }
    false
}

/// Blocks until something a task watches, or the cancel channel, is
/// ready, or until `deadline_ns`; the time is counted as idle time of
/// every task of the worker. (A task's checkpoint work gets a job only
/// from the task's own step, so parking never leaves that work waiting.)
fn park(tasks: &[Running], cancel: &Receiver<()>, deadline_ns: Option<u64>) {
    let start = crate::util::clock::now_ns();
    let mut sel = Select::new();
    for r in tasks {
        r.t.body.watch(&mut sel);
    }
    sel.recv(cancel);
    match deadline_ns {
        Some(d) => {
            let _ = sel.ready_deadline(crate::util::clock::instant_of(d));
        }
        None => {
            sel.ready();
        }
    }
    let idle = crate::util::clock::now_ns() - start;
    for r in tasks {
        r.t.metrics.add_idle_ns(idle);
    }
}
