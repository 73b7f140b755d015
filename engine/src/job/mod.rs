//! The job thread: starts the task threads, coordinates checkpoints, and
//! restarts the job from its latest completed checkpoint on a failure.
//!
//! The job thread is the checkpoint coordinator of the design (its own
//! thread, off the record path): it injects barrier n at every source at
//! the checkpoint interval, collects the tasks' acknowledgements (sent by
//! their snapshot threads once their parts are durable), has the metadata
//! of checkpoint n written by the publisher thread once every running task
//! acknowledged it, declares it complete when that is durable, then
//! notifies the tasks. Neither thread waits on a write: the job thread
//! goes on triggering, timing out and collecting while the publisher
//! writes.

use crate::barrier::{AbortReason, CheckpointMode};
use crate::checkpoint::coordinator::{Coordinator, CoordinatorOutput};
use crate::checkpoint::publisher::{Published, Publisher};
use crate::checkpoint::restore::{self, SkippedCheckpoint};
use crate::checkpoint::snapshot::{
    set_inline, AsyncPhase, IncrementalPolicy, SnapshotNotifier, SnapshotThreadSetup,
};
use crate::checkpoint::stats::CheckpointHistory;
use crate::checkpoint::TaskStateKey;
use crate::checkpoint::{
    CheckpointCounts, CheckpointStats, CheckpointStorage, CheckpointSummary, JobFingerprint,
    RestoredState,
};
use crate::config::JobConfig;
use crate::runtime::events::TaskEvent;
use crate::runtime::plan::{JobGraph, PlanTask, SubtaskCtx, TaskBody, TaskRt, Wiring};
use crate::runtime::worker::{end_task, run_worker, WorkerTask};
use crate::telemetry::{CheckpointTelemetry, Health, HealthCell, HealthProbe, JobTelemetry};
use crate::testing::FailurePlan;
use crate::testing::FailurePoint;
use crate::testing::InjectedFailure;
use crate::transport::handoff::OutputSender;
use crate::types::control::Control;
use crate::types::element::{CheckpointId, SnapshotKind};
use crate::types::error::panic_message;
use crate::types::error::{JobError, TaskError};
use crate::types::metrics::{TaskMetrics, TaskMetricsSnapshot};
use crossbeam_channel::{select, unbounded, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A command from a [`JobHandle`] to the job thread.
pub(crate) enum Command {
    Stop { savepoint: bool },
    Trigger(Sender<Result<CheckpointId, AbortReason>>),
    Periodic(bool),
}

/// What a job reports while it runs and when it ended.
///
/// # Examples
/// ```
/// use lockgate::{JobBuilder, JobConfig};
///
/// let job = JobBuilder::new("measured", JobConfig::default());
/// let (numbers, ingest) = job.ingest::<u64>("numbers", 64);
/// let _evens = numbers.key_by(|x| *x).task("evens", 2).filter(|x| x % 2 == 0).collect();
/// let handle = job.start()?;
/// for x in 0..100 {
///     ingest.push(x).expect("the job runs");
/// }
/// drop(ingest);
/// let metrics = handle.wait()?;
///
/// let names: Vec<&str> = metrics.tasks.iter().map(|t| t.name.as_str()).collect();
/// assert_eq!(names, ["numbers[0]", "evens[0]", "evens[1]"]);
/// assert_eq!(metrics.tasks[1..].iter().map(|t| t.records_in).sum::<u64>(), 100);
/// assert_eq!(metrics.tasks[0].records_out, 100); // sent on to the two subtasks
/// assert_eq!(metrics.restarts, 0);
/// assert_eq!(metrics.completed_checkpoints(), 0); // checkpoints are off by default
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct JobMetrics {
    /// One entry per task (subtask of an operator chain), in start order.
    pub tasks: Vec<TaskMetricsSnapshot>,
    /// The last [`crate::CheckpointConfig::history`] checkpoints triggered
    /// (pending ones included), oldest first; older ones are in
    /// [`JobMetrics::checkpoint_counts`] and
    /// [`JobMetrics::checkpoint_summary`] only (or, every one, in
    /// [`crate::JobBuilder::checkpoint_events`]).
    pub checkpoints: Vec<CheckpointStats>,
    /// Exact counts of every checkpoint of the run, by outcome.
    pub checkpoint_counts: CheckpointCounts,
    /// Distributions of the figures of every completed checkpoint of the
    /// run (duration, sync and async parts, alignment, bytes).
    pub checkpoint_summary: CheckpointSummary,
    /// The newest completed checkpoint (`None` before the first).
    pub last_completed_checkpoint: Option<CheckpointStats>,
    /// Restarts after failures so far.
    pub restarts: u32,
    /// The task failures so far, oldest first: one per restart, and the
    /// last one too when it ended the job.
    pub failures: Vec<JobFailure>,
    /// Checkpoints newer than the one restored at start that did not load,
    /// newest first (empty without a restore).
    pub restore_skipped: Vec<SkippedCheckpoint>,
    /// The checkpoint restored at start (`None`: the job started fresh).
    pub restored: Option<RestoredAtStart>,
}

/// The checkpoint a job restored at start, and which of its tasks it
/// restored at another parallelism.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RestoredAtStart {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// The tasks restored at another parallelism (a rescale), by name:
    /// `(task, parallelism in the checkpoint, parallelism now)`.
    pub rescaled: Vec<(String, u32, u32)>,
}

