//! The physical plan of a job, as the runtime runs it: operators and their
//! parallelism ([`JobGraph`]), the channels of one run attempt
//! ([`Wiring`]), and what a task is given ([`SubtaskCtx`], [`TaskRt`]).
//! [`crate::graph`] builds a plan; nothing here points back to it.

use crate::checkpoint::snapshot::{AsyncPhase, SnapshotJob};
use crate::checkpoint::task_state::TaskRestore;
use crate::config::{JobConfig, PinPolicy};
use crate::runtime::events::TaskEvent;
use crate::testing::InjectedFailure;
use crate::transport::channel::{BatchReturn, ChannelSender, ConsumerLanes};
use crate::types::control::Control;
use crate::types::element::StreamElement;
use crate::types::error::TaskError;
use crate::types::metrics::TaskMetrics;
use crate::types::task_id::TaskId;
use crossbeam_channel::{Receiver, Sender};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// Builds the task body of one subtask.
pub(crate) type MakeFn = Arc<dyn Fn(&mut SubtaskCtx<'_>) -> Box<dyn TaskBody> + Send + Sync>;
/// Wires one edge: `(wiring, edge, capacity, unaligned, producers,
/// consumers, producer names)`.
pub(crate) type WireFn =
    Arc<dyn Fn(&mut Wiring, usize, usize, bool, usize, usize, Vec<Arc<str>>) + Send + Sync>;

/// The run-time channel ends of one edge: `[producer][consumer]`.
pub(crate) struct EdgeEnds<T> {
    pub(crate) senders: Vec<Option<Vec<ChannelSender<T>>>>,
    pub(crate) receivers: Vec<Option<Vec<Receiver<StreamElement<T>>>>>,
    /// `[consumer][producer]`: each channel's return lane for emptied
    /// batch buffers.
    pub(crate) returns: Vec<Option<Vec<BatchReturn<T>>>>,
    /// `[consumer][producer]`: the unaligned-mode lanes (unaligned mode
    /// only, else empty lists).
    pub(crate) lanes: Vec<Option<Vec<ConsumerLanes>>>,
    pub(crate) producer_names: Vec<Arc<str>>,
}

/// All edges' channel ends of one run attempt, type-erased.
#[derive(Default)]
pub(crate) struct Wiring {
    pub(crate) edges: HashMap<usize, Box<dyn Any + Send>>,
    /// Unaligned mode: a copy of every channel's priority-lane sender, for
    /// the job thread to send each checkpoint's priority barrier into all
    /// channels at its trigger (see `runtime::job`).
    pub(crate) priority_lanes:
        Vec<crossbeam_channel::Sender<crate::types::element::CheckpointBarrier>>,
}

impl Wiring {
    pub(crate) fn edge<T: 'static>(&mut self, edge: usize) -> &mut EdgeEnds<T> {
        self.edges
            .get_mut(&edge)
            .and_then(|e| e.downcast_mut::<EdgeEnds<T>>())
            .expect("edge wired with its record type")
    }
}

/// What a task's constructor gets.
pub(crate) struct SubtaskCtx<'a> {
    pub(crate) subtask: usize,
    pub(crate) parallelism: usize,
    pub(crate) wiring: &'a mut Wiring,
    pub(crate) config: &'a JobConfig,
    pub(crate) metrics: Arc<TaskMetrics>,
    pub(crate) cancel: Receiver<()>,
    pub(crate) control: Receiver<Control>,
}

impl SubtaskCtx<'_> {
    /// What the factory of `operator` in this subtask is told.
    pub(crate) fn info(&self, operator: &str) -> crate::types::task_id::SubtaskInfo {
        crate::types::task_id::SubtaskInfo {
            operator: operator.to_string(),
            index: self.subtask,
            parallelism: self.parallelism,
        }
    }
}

/// What a running task can reach.
pub(crate) struct TaskRt {
    pub(crate) task: usize,
    /// The task's name, as in statistics (`keyed_sum[1]`).
    pub(crate) task_id: crate::types::task_id::TaskId,
    pub(crate) events: Sender<TaskEvent>,
    pub(crate) restored: Option<TaskRestore>,
    /// The checkpoint `restored` comes from.
    pub(crate) restored_checkpoint: Option<crate::types::element::CheckpointId>,
    pub(crate) checkpointing: bool,
    pub(crate) failure: Option<InjectedFailure>,
    /// The asynchronous phase of the task's checkpoints (when
    /// checkpointing): a snapshot thread, or work its worker runs.
    pub(crate) snapshots: Option<AsyncPhase>,
}

