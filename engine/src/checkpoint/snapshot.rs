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
//! by side. On cooperative workers there is no such thread when the
//! storage's `write_part` never waits for I/O (its
//! [`write_part_blocks`](CheckpointStorage::write_part_blocks)): the
//! worker runs the same work itself, in its idle time, in slices of at
//! most 50 µs ([`SnapshotSlices`]), so that checkpoint work takes no core
//! from the records and needs no idle time of another thread. With a
//! thread per task and no core to spare for snapshot threads, the task
//! thread runs it itself: in slices where it would wait for input
//! ([`run_inline_slice`]), and the rest whole between two batches once it
//! found no such time for [`INLINE_PATIENCE_NS`] ([`run_overdue`]).

use crate::barrier::AbortReason;
use crate::checkpoint::task_state::{OperatorSnapshot, PendingSnapshot};
use crate::checkpoint::{CheckpointStorage, PartHandle, SubtaskCheckpointStats, TaskStateKey};
use crate::operator::SnapshotRequest;
use crate::state::varint_len;
use crate::testing::{injected, FailurePoint, InjectedFailure};
use crate::types::element::CheckpointId;
use crate::types::error::TaskError;
use crate::util::background::{SliceEnd, Sliced, Work};
use crossbeam_channel::{Receiver, Sender};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// One checkpoint of one task, its synchronous part done.
pub(crate) struct SnapshotJob {
    pub(crate) id: CheckpointId,
    /// True for a savepoint: full, whatever the chain.
    pub(crate) full: bool,
    /// A checkpoint the coordinator marked full
    /// ([`CheckpointOptions::full`](crate::barrier::CheckpointOptions::full),
    /// every `full_min_interval`): full unless the chain rewrites its
    /// state piece by piece ([`EncodedState::chain_from`]), which bounds
    /// it already without writing the whole state at one checkpoint.
    pub(crate) marked_full: bool,
    pub(crate) parts: Vec<PendingSnapshot>,
    /// Filled in by the task: everything but the asynchronous part's
    /// figures.
    pub(crate) stats: SubtaskCheckpointStats,
}

/// What a task (a job) or the job thread (a base) tells a snapshot thread.
enum SnapshotMsg {
    Job(SnapshotJob),
    /// Checkpoint `id` completed and this task's part of it was read back
    /// intact: a base for the next delta.
    Verified(CheckpointId),
    /// The task is done with it: end after the jobs queued before (the
    /// job thread's notifier may still hold the channel open).
    End,
}

/// The job thread's way to tell a snapshot thread that its part of a
/// checkpoint was read back intact (`super::publisher`).
#[derive(Clone, Debug)]
pub(crate) struct SnapshotNotifier(Sender<SnapshotMsg>);

impl SnapshotNotifier {
    /// This task's part of completed checkpoint `id` may be a base.
    pub(crate) fn verified(&self, id: CheckpointId) {
        // A thread that ended (its task finished) needs no base.
        let _ = self.0.send(SnapshotMsg::Verified(id));
    }
}

impl std::fmt::Debug for SnapshotMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotMsg::Job(j) => write!(f, "Job({})", j.id),
            SnapshotMsg::Verified(id) => write!(f, "Verified({id})"),
            SnapshotMsg::End => f.write_str("End"),
        }
    }
}

/// The asynchronous phase of a task's checkpoints: a snapshot thread, or
/// work its cooperative worker runs in slices.
pub(crate) struct AsyncPhase {
    jobs: Option<Sender<SnapshotMsg>>,
    thread: Option<JoinHandle<()>>,
    /// On a cooperative worker: the work, for the worker to take
    /// ([`AsyncPhase::take_slices`]) on its own thread.
    sliced: Option<(Work, Receiver<SnapshotMsg>)>,
    /// Set when the task failed: the jobs still queued are dropped
    /// unrun ([`AsyncPhase`]'s `Drop`).
    abandoned: Arc<AtomicBool>,
}

/// A task's checkpoint work as its cooperative worker runs it: slice by
/// slice, in the worker's idle time (`runtime/worker.rs`).
pub(crate) struct SnapshotSlices {
    work: Sliced,
    /// The work's messages, looked at (never taken) to tell whether
    /// waiting work has something to do.
    pending: Receiver<SnapshotMsg>,
    last: SliceEnd,
}