/// A task failure, as [`JobMetrics::failures`] lists it; displays as
/// `task: cause`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobFailure {
    /// The failed task, e.g. `keyed_sum[1]`.
    pub task: String,
    /// What failed, in words (the task error's message).
    pub cause: String,
    /// When the job learned of it, ns on the clock of [`crate::tuning::now_ns`]
    /// (the clock of checkpoints' `trigger_ns`).
    pub at_ns: u64,
    /// The checkpoint the restart after it restored (`None`: it restarted
    /// from the beginning, or did not restart).
    pub restored_from: Option<CheckpointId>,
}

impl std::fmt::Display for JobFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.task, self.cause)
    }
}

impl JobMetrics {
    /// Checkpoints completed.
    pub fn completed_checkpoints(&self) -> usize {
        self.checkpoint_counts.completed as usize
    }

    /// The tasks whose thread could not be pinned as the pinning policy
    /// asked, with the core, as `task: core N` (empty when every pin took
    /// or none was asked for).
    pub fn pinning_failures(&self) -> Vec<String> {
        self.tasks
            .iter()
            .filter_map(|t| match t.pinning {
                crate::types::metrics::Pinning::Failed(core) => {
                    Some(format!("{}: core {core}", t.name))
                }
                _ => None,
            })
            .collect()
    }
}

pub(crate) struct Shared {
    pub(crate) metrics: Vec<Arc<TaskMetrics>>,
    pub(crate) history: Arc<Mutex<CheckpointHistory>>,
    pub(crate) restarts: Mutex<(u32, Vec<JobFailure>)>,
    pub(crate) restore_skipped: Vec<SkippedCheckpoint>,
    pub(crate) restored: Option<RestoredAtStart>,
    pub(crate) health: Arc<HealthCell>,
    /// Set by the job thread when it ended ([`JobMonitor::is_finished`]).
    pub(crate) ended: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn snapshot(&self) -> JobMetrics {
        let (restarts, failures) = self.restarts.lock().expect("not poisoned").clone();
        let history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        JobMetrics {
            tasks: self.metrics.iter().map(|m| m.snapshot()).collect(),
            checkpoints: history.recent(),
            checkpoint_counts: history.counts().clone(),
            checkpoint_summary: history.summary().clone(),
            last_completed_checkpoint: history.last_completed().cloned(),
            restarts,
            failures,
            restore_skipped: self.restore_skipped.clone(),
            restored: self.restored.clone(),
        }
    }
}

/// A running job, as returned by [`crate::JobBuilder::start`].
///
/// Dropping the handle does not stop the job; call [`JobHandle::stop`] then
/// [`JobHandle::wait`].
///
/// # Examples
/// ```
/// use lockgate::{CheckpointId, CheckpointMode, JobBuilder, JobConfig};
///
/// let mut config = JobConfig::default();
/// config.checkpoint.mode = CheckpointMode::ExactlyOnce; // no interval: on demand
/// let job = JobBuilder::new("handled", config);
/// let (numbers, ingest) = job.ingest::<u64>("numbers", 16);
/// let _out = numbers.collect();
/// let handle = job.start()?;
/// ingest.push(7).expect("the job runs");
/// assert_eq!(handle.trigger_checkpoint(), Ok(CheckpointId(1)));
/// assert_eq!(handle.checkpoint_counts().completed, 1);
/// assert!(!handle.is_finished()); // its input is still open
///
/// handle.stop(); // the sources stop, what is in flight drains
/// let metrics = handle.wait()?;
/// assert_eq!(metrics.restarts, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct JobHandle {
    commands: Sender<Command>,
    thread: Option<JoinHandle<Result<JobMetrics, JobError>>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle").finish_non_exhaustive()
    }
}

/// A view of a running job that any thread may hold (cloneable, `Send`
/// and `Sync`) while another waits for the job with
/// [`JobHandle::wait`]: its metrics, whether it ended, and a stop.
///
/// # Examples
/// ```
/// use lockgate::{JobBuilder, JobConfig};
/// let job = JobBuilder::new("monitored", JobConfig::default());
/// let (input, ingest) = job.ingest::<u64>("input", 16);
/// let _out = input.collect();
/// let handle = job.start().unwrap();
/// let monitor = handle.monitor();
/// let waiter = std::thread::spawn(move || handle.wait().unwrap());
/// for x in 0..100 {
///     ingest.push(x).unwrap();
/// }
/// // metrics from this thread while the other one waits
/// while monitor.metrics().tasks[0].records_in < 100 {
///     std::thread::yield_now();
/// }
/// drop(ingest);
/// let metrics = waiter.join().unwrap();
/// assert!(monitor.is_finished());
/// assert_eq!(metrics.tasks[0].records_in, 100);
/// ```
#[derive(Clone)]
pub struct JobMonitor {
    commands: Sender<Command>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for JobMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobMonitor").finish_non_exhaustive()
    }
}