impl TaskRt {
    /// Hands a checkpoint's synchronous part to its asynchronous phase.
    pub(crate) fn submit_snapshot(&self, job: SnapshotJob) {
        match &self.snapshots {
            Some(w) => {
                w.submit(job);
                crate::checkpoint::snapshot::inline_submitted();
            }
            // Without checkpointing no barrier reaches a task.
            None => debug_assert!(false, "a checkpoint without a snapshot thread"),
        }
    }
}

/// What one [`TaskBody::step`] left the task doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It did something and may have more to do now.
    Busy,
    /// Nothing to do until something [`TaskBody::watch`] registers is
    /// ready, or until the deadline (ns, the engine's clock) passes.
    Idle(Option<u64>),
    /// The task ended (its output is sent).
    Done,
}

/// A runnable task (a source loop or an input-gate loop with its chain).
/// On its own thread [`TaskBody::run`] runs it to the end, waiting where
/// it must; on a cooperative worker (`runtime::worker`) the worker calls
/// [`TaskBody::step`] in turn with the other tasks, and waits on what
/// [`TaskBody::watch`] registers when none of them is busy.
pub(crate) trait TaskBody: Send {
    /// Runs the task to the end on the calling thread.
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError>;
    /// Cooperative mode: does up to `budget` units of work (elements or
    /// batches) without waiting.
    fn step(&mut self, rt: &mut TaskRt, budget: u32) -> Result<Step, TaskError>;
    /// Cooperative mode: registers in `sel` what would give the task
    /// something to do after it returned [`Step::Idle`].
    fn watch<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>);
}

/// Creates the channels of edge `edge` for one run attempt: one bounded
/// channel of `capacity` elements per (producer, consumer) pair, with its
/// priority lane and credits when `unaligned` ([`crate::channel`]).
pub(crate) fn wire_edge<T: Send + 'static>(
    wiring: &mut Wiring,
    edge: usize,
    capacity: usize,
    unaligned: bool,
    from_par: usize,
    to_par: usize,
    producer_names: Vec<Arc<str>>,
) {
    let mut senders: Vec<Vec<ChannelSender<T>>> = (0..from_par).map(|_| Vec::new()).collect();
    let mut receivers: Vec<Vec<Receiver<StreamElement<T>>>> =
        (0..to_par).map(|_| Vec::new()).collect();
    let mut returns: Vec<Vec<BatchReturn<T>>> = (0..to_par).map(|_| Vec::new()).collect();
    let mut lanes: Vec<Vec<ConsumerLanes>> = (0..to_par).map(|_| Vec::new()).collect();
    for s in senders.iter_mut() {
        let consumers = receivers
            .iter_mut()
            .zip(returns.iter_mut())
            .zip(lanes.iter_mut());
        for (c, ((r, b), l)) in consumers.enumerate() {
            let consumer = format!("consumer {c} of edge {edge}").into();
            let (tx, rx, back, consumer_lanes) =
                crate::transport::channel::channel(capacity, unaligned, consumer);
            if let Some(lanes) = &tx.lanes {
                wiring.priority_lanes.push(lanes.priority.clone());
            }
            s.push(tx);
            r.push(rx);
            b.push(back);
            l.extend(consumer_lanes);
        }
    }
    wiring.edges.insert(
        edge,
        Box::new(EdgeEnds {
            senders: senders.into_iter().map(Some).collect(),
            receivers: receivers.into_iter().map(Some).collect(),
            returns: returns.into_iter().map(Some).collect(),
            lanes: lanes.into_iter().map(Some).collect(),
            producer_names,
        }),
    );
}

/// A hook told the state a job restores at start (see
/// `JobGraph::on_restore`).
pub(crate) type RestoreHook = Box<
    dyn Fn(&crate::checkpoint::RestoredState) -> Result<(), crate::types::error::JobError>
        + Send
        + Sync,
>;

/// The finished graph, ready to run (and to run again after a failure).
pub(crate) struct JobGraph {
    nodes: Vec<PlanNode>,
    edges: Vec<PlanEdge>,
    /// Every operator name of the job (sources included): a restored
    /// operator state must belong to one of them.
    pub(crate) operator_names: std::collections::HashSet<String>,
    /// Called with the state the job restores at start, before
    /// `JobBuilder::start` returns: sources publish their restored
    /// position there (`Ingest::restored_position`,
    /// `source::RestoredSource`).
    pub(crate) on_restore: Vec<RestoreHook>,
    /// Every task in start order.
    tasks: Vec<PlanTask>,
}