impl SnapshotSlices {
    /// True when a slice would do something: a job is half done, or a
    /// message waits.
    pub(crate) fn has_work(&self) -> bool {
        match self.last {
            SliceEnd::Working => true,
            SliceEnd::Waiting => !self.pending.is_empty(),
            SliceEnd::Done => false,
        }
    }

    /// Runs one slice: at most about 50 µs of the work (as far as it has
    /// yield points). A panic of the work (an operator's deferred snapshot
    /// code) passes on to the caller.
    pub(crate) fn run_slice(&mut self) {
        self.last = SliceEnd::Done;
        self.last = self.work.run_slice();
    }

    /// Runs the rest of the work to its end (after [`AsyncPhase::drain`]
    /// queued the end).
    fn finish(&mut self) {
        while self.last != SliceEnd::Done {
            self.run_slice();
        }
    }
}

/// When a subtask's chain of incremental parts restarts with a full one
/// (the three settings of [`crate::CheckpointConfig`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct IncrementalPolicy {
    pub(crate) incremental: bool,
    pub(crate) full_every: u32,
    pub(crate) max_chain_ratio: f64,
    /// [`SnapshotRequest::spread`]: `full_min_interval` over the
    /// interval, in checkpoints, at most half of `full_every`.
    pub(crate) spread: u32,
}

/// What a snapshot thread reports for one checkpoint of its task: the
/// runtime wraps it into its task event (`E: From<(task, outcome)>`), so
/// that this layer does not know the runtime's protocol.
#[derive(Debug)]
pub(crate) enum SnapshotOutcome {
    /// The task's part of checkpoint `id` is complete and durable, in
    /// `part`.
    Ack {
        id: CheckpointId,
        part: PartHandle,
        stats: SubtaskCheckpointStats,
    },
    /// The task gives up checkpoint `id` (`detail`: what the storage said).
    Decline {
        id: CheckpointId,
        reason: AbortReason,
        detail: Option<String>,
    },
    /// The asynchronous part failed: the task fails.
    Failed(TaskError),
}

/// What the snapshot thread needs; `E` is the runtime's task event.
pub(crate) struct SnapshotThreadSetup<E> {
    pub(crate) task: usize,
    pub(crate) key: TaskStateKey,
    pub(crate) storage: Arc<dyn CheckpointStorage>,
    pub(crate) events: Sender<E>,
    /// Armed only for [`FailurePoint::DuringAsyncSnapshot`].
    pub(crate) failure: Option<InjectedFailure>,
    pub(crate) policy: IncrementalPolicy,
    /// The task runs on a cooperative worker: the worker runs the work in
    /// slices, or, when the storage's `write_part` may wait for I/O, a
    /// snapshot thread at `SCHED_IDLE` does ([`lower_priority`]: workers
    /// leave it idle time, [`crate::util::background::any_busy`]).
    /// Else a snapshot thread at the tasks' priority, its turns bounded by
    /// its yield points.
    pub(crate) on_worker: bool,
    /// The task has a thread of its own on a machine with no core to spare
    /// for a snapshot thread (as many task threads as cores, or more):
    /// with a storage whose `write_part` never waits, the task thread runs
    /// the work itself ([`set_inline`]). A snapshot thread there only
    /// waited for a core behind the task threads: W1 at a 10 ms interval
    /// on 2 cores completed 36 checkpoints a second with snapshot threads
    /// and 62-69 with the work inline, at the same records/s
    /// (BENCHMARKS.md). The work runs in slices where the task waits for
    /// input, so that the records that come meanwhile wait for at most a
    /// slice, not for the whole work: W2 at 100 ms on 2 cores, records
    /// sent in the first 0.2 ms after a trigger waited 351 µs (p50)
    /// against 799 µs with the work run whole after the synchronous part
    /// (docs/benchmarks-history.md).
    pub(crate) inline: bool,
}

thread_local! {
    /// The checkpoint work of the task on this thread, when the task
    /// thread runs it itself ([`SnapshotThreadSetup::inline`]); a slice's
    /// stack never changes threads, so it lives with the thread.
    static INLINE: std::cell::RefCell<Option<SnapshotSlices>> = const { std::cell::RefCell::new(None) };
    /// When that work, waiting, is due to run whole ([`run_overdue`]), ns
    /// (the engine's clock); 0 when none waits.
    static INLINE_DUE_NS: Cell<u64> = const { Cell::new(0) };
}