impl JobMonitor {
    /// The job's metrics now, as [`JobHandle::metrics`] (the final ones
    /// once it ended).
    pub fn metrics(&self) -> JobMetrics {
        self.shared.snapshot()
    }

    /// True once the job ended (its result is [`JobHandle::wait`]'s).
    pub fn is_finished(&self) -> bool {
        self.shared.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    /// As [`JobHandle::stop`].
    pub fn stop(&self) {
        let _ = self.commands.send(Command::Stop { savepoint: false });
    }
}

impl JobHandle {
    /// The job's metrics now (tasks and checkpoints).
    pub fn metrics(&self) -> JobMetrics {
        self.shared.snapshot()
    }

    /// Whether the job is healthy now, and why not (the rule of
    /// [`Health`]: what the `lockgate` command's `/health` answers).
    pub fn health(&self) -> Health {
        self.shared.health.health()
    }

    /// A handle that reads [`JobHandle::health`] from another thread,
    /// also after the handle is gone (e.g. in an HTTP handler).
    pub fn health_probe(&self) -> HealthProbe {
        HealthProbe(self.shared.health.clone())
    }

    /// A view of the job for other threads: metrics, its end, a stop,
    /// readable while this handle waits ([`JobHandle::wait`] consumes
    /// the handle).
    pub fn monitor(&self) -> JobMonitor {
        JobMonitor {
            commands: self.commands.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Stops the job: sources stop emitting, everything in flight drains,
    /// every task ends. Returns at once; [`JobHandle::wait`] for the end.
    pub fn stop(&self) {
        let _ = self.commands.send(Command::Stop { savepoint: false });
    }

    /// Stops the job with a final savepoint: sources stop, and the final
    /// checkpoint taken after they drained is a savepoint (kept by
    /// retention). Without checkpointing this is [`JobHandle::stop`].
    pub fn stop_with_savepoint(&self) {
        let _ = self.commands.send(Command::Stop { savepoint: true });
    }

    /// Triggers a checkpoint now and waits until it completed or aborted.
    ///
    /// # Errors
    /// The abort reason when it did not complete (`declined` when the job
    /// has no checkpointing or ended first).
    pub fn trigger_checkpoint(&self) -> Result<CheckpointId, AbortReason> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.commands.send(Command::Trigger(tx)).is_err() {
            return Err(AbortReason::Declined);
        }
        rx.recv().unwrap_or(Err(AbortReason::Declined))
    }

    /// Pauses (`false`) or resumes (`true`) the periodic checkpoints of
    /// [`crate::CheckpointConfig::interval`]; returns at once. While
    /// paused, checkpoints in progress complete, and
    /// [`JobHandle::trigger_checkpoint`], savepoints and the final
    /// checkpoint still work; the record path keeps its checkpointing mode
    /// (alignment, change marks): what an A/B comparison of checkpointing
    /// on and off inside one process needs (`lockgate loadgen --ab`).
    pub fn set_periodic_checkpoints(&self, on: bool) {
        let _ = self.commands.send(Command::Periodic(on));
    }

    /// Exact counts of the job's checkpoints by outcome, cheaply (no copy
    /// of their statistics, as [`JobHandle::metrics`] makes).
    pub fn checkpoint_counts(&self) -> CheckpointCounts {
        self.shared
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .counts()
            .clone()
    }

    /// True when the job thread ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits for the job to end.
    ///
    /// # Errors
    /// [`JobError::TaskFailed`] naming the task and cause when a task failed
    /// and no restart was left; a storage or restore error.
    pub fn wait(mut self) -> Result<JobMetrics, JobError> {
        let t = self.thread.take().expect("wait is called once");
        match t.join() {
            Ok(r) => r,
            Err(p) => Err(JobError::Internal(format!(
                "job thread panicked: {}",
                panic_message(&*p)
            ))),
        }
    }
}

/// Sets the calling thread's timer slack (Linux only; elsewhere a no-op).
#[cfg(target_os = "linux")]
fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only
    // the calling thread's timer slack; no memory is passed or borrowed.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!("PR_SET_TIMERSLACK failed; keeping the default timer slack");
    }
}

#[cfg(not(target_os = "linux"))]
fn set_timer_slack(_ns: u64) {}

/// Sets up a task or worker thread: its timer slack and, when `core` is
/// given, its pinning (best effort: a core that does not exist leaves the
/// thread unpinned, and the metrics of every task on it say so, see
/// `JobMetrics::pinning_failures`).
fn setup_thread(slack: Option<u64>, core: Option<usize>, metrics: &[Arc<TaskMetrics>]) {
    if let Some(slack) = slack {
        set_timer_slack(slack);
    }
    if let Some(core) = core {
        let ok = core_affinity::set_for_current(core_affinity::CoreId { id: core });
        for m in metrics {
            if !ok {
                tracing::warn!(task = %m.name(), core, "pinning the task thread failed; it runs unpinned");
            }
            m.set_pinned(core, ok);
        }
    }
}