/// One operator (a chain head with everything chained to it) of the plan.
pub(crate) struct PlanNode {
    /// The operator's name, unique in the job.
    pub(crate) name: String,
    /// How many subtasks run it.
    pub(crate) parallelism: usize,
    /// True for a source (the coordinator triggers checkpoints there).
    pub(crate) is_source: bool,
    /// Builds one subtask's task body.
    pub(crate) make: MakeFn,
}

/// One exchange between two nodes of the plan.
pub(crate) struct PlanEdge {
    /// The producing node.
    pub(crate) from: usize,
    /// The consuming node.
    pub(crate) to: usize,
    /// Creates the edge's channels for one run attempt.
    pub(crate) wire: WireFn,
}

/// One task of the plan: subtask `subtask` of node `node`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanTask {
    pub(crate) node: usize,
    pub(crate) subtask: usize,
}

impl JobGraph {
    pub(crate) fn new(nodes: Vec<PlanNode>, edges: Vec<PlanEdge>) -> Self {
        let tasks = nodes
            .iter()
            .enumerate()
            .flat_map(|(node, n)| (0..n.parallelism).map(move |subtask| PlanTask { node, subtask }))
            .collect();
        JobGraph {
            nodes,
            edges,
            operator_names: Default::default(),
            on_restore: Vec::new(),
            tasks,
        }
    }

    pub(crate) fn num_tasks(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn task_node(&self, task: usize) -> PlanTask {
        self.tasks[task]
    }

    pub(crate) fn task_id(&self, task: usize) -> TaskId {
        let t = self.tasks[task];
        TaskId::new(self.nodes[t.node].name.clone(), t.subtask)
    }

    pub(crate) fn task_ids(&self) -> Vec<TaskId> {
        (0..self.num_tasks()).map(|t| self.task_id(t)).collect()
    }

    /// Operator name → parallelism, for checkpoint compatibility checks.
    pub(crate) fn parallelisms(&self) -> Vec<(String, usize)> {
        self.nodes
            .iter()
            .map(|n| (n.name.clone(), n.parallelism))
            .collect()
    }

    pub(crate) fn source_tasks(&self) -> Vec<usize> {
        (0..self.num_tasks())
            .filter(|t| self.nodes[self.tasks[*t].node].is_source)
            .collect()
    }

    /// Linux keeps 15 bytes of a thread name: `lg<node>-<name>-<subtask>`
    /// with the name's letters and digits cut to fit. The node number keeps
    /// it unique; the full name is in the metrics.
    pub(crate) fn os_thread_name(&self, task: usize) -> String {
        let PlanTask { node, subtask } = self.tasks[task];
        let prefix = format!("lg{node}-");
        let suffix = format!("-{subtask}");
        let room = 15usize.saturating_sub(prefix.len() + suffix.len());
        let abbr: String = self.nodes[node]
            .name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(room)
            .collect();
        format!("{prefix}{abbr}{suffix}")
    }

    pub(crate) fn cores_for(&self, pinning: &PinPolicy) -> Option<Vec<usize>> {
        match pinning {
            PinPolicy::None => None,
            PinPolicy::RoundRobin => core_affinity::get_core_ids()
                .map(|ids| ids.into_iter().map(|c| c.id).collect::<Vec<_>>())
                .filter(|v| !v.is_empty()),
            PinPolicy::Cores(c) => Some(c.clone()),
        }
    }

    pub(crate) fn wire(&self, wiring: &mut Wiring, capacity: usize, unaligned: bool) {
        for (e, edge) in self.edges.iter().enumerate() {
            let from = &self.nodes[edge.from];
            let names: Vec<Arc<str>> = (0..from.parallelism)
                .map(|s| Arc::from(TaskId::new(from.name.clone(), s).to_string()))
                .collect();
            let to_par = self.nodes[edge.to].parallelism;
            (edge.wire)(
                wiring,
                e,
                capacity,
                unaligned,
                from.parallelism,
                to_par,
                names,
            );
        }
    }

    pub(crate) fn parallelism(&self, node: usize) -> usize {
        self.nodes[node].parallelism
    }

    pub(crate) fn make(&self, node: usize, ctx: &mut SubtaskCtx<'_>) -> Box<dyn TaskBody> {
        (self.nodes[node].make)(ctx)
    }
}