/// How long checkpoint work that a task thread runs itself waits for the
/// task's idle time ([`run_inline_slice`]) before the rest runs whole
/// between two batches ([`run_overdue`]): a submitted job, and each slice,
/// give it this long again. A task that never waits for input (W1) has
/// no idle time, and its checkpoints must still complete: there the work
/// runs at most this much later than it used to, right after the
/// synchronous part.
pub(crate) const INLINE_PATIENCE_NS: u64 = 250_000;

/// Gives the calling task thread its own checkpoint work to run
/// ([`run_inline_slice`] in its idle time, [`run_overdue`] else);
/// returns what it had before.
pub(crate) fn set_inline(slices: Option<SnapshotSlices>) -> Option<SnapshotSlices> {
    crate::util::background::set_idle_slice(
        slices.as_ref().map(|_| run_inline_slice as fn() -> bool),
    );
    INLINE_DUE_NS.with(|d| d.set(0));
    INLINE.with_borrow_mut(|i| std::mem::replace(i, slices))
}

/// After the task submitted a job: a task thread that runs its own
/// checkpoint work leaves it to its idle time for [`INLINE_PATIENCE_NS`],
/// and yields its core once. A no-op on a thread without such work (a
/// worker, or a task with a snapshot thread).
pub(crate) fn inline_submitted() {
    if INLINE.with_borrow(Option::is_none) {
        return;
    }
    INLINE_DUE_NS.with(|d| {
        if d.get() == 0 {
            d.set(crate::util::clock::now_ns() + INLINE_PATIENCE_NS);
        }
    });
    // The barrier has just left: the tasks it (or the same trigger) woke
    // on this core run before this one's first slice. Without the yield
    // the two sources of W2 woke on one core, and the later one's barrier,
    // for which the alignment downstream waits, came a slice later. W2 at
    // 100 ms on 2 cores, 9 alternated rounds: records sent in the first
    // 0.2 ms after a trigger waited 310-406 µs (p50) against 390-528 µs.
    std::thread::yield_now();
}

/// Runs one slice (about 50 µs at yield points) of the calling task
/// thread's checkpoint work, where the task would otherwise wait for
/// input; false when it had none ready. A panic of the work passes on to
/// the task.
fn run_inline_slice() -> bool {
    let more = INLINE.with_borrow_mut(|i| match i {
        Some(s) if s.has_work() => {
            s.run_slice();
            Some(s.has_work())
        }
        _ => None,
    });
    let Some(more) = more else {
        return false;
    };
    INLINE_DUE_NS.with(|d| {
        d.set(if more {
            crate::util::clock::now_ns() + INLINE_PATIENCE_NS
        } else {
            0
        })
    });
    true
}

/// Between two batches: runs the calling task thread's checkpoint work
/// whole once it waited [`INLINE_PATIENCE_NS`] for idle time. Costs a
/// thread-local read while none waits.
#[inline]
pub(crate) fn run_overdue() {
    let due = INLINE_DUE_NS.with(Cell::get);
    if due != 0 && crate::util::clock::now_ns() >= due {
        INLINE_DUE_NS.with(|d| d.set(0));
        run_inline();
    }
}

/// Runs the calling task thread's checkpoint work until it waits for the
/// next job. A panic of the work (an operator's deferred snapshot code)
/// passes on to the task.
fn run_inline() {
    INLINE.with_borrow_mut(|i| {
        if let Some(s) = i {
            while s.has_work() {
                s.run_slice();
            }
        }
    });
}

impl AsyncPhase {
    /// Starts the snapshot thread `lg-snap-<task>`, or, on a cooperative
    /// worker with a storage that never waits in `write_part`, prepares
    /// the work for the worker ([`AsyncPhase::take_slices`]).
    ///
    /// # Errors
    /// When the OS refuses a thread.
    pub(crate) fn start<E>(setup: SnapshotThreadSetup<E>) -> Result<Self, TaskError>
    where
        E: From<(usize, SnapshotOutcome)> + Send + 'static,
    {
        // Unbounded: a task never waits for its asynchronous phase (jobs
        // are bounded by the coordinator's concurrent checkpoints anyway).
        let (tx, rx) = crossbeam_channel::unbounded();
        let abandoned = Arc::new(AtomicBool::new(false));
        let flag = abandoned.clone();
        if (setup.on_worker || setup.inline) && !setup.storage.write_part_blocks() {
            let pending = rx.clone();
            return Ok(AsyncPhase {
                jobs: Some(tx),
                thread: None,
                sliced: Some((Box::new(move || run(setup, rx, flag)), pending)),
                abandoned,
            });
        }
        let (task, name) = (setup.task, setup.key.task.clone());
        let thread = spawn_thread(task, &name, setup.on_worker, move || run(setup, rx, flag))?;
        Ok(AsyncPhase {
            jobs: Some(tx),
            thread: Some(thread),
            sliced: None,
            abandoned,
        })
    }