/// True for the errors a task sees because another task failed first.
fn is_secondary(e: &TaskError) -> bool {
    matches!(e, TaskError::Cancelled | TaskError::Disconnected(_))
}

/// A job as the builder hands it over: the plan and everything it starts
/// with.
pub(crate) struct JobSpec {
    pub(crate) name: String,
    pub(crate) app_config: serde_json::Value,
    pub(crate) graph: JobGraph,
    pub(crate) config: JobConfig,
    pub(crate) failures: FailurePlan,
    /// A state given whole ([`crate::JobBuilder::with_restored_state`]).
    pub(crate) restored: Option<RestoredState>,
    pub(crate) storage: Option<Box<dyn CheckpointStorage>>,
    /// Where ended checkpoints' statistics go.
    pub(crate) events: Option<OutputSender<CheckpointStats>>,
}

/// What the job thread starts with, checkpoint-wise.
struct Prepared {
    name: String,
    health: Arc<HealthCell>,
    restored: Option<RestoredState>,
    coordinator: Coordinator,
    publisher: Option<Publisher>,
    restore_skipped: Vec<SkippedCheckpoint>,
    history: Arc<Mutex<CheckpointHistory>>,
}

/// Starts the job thread.
fn start(graph: JobGraph, config: JobConfig, failures: FailurePlan, p: Prepared) -> JobHandle {
    let Prepared {
        name,
        health,
        restored,
        coordinator,
        publisher,
        restore_skipped,
        history,
    } = p;
    let restored_at_start = restored.as_ref().map(|r| RestoredAtStart {
        checkpoint: r.checkpoint,
        rescaled: graph
            .parallelisms()
            .into_iter()
            .filter_map(|(task, now)| {
                let old = *r.parallelism.get(&task)?;
                (old as usize != now).then_some((task, old, now as u32))
            })
            .collect(),
    });
    let shared = Arc::new(Shared {
        restore_skipped,
        restored: restored_at_start,
        metrics: graph
            .task_ids()
            .into_iter()
            .map(|n| Arc::new(TaskMetrics::new(n.to_string())))
            .collect(),
        history,
        restarts: Mutex::new((0, Vec::new())),
        health: health.clone(),
        ended: std::sync::atomic::AtomicBool::new(false),
    });
    let telemetry = JobTelemetry::start(
        &name,
        &graph.task_ids(),
        shared.metrics.clone(),
        health,
        restored.as_ref(),
    );
    let (cmd_tx, cmd_rx) = unbounded();
    let s2 = shared.clone();
    let thread = std::thread::Builder::new()
        .name("lg-job".into())
        .spawn(move || {
            let mut driver = Driver {
                graph,
                config,
                failures,
                fired: Vec::new(),
                shared: s2,
                commands: cmd_rx,
                coordinator,
                publisher,
                telemetry,
            };
            let result = driver.run(restored);
            driver.telemetry.ended(result.as_ref().err());
            // Lets the publisher finish what was asked (retention,
            // discards) and release the folder.
            drop(driver.publisher.take());
            driver
                .shared
                .ended
                .store(true, std::sync::atomic::Ordering::Release);
            result
        })
        .expect("spawning the job thread");
    JobHandle {
        commands: cmd_tx,
        thread: Some(thread),
        shared,
    }
}

struct Attempt {
    threads: Vec<JoinHandle<()>>,
    controls: Vec<Sender<Control>>,
    /// Unaligned mode: every channel's priority lane (see `send_outputs`).
    priority_lanes: Vec<Sender<crate::types::element::CheckpointBarrier>>,
    cancel: Option<Sender<()>>,
    events: Receiver<TaskEvent>,
    /// Per task: its state key and its snapshot thread's notifier (told
    /// which of its parts were read back intact).
    snapshot_threads: Vec<(TaskStateKey, Option<SnapshotNotifier>)>,
}

enum AttemptEnd {
    Finished,
    Failed { task: usize, error: TaskError },
    TooManyCheckpointFailures(String),
}

struct Driver {
    graph: JobGraph,
    config: JobConfig,
    failures: FailurePlan,
    /// Indices of planned failures that already struck.
    fired: Vec<usize>,
    shared: Arc<Shared>,
    commands: Receiver<Command>,
    coordinator: Coordinator,
    /// Where checkpoints go, with the thread that publishes them.
    publisher: Option<Publisher>,
    /// Metrics, spans and health.
    telemetry: JobTelemetry,
}

impl Driver {
    fn run(&mut self, mut restored: Option<RestoredState>) -> Result<JobMetrics, JobError> {
        let mut stopping: Option<bool> = None;
        loop {
            let attempt = self.spawn(restored.take())?;
            self.telemetry.running();
            let end = self.supervise(&attempt, &mut stopping);
            let ended_ns = crate::util::clock::now_ns();
            let late_events = self.teardown(attempt);
            // The first failure reported may be a consequence of the real
            // one (a neighbour saw its channel disconnect): once every
            // thread has stopped, prefer a failure that is not.
            let end = match end {
                AttemptEnd::Failed { task, error } if is_secondary(&error) => late_events
                    .into_iter()
                    .find_map(|ev| match ev {
                        TaskEvent::Failed { task, error } if !is_secondary(&error) => {
                            Some(AttemptEnd::Failed { task, error })
                        }
                        _ => None,
                    })
                    .unwrap_or(AttemptEnd::Failed { task, error }),
                other => other,
            };
            match end {
                AttemptEnd::Finished => break,
                AttemptEnd::TooManyCheckpointFailures(why) => {
                    let out = self.coordinator.abort_all(AbortReason::TaskFailure);
                    self.storage_outputs(out);
                    return Err(JobError::Checkpoint(why));
                }
                AttemptEnd::Failed { task, error } => {
                    let task_name = self.graph.task_id(task);
                    {
                        let mut r = self.shared.restarts.lock().expect("not poisoned");
                        r.1.push(JobFailure {
                            task: task_name.to_string(),
                            cause: error.to_string(),
                            at_ns: ended_ns,
                            restored_from: None,
                        });
                    }
                    let out = self.coordinator.abort_all(AbortReason::TaskFailure);
                    self.storage_outputs(out);
                    let used = self.shared.restarts.lock().expect("not poisoned").0;
                    if used >= self.config.restart.max_attempts
                        || stopping.is_some()
                        || error.is_fatal()
                    {
                        return Err(JobError::TaskFailed {
                            task: task_name,
                            cause: error,
                        });
                    }
                    if let TaskError::Injected(_) = error {
                        // mark the planned failure of that task as fired
                        if let Some(i) = self.failures.next_for(task, &self.fired) {
                            self.fired.push(i);
                        }
                    }
                    self.telemetry
                        .restarting(&task_name, &error.to_string(), used + 1);
                    // The restart delay, cut short by a stop: the job then
                    // ends with the failure instead of restarting.
                    if self.wait_restart_delay() {
                        return Err(JobError::TaskFailed {
                            task: task_name,
                            cause: error,
                        });
                    }
                    restored = self.restore_point()?;
                    self.telemetry.restoring(restored.as_ref());
                    {
                        let mut r = self.shared.restarts.lock().expect("not poisoned");
                        r.0 += 1;
                        if let Some(f) = r.1.last_mut() {
                            f.restored_from = restored.as_ref().map(|r| r.checkpoint);
                        }
                    }
                    if matches!(error, TaskError::Injected(_)) {
                        tracing::info!(
                            task = %task_name, %error,
                            restore_from = ?restored.as_ref().map(|r| r.checkpoint),
                            "planned failure; restarting the job"
                        );
                    } else {
                        tracing::warn!(
                            task = %task_name, %error,
                            restore_from = ?restored.as_ref().map(|r| r.checkpoint),
                            "task failed; restarting the job"
                        );
                    }
                }
            }
        }
        Ok(self.shared.snapshot())
    }

    /// The state to restart from (see [`restore::restart_point`]).
    fn restore_point(&self) -> Result<Option<RestoredState>, JobError> {
        restore::restart_point(
            self.publisher.as_ref().map(Publisher::storage),
            self.coordinator.latest_restore_point(),
        )
    }