    /// On the thread that runs the task (its worker, or its own), once:
    /// the work to run in slices (`None` when a snapshot thread runs it).
    /// Should the OS refuse the slices' stack, a snapshot thread runs it
    /// instead, at `SCHED_IDLE` when `on_worker`.
    pub(crate) fn take_slices(
        &mut self,
        task: usize,
        name: &str,
        on_worker: bool,
    ) -> Option<SnapshotSlices> {
        let (work, pending) = self.sliced.take()?;
        match Sliced::new(work) {
            Ok(work) => Some(SnapshotSlices {
                work,
                pending,
                last: SliceEnd::Waiting,
            }),
            Err((e, work)) => {
                tracing::warn!(task = name, error = %e, "no stack for checkpoint work on the worker: a snapshot thread runs it");
                match spawn_thread(task, name, on_worker, work) {
                    Ok(t) => self.thread = Some(t),
                    // Without it this task's checkpoints time out and
                    // are declined, as with a snapshot thread that died.
                    Err(e) => tracing::error!(task = name, error = %e, "no snapshot thread either"),
                }
                None
            }
        }
    }

    /// Queues `job` for the asynchronous phase.
    pub(crate) fn submit(&self, job: SnapshotJob) {
        self.send(SnapshotMsg::Job(job));
    }

    /// A handle for the job thread to tell the snapshot thread which of
    /// its parts were read back intact.
    pub(crate) fn notifier(&self) -> Option<SnapshotNotifier> {
        self.jobs.clone().map(SnapshotNotifier)
    }

    fn send(&self, msg: SnapshotMsg) {
        if let Some(tx) = &self.jobs {
            // The work ends only when `jobs` drops or after a failure it
            // reported; either way nothing is left to do with `msg`.
            let _ = tx.send(msg);
        }
    }