    fn spawn(&mut self, restored: Option<RestoredState>) -> Result<Attempt, JobError> {
        let mut wiring = Wiring::default();
        let lanes = self.config.checkpoint.uses_priority_lanes();
        self.graph
            .wire(&mut wiring, self.config.channel_capacity, lanes);
        let (cancel_tx, cancel_rx) = crossbeam_channel::bounded::<()>(0);
        let (ev_tx, ev_rx) = unbounded();
        let cores = self.graph.cores_for(&self.config.pinning);
        let mut threads = Vec::new();
        let mut prepared: Vec<WorkerTask> = Vec::new();
        let mut controls = Vec::new();
        let mut snapshot_threads = Vec::new();
        let checkpointing = self.config.checkpoint.mode != CheckpointMode::None;
        // A snapshot thread needs a core the task threads leave free.
        let inline = self.config.workers.is_none()
            && std::thread::available_parallelism()
                .map_or(true, |n| self.graph.num_tasks() >= n.get());
        self.coordinator.begin_attempt(
            restored.as_ref().map(|r| r.checkpoint),
            self.graph.source_tasks(),
            self.graph.num_tasks(),
        );
        for task in 0..self.graph.num_tasks() {
            let (ctl_tx, ctl_rx) = unbounded();
            controls.push(ctl_tx);
            let metrics = self.shared.metrics[task].clone();
            let PlanTask { node, subtask } = self.graph.task_node(task);
            let name = self.graph.task_id(task);
            let ctx_parallelism = self.graph.parallelism(node);
            let mut ctx = SubtaskCtx {
                subtask,
                parallelism: ctx_parallelism,
                wiring: &mut wiring,
                config: &self.config,
                metrics: metrics.clone(),
                cancel: cancel_rx.clone(),
                control: ctl_rx,
            };
            let mut body: Box<dyn TaskBody> = self.graph.make(node, &mut ctx);
            let failure = self
                .failures
                .next_for(task, &self.fired)
                .map(|index| InjectedFailure {
                    index,
                    at: self.failures.point(index),
                });
            // A job that checkpoints has storage (memory at least).
            let snapshots = if let Some(p) = self.publisher.as_ref().filter(|_| checkpointing) {
                Some(
                    AsyncPhase::start(SnapshotThreadSetup {
                        task,
                        // A subtask index is below MAX_PARALLELISM, so it fits a u32.
                        key: TaskStateKey::new(name.operator.clone(), name.subtask as u32),
                        storage: p.shared_storage(),
                        events: ev_tx.clone(),
                        failure: failure.filter(|f| f.at == FailurePoint::DuringAsyncSnapshot),
                        policy: IncrementalPolicy {
                            incremental: self.config.checkpoint.incremental,
                            full_every: self.config.checkpoint.full_every,
                            max_chain_ratio: self.config.checkpoint.max_chain_ratio,
                            spread: spread(&self.config.checkpoint),
                        },
                        on_worker: self.config.workers.is_some(),
                        inline,
                    })
                    .map_err(|e| JobError::Internal(format!("starting task {name}: {e}")))?,
                )
            } else {
                None
            };
            snapshot_threads.push((
                TaskStateKey::new(name.operator.clone(), name.subtask as u32),
                snapshots.as_ref().and_then(AsyncPhase::notifier),
            ));
            let mut rt = TaskRt {
                task,
                task_id: name.clone(),
                snapshots,
                events: ev_tx.clone(),
                restored: restored.as_ref().map(|r| {
                    restore::task_restore(r, &name, ctx_parallelism, self.config.max_parallelism)
                }),
                restored_checkpoint: restored.as_ref().map(|r| r.checkpoint),
                checkpointing,
                failure,
            };
            if self.config.workers.is_some() {
                prepared.push(WorkerTask {
                    task,
                    body,
                    rt,
                    metrics,
                });
                continue;
            }
            let core = cores.as_ref().map(|c| c[task % c.len()]);
            let slack = self.config.timer_slack_ns;
            let os_name = self.graph.os_thread_name(task);
            let t = std::thread::Builder::new()
                .name(os_name)
                .spawn(move || {
                    setup_thread(slack, core, std::slice::from_ref(&metrics));
                    let slices = rt
                        .snapshots
                        .as_mut()
                        .and_then(|s| s.take_slices(task, &rt.task_id.to_string(), false));
                    set_inline(slices);
                    metrics.start();
                    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        body.run(&mut rt)
                    }));
                    end_task(task, rt, set_inline(None), body, &metrics, res);
                })
                .map_err(|e| JobError::Internal(format!("spawning task {name}: {e}")))?;
            threads.push(t);
        }
        if let Some(n) = self.config.workers {
            // Subtask i of every operator on worker i % n, in the plan's
            // order (sources first): timely's layout.
            let mut shares: Vec<Vec<WorkerTask>> = (0..n).map(|_| Vec::new()).collect();
            for t in prepared {
                let w = self.graph.task_node(t.task).subtask % n;
                shares[w].push(t);
            }
            for (w, share) in shares.into_iter().enumerate() {
                if share.is_empty() {
                    continue;
                }
                let core = cores.as_ref().map(|c| c[w % c.len()]);
                let slack = self.config.timer_slack_ns;
                let wait = self.config.wait_strategy;
                let cancel = cancel_rx.clone();
                let t = std::thread::Builder::new()
                    .name(format!("lg-worker-{w}"))
                    .spawn(move || {
                        let metrics: Vec<Arc<TaskMetrics>> =
                            share.iter().map(|t| t.metrics.clone()).collect();
                        setup_thread(slack, core, &metrics);
                        run_worker(share, cancel, wait);
                    })
                    .map_err(|e| JobError::Internal(format!("spawning worker {w}: {e}")))?;
                threads.push(t);
            }
        }
        Ok(Attempt {
            threads,
            controls,
            priority_lanes: std::mem::take(&mut wiring.priority_lanes),
            cancel: Some(cancel_tx),
            events: ev_rx,
            snapshot_threads,
        })
    }

    fn send_outputs(&mut self, attempt: &Attempt, out: Vec<CoordinatorOutput>) {
        for o in out {
            match o {
                CoordinatorOutput::Control { task, msg } => {
                    let _ = attempt.controls[task].send(msg);
                }
                // The barrier overtakes everything in flight on the
                // priority lanes, put there by the job thread, not
                // forwarded by each task (a task blocked on a full output
                // cannot forward). The in-band barriers that the sources
                // and then each task emit after their snapshots still end
                // each channel's state. A full lane drops its copy
                // (`channel::PRIORITY_LANE_CAPACITY`).
                CoordinatorOutput::PriorityBarrier(b) => {
                    for lane in &attempt.priority_lanes {
                        let _ = lane.try_send(b);
                    }
                }
                CoordinatorOutput::Storage(req) => {
                    if let Some(p) = &self.publisher {
                        p.send(req);
                    }
                }
            }
        }
    }

    /// Hands the storage work of `out` to the publisher (tasks' controls
    /// are dropped: no attempt runs).
    fn storage_outputs(&mut self, out: Vec<CoordinatorOutput>) {
        if let Some(p) = &self.publisher {
            for o in out {
                if let CoordinatorOutput::Storage(req) = o {
                    p.send(req);
                }
            }
        }
    }

    /// Runs one attempt until every task finished or one failed.
    fn supervise(&mut self, attempt: &Attempt, stopping: &mut Option<bool>) -> AttemptEnd {
        let n = self.graph.num_tasks();
        let mut finished = vec![false; n];
        let mut num_finished = 0;
        if let Some(savepoint) = *stopping {
            // A stop asked for during a failed attempt applies to this one.
            self.stop_sources(attempt, savepoint);
        }
        loop {
            // The coordinator sleeps until its next deadline (a trigger or a
            // timeout), not on a fixed tick: an idle job thread costs nothing.
            let tick = match self.coordinator.next_wakeup_ns() {
                Some(t) => crossbeam_channel::at(crate::util::clock::instant_of(t)),
                None => crossbeam_channel::never(),
            };
            let published = match &self.publisher {
                Some(p) => p.results().clone(),
                None => crossbeam_channel::never(),
            };
            select! {
                recv(published) -> r => match r {
                    Ok(Published::Done(id, result)) => {
                        let out = self.coordinator.published(id, result);
                        if let Some(why) = self.coordinator.too_many_failures() {
                            // Discard what failed (a staging folder left takes space).
                            self.storage_outputs(out);
                            return AttemptEnd::TooManyCheckpointFailures(why);
                        }
                        self.send_outputs(attempt, out);
                    }
                    // Each intact part becomes its task's base for deltas.
                    Ok(Published::Verified { id, damaged }) => {
                        self.coordinator.verified(id);
                        for (key, notifier) in &attempt.snapshot_threads {
                            if let Some(n) = notifier {
                                if !damaged.iter().any(|(k, _)| k == key) {
                                    n.verified(id);
                                }
                            }
                        }
                    }
                    Err(_) => {}
                },
                recv(attempt.events) -> ev => {
                    let Ok(ev) = ev else { unreachable!("the driver holds a sender") };
                    match ev {
                        TaskEvent::Finished { task } => {
                            finished[task] = true;
                            num_finished += 1;
                            let out = self.coordinator.task_finished(task);
                            self.send_outputs(attempt, out);
                            if num_finished == n {
                                return AttemptEnd::Finished;
                            }
                        }
                        TaskEvent::Failed { task, error } => {
                            return AttemptEnd::Failed { task, error };
                        }
                        TaskEvent::Ack { task, id, part, stats } => {
                            let out = self.coordinator.ack(task, id, part, stats);
                            self.send_outputs(attempt, out);
                        }
                        TaskEvent::Decline { task, id, reason, detail } => {
                            let out = self.coordinator.decline(task, id, reason, detail);
                            if let Some(why) = self.coordinator.too_many_failures() {
                                // Discard what failed (a staging folder left takes space).
                                self.storage_outputs(out);
                                return AttemptEnd::TooManyCheckpointFailures(why);
                            }
                            self.send_outputs(attempt, out);
                        }
                        TaskEvent::SourceDrained { task } => {
                            let out = self.coordinator.source_drained(task, stopping.unwrap_or(false));
                            self.send_outputs(attempt, out);
                        }
                    }
                }
                recv(self.commands) -> cmd => match cmd {
                    Ok(Command::Stop { savepoint }) => {
                        *stopping = Some(savepoint);
                        self.stop_sources(attempt, savepoint);
                    }
                    Ok(Command::Trigger(reply)) => {
                        let out = self.coordinator.trigger_on_demand(reply);
                        self.send_outputs(attempt, out);
                    }
                    Ok(Command::Periodic(on)) => self.coordinator.set_periodic(on),
                    Err(_) => {}
                },
                recv(tick) -> _ => {
                    let out = self.coordinator.tick();
                    if let Some(why) = self.coordinator.too_many_failures() {
                        // Discard what failed (a staging folder left takes space).
                        self.storage_outputs(out);
                        return AttemptEnd::TooManyCheckpointFailures(why);
                    }
                    self.send_outputs(attempt, out);
                }
            }
        }
    }

    fn stop_sources(&mut self, attempt: &Attempt, savepoint: bool) {
        self.coordinator.set_final_kind(if savepoint {
            SnapshotKind::Savepoint
        } else {
            SnapshotKind::Checkpoint
        });
        for t in self.graph.source_tasks() {
            let _ = attempt.controls[t].send(Control::Stop);
        }
    }

    /// Stops every task thread and returns the events they sent last.
    fn teardown(&mut self, mut attempt: Attempt) -> Vec<TaskEvent> {
        // Dropping the cancel sender disconnects every task's cancel
        // receiver: blocked sends and parked gates wake up and return.
        attempt.cancel.take();
        attempt.controls.clear();
        for t in attempt.threads.drain(..) {
            let _ = t.join();
        }
        attempt.events.try_iter().collect()
    }
}

impl Driver {
    /// Waits out the restart delay, answering commands meanwhile; true
    /// when a stop came (no restart then).
    fn wait_restart_delay(&mut self) -> bool {
        let deadline = std::time::Instant::now() + self.config.restart.delay;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.commands.recv_timeout(left) {
                Ok(Command::Stop { .. }) => return true,
                // No checkpoint while the job restarts.
                Ok(Command::Trigger(reply)) => {
                    let _ = reply.send(Err(AbortReason::Declined));
                }
                Ok(Command::Periodic(on)) => self.coordinator.set_periodic(on),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => return false,
                // The handle is gone: nobody can stop the job any more.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(left);
                    return false;
                }
            }
        }
    }
}

/// Sets up checkpoint storage and restore, then starts the job thread.
pub(crate) fn prepare_and_start(spec: JobSpec) -> Result<JobHandle, JobError> {
    let JobSpec {
        name,
        app_config,
        graph,
        config,
        failures,
        restored,
        storage,
        events,
    } = spec;
    if let Some(f) = failures
        .failures
        .iter()
        .find(|f| f.task >= graph.num_tasks())
    {
        return Err(JobError::Config(format!(
            "the failure plan names task {}, but the job has {} tasks (0..{}; see JobBuilder::task_names)",
            f.task,
            graph.num_tasks(),
            graph.num_tasks()
        )));
    }
    let job_name = name.clone();
    let job = JobFingerprint {
        job_name: name,
        config: app_config,
        parallelism: graph
            .parallelisms()
            .into_iter()
            .map(|(n, p)| (n, p as u32))
            .collect(),
        max_parallelism: config.max_parallelism,
    };
    if let Some((op, p)) = job
        .parallelism
        .iter()
        .find(|(_, p)| **p > config.max_parallelism)
    {
        return Err(JobError::Config(format!(
            "operator '{op}' has parallelism {p}, above the job's max_parallelism of {} (the number of key groups; raise it, before the first checkpoint)",
            config.max_parallelism
        )));
    }
    if let Some(r) = &restored {
        // A state given whole must match the graph's parallelism, unless
        // it says what it was (then it is rescaled).
        for task in r.states.keys() {
            if r.parallelism.is_empty() && !graph.task_ids().contains(task) {
                return Err(JobError::Restore(format!(
                    "the restored state has task {task}, which this job does not have (a different parallelism or graph; rescaling is not supported)"
                )));
            }
        }
    }
    let opened = restore::open(job, &config, storage, restored)?;
    if let Some(r) = &opened.restored {
        restore::check_all_state_claimed(
            r,
            &graph.operator_names,
            config.checkpoint.allow_non_restored_state,
        )?;
        restore::check_channel_state(
            r,
            &graph.parallelisms(),
            config.checkpoint.uses_priority_lanes(),
        )?;
        // Sources publish their restored positions before `start` returns.
        for hook in &graph.on_restore {
            hook(r)?;
        }
    }
    let history = Arc::new(Mutex::new(CheckpointHistory::new(
        config.checkpoint.history,
    )));
    let checkpointing = config.checkpoint.mode != CheckpointMode::None;
    let health = HealthCell::new(
        &job_name,
        checkpointing,
        config.checkpoint.tolerable_failures,
    );
    let mut coordinator = Coordinator::new(
        config.checkpoint.clone(),
        graph.num_tasks(),
        opened.restored.clone(),
        history.clone(),
        events,
    );
    if let Some(id) = opened.next_id {
        coordinator.set_next_id(id);
    }
    coordinator.set_observer(Box::new(CheckpointTelemetry::new(
        &job_name,
        config.checkpoint.mode.as_str(),
        &graph.task_ids(),
        health.clone(),
    )));
    let prepared = Prepared {
        name: job_name,
        health,
        restored: opened.restored,
        coordinator,
        publisher: opened.publisher,
        restore_skipped: opened.skipped,
        history,
    };
    Ok(start(graph, config, failures, prepared))
}

/// [`crate::state::SnapshotRequest::spread`] for `c`: the checkpoints in
/// one `full_min_interval` (at least 1), at most half of `full_every`
/// (a rolling chain is at most twice `spread` parts long); that half
/// without an interval (checkpoints on demand only).
fn spread(c: &crate::CheckpointConfig) -> u32 {
    let cap = (c.full_every / 2).max(1);
    match c.interval {
        Some(i) => {
            (c.full_min_interval.as_nanos() / i.as_nanos().max(1)).clamp(1, u128::from(cap)) as u32
        }
        None => cap,
    }
}