    /// Waits until every queued job is done (a task that ends cleanly does,
    /// so its last acknowledgements precede its end); on a worker, runs
    /// what is left of `slices` to its end.
    pub(crate) fn drain(&mut self, slices: Option<SnapshotSlices>) {
        if let Some(tx) = self.jobs.take() {
            let _ = tx.send(SnapshotMsg::End);
        }
        if let Some(mut s) = slices {
            s.finish();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Spawns `lg-snap-<task>` running `work`, at `SCHED_IDLE` if
/// `idle_priority`.
fn spawn_thread(
    task: usize,
    name: &str,
    idle_priority: bool,
    work: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, TaskError> {
    std::thread::Builder::new()
        .name(format!("lg-snap-{task}"))
        .spawn(move || {
            if idle_priority {
                lower_priority();
            }
            crate::util::background::mark_background_thread();
            work()
        })
        .map_err(|e| TaskError::from_operator(name, "spawning its snapshot thread", e.into()))
}

impl Drop for AsyncPhase {
    /// A task that failed leaves its snapshot thread to end on its own,
    /// once the job under way returns (a storage call, an operator's
    /// deferred snapshot); the jobs queued behind it are dropped unrun:
    /// their checkpoints cannot complete, and an operator's deferred
    /// snapshot code of a failed attempt would run beside the next
    /// attempt's. Work in slices ends with its worker's `SnapshotSlices`.
    fn drop(&mut self) {
        if let Some(tx) = self.jobs.take() {
            self.abandoned.store(true, Ordering::Release);
            let _ = tx.send(SnapshotMsg::End);
        }
    }
}

/// Moves the calling thread to `SCHED_IDLE`, so that on a machine with
/// fewer cores than threads the task threads keep their cores: a snapshot
/// thread's encoding and checksums fill idle time instead of delaying
/// records. A `SCHED_IDLE` thread never preempts a normal one when it wakes
/// up (nice 19 still may, with the wake-up placement of CFS/EEVDF), yet it
/// is not starved when the tasks keep every core busy (W1): the scheduler
/// gives it the smallest weight, 3 against 1024 for a nice-0 thread
/// (kernel/sched/core.c, `WEIGHT_IDLEPRIO`), so checkpoints still complete,
/// later. Linux only; elsewhere a no-op (a debug line says so).
///
/// Only on cooperative workers ([`SnapshotThreadSetup::on_worker`]), which park
/// while a snapshot thread works and so leave it idle time. Tasks on
/// threads of their own spin and yield while they wait and stay
/// runnable, so on 2 cores a `SCHED_IDLE` snapshot thread that yields at
/// its yield points got its turns seconds of CPU apart: W2's checkpoints
/// took 46 ms end to end (p50) instead of 4 ms at normal priority, and
/// with 1,000,000 keys 283 ms (docs/benchmarks-history.md, "Background threads
/// yield"). At normal priority its yield points bound each of its turns.
fn lower_priority() {
    if !crate::util::background::idle_priority() {
        tracing::debug!("SCHED_IDLE refused; the snapshot thread keeps its priority");
    }
}

/// A part this thread wrote in this attempt, with its chain: the parts a
/// restore of it reads, its full part first, itself last.
#[derive(Clone, Debug)]
struct Written {
    chain: Vec<PartHandle>,
    chain_bytes: u64,
    /// Its newest part said which parts the chain still needs
    /// ([`EncodedState::chain_from`]): a rolling chain.
    rolling: bool,
}

/// The snapshot thread's view of its task's chain of parts.
#[derive(Debug, Default)]
struct IncrementalChain {
    /// Parts written, by checkpoint, from the newest verified one on.
    written: BTreeMap<CheckpointId, Written>,
    /// The newest completed checkpoint whose part this thread wrote and
    /// the publisher read back intact: the base of the next delta.
    confirmed: Option<CheckpointId>,
    /// The full size of the task's state at its last snapshot, bytes.
    live_bytes: u64,
}

impl IncrementalChain {
    fn verified(&mut self, id: CheckpointId) {
        if self.written.contains_key(&id) && self.confirmed.is_none_or(|c| c < id) {
            self.confirmed = Some(id);
            // Older parts can no longer be a base.
            self.written = self.written.split_off(&id);
        }
    }

    /// The base for checkpoint `id`'s part, `None` when it must be full:
    /// no completed base yet (the first snapshot of an attempt, or no
    /// storage), a savepoint or a checkpoint marked full (every
    /// `full_min_interval`), a chain at its length or byte limit, or an
    /// id that is a multiple of `full_every`. The last two rules make every
    /// subtask write a full part at the same checkpoint, so that one is
    /// complete on its own at least that often (retention keeps the newest
    /// such one, the fallback when a delta is damaged).
    ///
    /// Every part of the base's chain is checked
    /// ([`CheckpointStorage::check_parts`]: a `stat`, or the kernel's word
    /// that nothing changed since one) first: a part deleted or cut since
    /// it was read back makes this part full, so that no checkpoint builds
    /// on a file that is gone.
    fn base(
        &self,
        policy: &IncrementalPolicy,
        job: &SnapshotJob,
        storage: &dyn CheckpointStorage,
    ) -> Option<CheckpointId> {
        if !policy.incremental || job.full {
            return None;
        }
        let c = self.confirmed?;
        let w = self.written.get(&c)?;
        // A rolling chain rewrites the state a little at every part: the
        // periodic full parts would only stall the checkpoints they land on.
        if !w.rolling && (job.marked_full || job.id.get() % u64::from(policy.full_every) == 0) {
            return None;
        }
        let too_long = w.chain.len() >= policy.full_every as usize;
        // A rolling chain is bounded by its spread already (the state
        // rewritten once, plus the deltas of about `spread` parts), which
        // `spread` keeps near this ratio; a burst of changes (after a
        // pause of the checkpoints) must not end it with a full part.
        let too_big =
            !w.rolling && w.chain_bytes as f64 > policy.max_chain_ratio * self.live_bytes as f64;
        if too_long || too_big {
            return None;
        }
        let _call = crate::util::calls::call(|| match (w.chain.first(), w.chain.last()) {
            (Some(first), Some(last)) => format!(
                "looking at the {} parts of a chain, chk-{} to chk-{}",
                w.chain.len(),
                first.checkpoint,
                last.checkpoint
            ),
            _ => "looking at a chain".into(),
        });
        if let Err(e) = storage.check_parts(&w.chain) {
            tracing::warn!(checkpoint = %job.id, error = %e, "a part this task's next delta would build on is gone or changed: the part is written full");
            return None;
        }
        Some(c)
    }

    /// The spread to ask of the next part: the policy's, less when parts
    /// are big beside the state. A rolling chain holds about `spread`
    /// parts, so about `spread` times its average part: asking for
    /// `max_chain_ratio` times the state over that average keeps it
    /// there, the state then rewritten faster, in fewer parts (W2 with
    /// 10,000 keys changes a fifth of them every 10 ms: at a spread of
    /// 200 its chains held 200 parts, 36 times the state, a stat of each
    /// before every part and all of them to read at a restore).
    fn spread(&self, policy: &IncrementalPolicy) -> u32 {
        let Some(w) = self.confirmed.and_then(|c| self.written.get(&c)) else {
            return policy.spread;
        };
        if w.chain.is_empty() || self.live_bytes == 0 {
            return policy.spread;
        }
        let average = (w.chain_bytes / w.chain.len() as u64).max(1);
        let fits = policy.max_chain_ratio * self.live_bytes as f64 / average as f64;
        (fits as u64).clamp(1, u64::from(policy.spread)) as u32
    }

    fn wrote(&mut self, id: CheckpointId, base: Option<CheckpointId>, part: PartHandle, live: u64) {
        let bytes = part.written_bytes;
        let from = part.from;
        let w = match base.and_then(|b| self.written.get(&b)) {
            Some(p) => {
                let mut chain = p.chain.clone();
                chain.push(part);
                if let Some(f) = from {
                    chain.retain(|p| p.checkpoint >= f);
                }
                Written {
                    chain_bytes: chain.iter().map(|p| p.written_bytes).sum(),
                    chain,
                    rolling: from.is_some(),
                }
            }
            None => Written {
                chain: vec![part],
                chain_bytes: bytes,
                rolling: false,
            },
        };
        self.written.insert(id, w);
        self.live_bytes = live;
    }
}

/// See [`set_after_snapshot_hook`].
static AFTER_SNAPSHOT: std::sync::OnceLock<fn(u64)> = std::sync::OnceLock::new();

/// Sets a function that every snapshot thread calls after each snapshot
/// job it finished (acknowledged or not), on that thread, off every task's
/// record path (a snapshot thread yields its core to waiting tasks, so
/// under load the call may come late; cooperative workers that run the
/// job themselves do not call it: what a worker frees, its records'
/// allocations reuse), with the bytes of encoding buffers the
/// job freed: those it did not keep for its next jobs (see
/// [`snapshot_buffer`](crate::tuning::snapshot_buffer): a buffer over 8 MiB, or
/// one past the 8 MiB its spares keep together), plus an unaligned
/// checkpoint's in-flight records, freed here once encoded (counted as
/// their encoded size); 0 when every buffer was kept, or went to the job
/// (without storage), and no channel state was persisted. Meant for an
/// allocator's caches: a caching allocator keeps what a snapshot thread
/// frees until that thread calls into it again, at the next checkpoint.
/// The `lockgate` binary returns mimalloc's free memory to the OS here
/// (`mi_collect`) after jobs that freed at least 1 MiB (docs/benchmarks-history.md has
/// what collecting after every large job cost). Returns false (and
/// changes nothing) when a hook was set already: set it once per process,
/// before jobs start (a hook set later applies to later snapshot jobs).
///
/// # Examples
/// ```
/// fn trim(_freed_bytes: u64) { /* e.g. the allocator's collect */ }
/// assert!(lockgate::tuning::set_after_snapshot_hook(trim));
/// assert!(!lockgate::tuning::set_after_snapshot_hook(trim), "once per process");
/// ```
pub fn set_after_snapshot_hook(hook: fn(u64)) -> bool {
    AFTER_SNAPSHOT.set(hook).is_ok()
}

fn run<E: From<(usize, SnapshotOutcome)>>(
    setup: SnapshotThreadSetup<E>,
    msgs: Receiver<SnapshotMsg>,
    abandoned: Arc<AtomicBool>,
) {
    let mut chain = IncrementalChain::default();
    // The buffer each part is encoded into, kept from job to job: a fresh
    // one of megabytes (an unaligned checkpoint's part) costs a page fault
    // per 4 KiB page at every checkpoint.
    let mut scratch = Vec::new();
    while let Some(msg) = next_message(&msgs) {
        let job = match msg {
            SnapshotMsg::Job(job) => job,
            SnapshotMsg::Verified(id) => {
                chain.verified(id);
                continue;
            }
            SnapshotMsg::End => return,
        };
        if abandoned.load(Ordering::Acquire) {
            tracing::debug!(task = setup.task, checkpoint = %job.id, "the task failed: its snapshot job is dropped unrun");
            continue;
        }
        let id = job.id;
        let mut freed = 0;
        // A snapshot thread at work makes idle workers nap (they leave it
        // the idle time); work in a worker's slices needs no such thing.
        let busy = (!crate::util::background::in_slice()).then(crate::util::background::busy);
        let ev = finish(&setup, &mut chain, &mut scratch, &mut freed, job);
        let failed = matches!(ev, SnapshotOutcome::Failed(_));
        // The job thread may be gone at teardown; then nothing matters.
        let _ = setup.events.send(E::from((setup.task, ev)));
        // Not on a worker: what a worker frees its own records' allocations
        // reuse, and the hook (an allocator's collection) would run there
        // for milliseconds in one piece.
        if let Some(hook) = AFTER_SNAPSHOT
            .get()
            .filter(|_| !crate::util::background::in_slice())
        {
            crate::util::background::yield_point();
            hook(freed);
        }
        drop(busy);
        if failed {
            // The job restarts or ends: this attempt's later snapshots
            // are moot.
            tracing::debug!(task = setup.task, checkpoint = %id, "asynchronous part failed");
            return;
        }
    }
}

/// Bytes of an operator's state copied into the task's part between two
/// yield points: 256 KiB, some 20 µs.
const COPY_PIECE: usize = 256 << 10;

/// Appends the task's part, `states` as postcard encodes a
/// `Vec<OperatorSnapshot>` (a varint count; per operator its name and its
/// bytes, each a varint length and the raw bytes), to `buf`, copying each
/// operator's bytes [`COPY_PIECE`] by piece with a yield point between:
/// postcard would copy a state of megabytes in one unbroken piece, which
/// on a cooperative worker is one long slice.
fn encode_part(states: &[OperatorSnapshot], mut buf: Vec<u8>) -> Vec<u8> {
    fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }
    varint(&mut buf, states.len() as u64);
    for s in states {
        varint(&mut buf, s.operator.len() as u64);
        buf.extend_from_slice(s.operator.as_bytes());
        varint(&mut buf, s.bytes.len() as u64);
        for piece in s.bytes.chunks(COPY_PIECE) {
            crate::util::background::yield_point();
            buf.extend_from_slice(piece);
        }
    }
    buf
}

/// The next message for the asynchronous phase, `None` once every sender
/// is gone: a snapshot thread blocks for it; work in a worker's slices
/// ends its slice while there is none.
fn next_message(msgs: &Receiver<SnapshotMsg>) -> Option<SnapshotMsg> {
    loop {
        match msgs.try_recv() {
            Ok(m) => return Some(m),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam_channel::TryRecvError::Empty) => {
                if !crate::util::background::wait_in_slice() {
                    return msgs.recv().ok();
                }
            }
        }
    }
}

/// Runs the asynchronous part of `job`; returns the acknowledgement, or
/// the decline (a failed write) or failure to report instead.
fn finish<E>(
    setup: &SnapshotThreadSetup<E>,
    chain: &mut IncrementalChain,
    scratch: &mut Vec<u8>,
    freed: &mut u64,
    job: SnapshotJob,
) -> SnapshotOutcome {
    let start = crate::util::clock::now_ns();
    let fail = SnapshotOutcome::Failed;
    let base = chain.base(&setup.policy, &job, &*setup.storage);
    let req = SnapshotRequest {
        id: job.id,
        base,
        spread: chain.spread(&setup.policy),
    };
    let mut states = Vec::with_capacity(job.parts.len());
    let mut delta = false;
    // The oldest part the chain needs, as the operators' deltas say
    // (`Some(None)` while none said; `None` once one needs the whole chain).
    let mut rolling: Option<Option<CheckpointId>> = Some(None);
    // The exact size of the task's part were every operator's bytes full:
    // postcard's Vec<OperatorSnapshot> (a length, then name and bytes,
    // each length-prefixed).
    let mut full_size = varint_len(job.parts.len() as u64);
    // Channel state (unaligned checkpoints) is reported apart: in
    // `persisted_bytes`, not in the state's or the written bytes.
    let mut persisted = 0u64;
    for p in job.parts {
        crate::util::background::yield_point();
        // An operator's deferred code that panics fails the task, as a
        // panic in its record path does: on a snapshot thread it would
        // otherwise end the thread unseen, and every later checkpoint
        // would time out.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.snapshot.run(&req)));
        let run = match run {
            Ok(run) => run,
            Err(panic) => {
                return fail(TaskError::Panic(format!(
                    "{}'s snapshot_state_async: {}",
                    p.operator,
                    crate::types::error::panic_message(&*panic)
                )))
            }
        };
        match run {
            Ok(enc) => {
                delta |= enc.delta;
                if enc.delta {
                    rolling = rolling.and_then(|r| {
                        let c = enc.chain_from?;
                        Some(Some(r.map_or(c, |r: CheckpointId| r.min(c))))
                    });
                }
                let name = p.operator.len() as u64;
                let size = varint_len(name) + name + varint_len(enc.full_bytes) + enc.full_bytes;
                if p.operator == crate::checkpoint::channel_state::CHANNEL_STATE_OPERATOR {
                    persisted += size;
                } else {
                    full_size += size;
                }
                states.push(OperatorSnapshot {
                    operator: p.operator,
                    bytes: enc.bytes,
                })
            }
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
    // The channel state's in-flight records, moved here from the task,
    // were dropped once encoded: about as many bytes as their encoding.
    *freed += persisted;
    let base = base.filter(|_| delta);
    let mut stats = job.stats;
    stats.state_bytes = full_size;
    stats.persisted_bytes = persisted;
    stats.incremental = delta;
    let part = {
        let storage = &setup.storage;
        crate::util::background::yield_point();
        let mut buf = std::mem::take(scratch);
        buf.clear();
        // The part's exact size first (the operators' bytes are counted,
        // not walked), so that the buffer grows at most once: extended
        // piece by piece it was reallocated and a growing part copied into
        // fresh pages (1.2 % of the samples in one `perf record` of a 40
        // M-record W1 with exactly-once checkpoints, docs/benchmarks-history.md).
        if let Ok(size) = postcard::experimental::serialized_size(&states) {
            buf.reserve_exact(size);
        }
        let bytes = encode_part(&states, buf);
        let written = {
            let _call = crate::util::calls::call(|| {
                format!(
                    "writing the part of {}[{}] of chk-{}",
                    setup.key.task, setup.key.subtask, job.id
                )
            });
            storage.write_part(job.id, &setup.key, &bytes)
        };
        if bytes.capacity() <= crate::util::buffers::KEEP_BUFFER_BYTES {
            *scratch = bytes;
        } else {
            *freed += bytes.capacity() as u64;
        }
        // The part is in storage: the coordinator keeps only its handle
        // (a restart reads it back), so the encodings stay here, on the
        // thread that allocated them, for the next ones to encode into.
        for s in std::mem::take(&mut states) {
            *freed += crate::util::buffers::recycle(s.bytes);
        }
        match written {
            Ok(mut h) => {
                h.base = base;
                h.from = base.and(rolling.flatten());
                stats.checkpointed_bytes = h.written_bytes.saturating_sub(persisted);
                chain.wrote(job.id, base, h.clone(), full_size);
                h
            }
            Err(e) => {
                return SnapshotOutcome::Decline {
                    id: job.id,
                    reason: AbortReason::StorageError,
                    detail: Some(e.to_string()),
                }
            }
        }
    };
    stats.async_ns = crate::util::clock::now_ns().saturating_sub(start);
    SnapshotOutcome::Ack {
        id: job.id,
        part,
        stats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_encoded_as_postcard_encodes_it() {
        let sizes = [0usize, 1, 127, 128, 16_383, 16_384, 3 * COPY_PIECE + 7];
        let states: Vec<OperatorSnapshot> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| OperatorSnapshot {
                operator: "op".repeat(i * 40),
                bytes: (0..*n).map(|b| (b % 251) as u8).collect(),
            })
            .collect();
        for k in 0..=states.len() {
            let part = &states[..k];
            let ours = encode_part(part, vec![9]);
            let mut theirs = vec![9];
            theirs.extend(postcard::to_allocvec(&part.to_vec()).unwrap());
            assert_eq!(ours, theirs, "{k} operators");
        }
    }
}
