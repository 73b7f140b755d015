//! The job graph builder: sources, operators, exchanges and sinks.
//!
//! ```text
//! let job = JobBuilder::new("wordcount", JobConfig::default());
//! job.source("numbers", 2, |info| MySource::new(info.index)) // Stream<u64>
//!    .map(|x| x * 2)                                           // chained
//!    .key_by(|x| *x)                                           // Exchange<u64>
//!    .task("sum", 2)                                           // a new task
//!    .process("sum", |_| SumOperator::default())               // chained
//!    .sink("out", |_| MySink);                                 // chained
//! let handle = job.start()?;
//! ```
//!
//! A [`Stream`] is an operator chain still open at its end: `map`,
//! `filter`, `flat_map`, `process` and `sink` add operators to the same task
//! (chaining, as Flink chains operators joined by `forward` with equal
//! parallelism). `key_by`, `rebalance`, `broadcast` and `forward` end the
//! chain with an [`Exchange`]: a set of channels to the next task, which
//! [`Exchange::task`] starts, with its own input gate.

use crate::barrier::AnyHandler;
use crate::config::{IngestConfig, JobConfig};
use crate::job::JobHandle;
use crate::operator::{Either, FnOperator, Operator, Sink, SinkOperator, Source};
use crate::runtime::chain::{Link, NoOutput, Stage};
use crate::runtime::plan::{
    wire_edge, JobGraph, MakeFn, PlanEdge, PlanNode, SubtaskCtx, TaskBody, WireFn,
};
use crate::runtime::task::{GateTask, SourceTask};
use crate::testing::FailurePlan;
use crate::transport::channel::{ChannelSender, ChannelWriter, NoKey, OutputConfig, Route};
use crate::transport::handoff::{Ingest, Output};
use crate::transport::input_gate::InputGate;
use crate::types::element::RecordSize;
use crate::types::error::JobError;
use crate::types::task_id::SubtaskInfo;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

/// What records must be to travel through a job: cloneable (broadcast),
/// sendable between task threads, sized for alignment accounting, and
/// serialisable with serde (unaligned checkpoints persist the records in
/// flight as channel state, as Flink needs a `TypeSerializer` for every
/// type; derive `Serialize` and `Deserialize`).
///
/// # Examples
/// A record type of the application's own, and a stage that works for
/// any record type (run with the shared [`crate::example`] helper):
/// ```
/// use lockgate::{example, Data, RecordSize, Stream};
///
/// #[derive(Clone, Debug, PartialEq, RecordSize, serde::Serialize, serde::Deserialize)]
/// struct Reading {
///     sensor: u32,
///     celsius: f64,
/// }
///
/// /// Every record twice.
/// fn twice<T: Data>(records: Stream<T>) -> Stream<T> {
///     records.flat_map(|r: T| [r.clone(), r])
/// }
///
/// let reading = Reading { sensor: 7, celsius: 21.5 };
/// assert_eq!(example::run(vec![reading.clone()], twice), [reading.clone(), reading]);
/// assert_eq!(example::run(vec!['x'], twice), ['x', 'x']);
/// ```
pub trait Data:
    Clone + Send + RecordSize + serde::Serialize + serde::de::DeserializeOwned + 'static
{
}
impl<T: Clone + Send + RecordSize + serde::Serialize + serde::de::DeserializeOwned + 'static> Data
    for T
{
}

type ChainFn<T> =
    Arc<dyn Fn(&mut SubtaskCtx<'_>, Box<dyn Link<T>>) -> Box<dyn TaskBody> + Send + Sync>;
type TailFn<T> = Arc<dyn Fn(&mut SubtaskCtx<'_>) -> Box<dyn Link<T>> + Send + Sync>;

struct NodeSpec {
    name: String,
    parallelism: usize,
    is_source: bool,
    make: Option<MakeFn>,
}

struct EdgeSpec {
    from: usize,
    to: usize,
    wire: WireFn,
}

#[derive(Default)]
struct GraphState {
    nodes: Vec<NodeSpec>,
    edges: Vec<EdgeSpec>,
    operator_names: HashSet<String>,
    task_names: HashSet<String>,
    on_restore: Vec<crate::runtime::plan::RestoreHook>,
    checkpoint_events: Option<crate::transport::handoff::OutputSender<crate::CheckpointStats>>,
    errors: Vec<String>,
    anon: usize,
}

impl GraphState {
    fn add_node(&mut self, name: &str, parallelism: usize, is_source: bool) -> usize {
        if parallelism == 0 || parallelism > crate::config::MAX_PARALLELISM {
            self.errors.push(format!(
                "operator '{name}': parallelism must be between 1 and {}, got {parallelism}",
                crate::config::MAX_PARALLELISM
            ));
        }
        if !self.task_names.insert(name.to_string()) {
            self.errors.push(format!(
                "task name '{name}' is used twice (names key checkpointed state and must be unique)"
            ));
        }
        self.nodes.push(NodeSpec {
            name: name.to_string(),
            parallelism: parallelism.clamp(1, crate::config::MAX_PARALLELISM),
            is_source,
            make: None,
        });
        self.nodes.len() - 1
    }

    fn claim_name(&mut self, name: &str) {
        if name == crate::checkpoint::channel_state::CHANNEL_STATE_OPERATOR {
            self.errors.push(format!(
                "operator name '{name}' is reserved (it keys a task's channel state)"
            ));
        }
        if !self.operator_names.insert(name.to_string()) {
            self.errors.push(format!(
                "operator name '{name}' is used twice (names key operator state and must be unique)"
            ));
        }
    }

    fn anon_name(&mut self, node: usize, what: &str) -> String {
        self.anon += 1;
        format!("{}.{what}#{}", self.nodes[node].name, self.anon)
    }
}

/// Builds a job: add sources, chain operators, exchange, sink, then
/// [`JobBuilder::start`].
///
/// # Examples
/// A source of 2 subtasks, a keyed sum in a task of its own, a sink:
/// ```
/// use lockgate::{BoxError, Checkpointed, Context, JobBuilder, JobConfig, KeyedState, Operator, Source, SourcePoll};
///
/// /// Emits `0..n`, then ends.
/// struct Numbers { next: u64, n: u64 }
/// impl Source<u64> for Numbers {
///     fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
///         while out.len() < max && self.next < self.n {
///             out.push(self.next);
///             self.next += 1;
///         }
///         Ok(if self.next == self.n { SourcePoll::Finished } else { SourcePoll::Ready })
///     }
/// }
///
/// impl Checkpointed for Numbers {} // no state: a replayable source would snapshot `next`
///
/// /// A running sum per key.
/// struct Sum(KeyedState<u64, u64>);
/// impl Operator<u64, (u64, u64)> for Sum {
///     fn process(&mut self, input: &mut Vec<u64>, ctx: &mut Context<'_, (u64, u64)>) -> Result<(), BoxError> {
///         for x in input.drain(..) {
///             let s = self.0.get_or_default(x % 3);
///             *s += x;
///             ctx.emit((x % 3, *s));
///         }
///         Ok(())
///     }
/// }
///
/// impl Checkpointed for Sum {}
///
/// let job = JobBuilder::new("sums", JobConfig::default());
/// let sums = job
///     .source("numbers", 2, |info| {
///         let first = info.index as u64 * 50;
///         Numbers { next: first, n: first + 50 }
///     })
///     .key_by(|x| x % 3)
///     .task("sum", 2)
///     .process("sum", |_| Sum(KeyedState::new()))
///     .collect();
/// assert_eq!(job.task_names(), ["numbers[0]", "numbers[1]", "sum[0]", "sum[1]"]);
/// job.start().unwrap().wait().unwrap();
/// let mut last = [0u64; 3];
/// for (k, s) in sums.try_iter() {
///     last[k as usize] = last[k as usize].max(s);
/// }
/// assert_eq!(last.iter().sum::<u64>(), (0..100).sum::<u64>());
/// ```
pub struct JobBuilder {
    g: Rc<RefCell<GraphState>>,
    config: JobConfig,
    failures: FailurePlan,
    restore: Option<crate::checkpoint::RestoredState>,
    name: String,
    app_config: serde_json::Value,
    storage: Option<Box<dyn crate::checkpoint::CheckpointStorage>>,
}

impl std::fmt::Debug for JobBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBuilder").finish_non_exhaustive()
    }
}

/// An operator chain open at its end, producing records of type `T`.
///
/// Operations on a stream chain into its task (no channel between them);
/// `key_by`, `rebalance`, `broadcast` and `forward` end the chain with an
/// [`Exchange`].
///
/// # Examples
/// ```
/// use lockgate::{JobBuilder, JobConfig};
/// let job = JobBuilder::new("chain", JobConfig::default());
/// let (input, ingest) = job.ingest::<i64>("input", 16);
/// let out = input
///     .filter(|x| *x > 0)
///     .map(|x| x * 10)
///     .flat_map(|x| [x, x + 1])
///     .collect(); // all four in the ingest source's task
/// let handle = job.start().unwrap();
/// for x in [-1, 1, 2] {
///     ingest.push(x).unwrap();
/// }
/// ingest.close();
/// handle.wait().unwrap();
/// assert_eq!(out.try_iter().collect::<Vec<_>>(), [10, 11, 20, 21]);
/// ```
#[must_use = "a stream must end in a sink or an exchange"]
pub struct Stream<T> {
    g: Rc<RefCell<GraphState>>,
    node: usize,
    parallelism: usize,
    chain: ChainFn<T>,
    /// Where the finished chain's task constructor goes.
    parent: Parent,
}

impl<T> std::fmt::Debug for Stream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").finish_non_exhaustive()
    }
}

/// Where a finished chain's constructor is registered: its task's node, or
/// one branch of a [`Stream::split`].
#[derive(Clone)]
enum Parent {
    Node(usize),
    Branch(Rc<RefCell<SplitJoin>>, usize),
}

type CombineFn = Box<dyn FnOnce(MakeFn, MakeFn) -> MakeFn>;

/// The two branches of a split, joined into one task constructor once both
/// are finished (build time only).
struct SplitJoin {
    makes: [Option<MakeFn>; 2],
    combine: Option<CombineFn>,
    parent: Parent,
}

/// Registers a finished constructor with its parent (see [`Parent`]).
fn register(g: &Rc<RefCell<GraphState>>, parent: Parent, make: MakeFn) {
    match parent {
        Parent::Node(n) => g.borrow_mut().nodes[n].make = Some(make),
        Parent::Branch(join, i) => {
            let ready = {
                let mut j = join.borrow_mut();
                j.makes[i] = Some(make);
                match (&j.makes[0], &j.makes[1]) {
                    (Some(a), Some(b)) => {
                        let (a, b) = (a.clone(), b.clone());
                        let combine = j.combine.take().expect("a split joins once");
                        Some((combine(a, b), j.parent.clone()))
                    }
                    _ => None,
                }
            };
            if let Some((combined, up)) = ready {
                register(g, up, combined);
            }
        }
    }
}

/// The body a branch's constructor returns: never run (the split's own
/// constructor builds the task).
struct BranchBuilt;

impl TaskBody for BranchBuilt {
    fn run(
        &mut self,
        _rt: &mut crate::runtime::plan::TaskRt,
    ) -> Result<(), crate::error::TaskError> {
        Ok(())
    }
    fn step(
        &mut self,
        _rt: &mut crate::runtime::plan::TaskRt,
        _budget: u32,
    ) -> Result<crate::runtime::plan::Step, crate::error::TaskError> {
        Ok(crate::runtime::plan::Step::Done)
    }
    fn watch<'a>(&'a self, _sel: &mut crossbeam_channel::Select<'a>) {}
}

/// Builds one producer subtask's writer for an exchange: its channels,
/// its subtask index, the output settings, the subtask's context.
type MakeWriter<T> = Arc<
    dyn Fn(Vec<ChannelSender<T>>, usize, OutputConfig, &SubtaskCtx<'_>) -> Box<dyn Link<T>>
        + Send
        + Sync,
>;

/// How an exchange distributes records over the next operator's subtasks:
/// the writer it builds (its [`Route`]; a hash route's writer is generic
/// over the key function, inlined per record, which is why the exchange
/// keeps a builder rather than the route), and whether it is forward
/// (which chains, and needs equal parallelism).
struct Partitioning<T> {
    forward: bool,
    make: MakeWriter<T>,
}

impl<T> Clone for Partitioning<T> {
    fn clone(&self) -> Self {
        Partitioning {
            forward: self.forward,
            make: self.make.clone(),
        }
    }
}

impl<T: Data> Partitioning<T> {
    fn of<K: crate::transport::channel::KeyOf<T> + Clone + Sync>(route: Route<K>) -> Self {
        let forward = matches!(route, Route::Forward);
        Partitioning {
            forward,
            make: Arc::new(move |senders, subtask, config, ctx: &SubtaskCtx<'_>| {
                Box::new(ChannelWriter::new(
                    senders,
                    route.clone(),
                    subtask,
                    config,
                    ctx.cancel.clone(),
                    ctx.metrics.clone(),
                ))
            }),
        }
    }
}

/// The end of a chain: records of type `T` leave through channels
/// partitioned as chosen, towards the next operator (a new task).
///
/// # Examples
/// Two exchanges merged into one task ([`Exchange::union`]), run with the
/// shared [`crate::example`] helper:
/// ```
/// use lockgate::example;
///
/// let mut merged = example::run(1..=3u64, |numbers| {
///     let (ones, tens) = numbers.split();
///     let tens = tens.map(|x| x * 10).rebalance();
///     ones.key_by(|x| *x).union(tens).task("merged", 2)
/// });
/// merged.sort_unstable();
/// assert_eq!(merged, [1, 2, 3, 10, 20, 30]);
/// ```
#[must_use = "an exchange must lead to an operator or a sink"]
pub struct Exchange<T> {
    g: Rc<RefCell<GraphState>>,
    inputs: Vec<(Stream<T>, Partitioning<T>)>,
}

impl<T> std::fmt::Debug for Exchange<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange").finish_non_exhaustive()
    }
}

/// Two streams joined for a two-input operator (Flink's `connect`).
///
/// # Examples
/// Prices and orders keyed by their symbol, so that a symbol's records of
/// both meet in one subtask (run with the shared [`crate::example`]
/// helper, the two streams split from one list of [`crate::Either`]
/// records):
/// ```
/// use lockgate::{example, Either};
///
/// type Price = (u64, u64); // (symbol, price)
/// type Order = (u64, u32); // (symbol, quantity)
/// let records: Vec<Either<Price, Order>> =
///     vec![Either::Left((1, 100)), Either::Right((1, 3)), Either::Left((2, 7))];
/// let mut tagged = example::run(records, |records| {
///     let (prices, orders) = records.split_either();
///     prices
///         .connect(orders)
///         .key_by(|p| p.0, |o| o.0)
///         .task("both", 2)
///         .map(|record| match record {
///             Either::Left(price) => (price.0, 'p'),
///             Either::Right(order) => (order.0, 'o'),
///         })
/// });
/// tagged.sort_unstable();
/// assert_eq!(tagged, [(1, 'o'), (1, 'p'), (2, 'p')]);
/// ```
#[must_use = "connected streams must lead to an operator"]
pub struct Connected<A, B> {
    a: Stream<A>,
    b: Stream<B>,
}

impl<A, B> std::fmt::Debug for Connected<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected").finish_non_exhaustive()
    }
}

impl JobBuilder {
    /// A new job named `name` (used in checkpoint metadata and logs).
    pub fn new(name: impl Into<String>, config: JobConfig) -> Self {
        JobBuilder {
            g: Rc::new(RefCell::new(GraphState::default())),
            config,
            failures: FailurePlan::none(),
            restore: None,
            name: name.into(),
            app_config: serde_json::Value::Null,
            storage: None,
        }
    }

    /// The job's configuration.
    pub fn config(&self) -> &JobConfig {
        &self.config
    }

    /// Sets the failures to inject (tests, the load generator).
    pub fn with_failures(mut self, plan: FailurePlan) -> Self {
        self.failures = plan;
        self
    }

    /// Records the application's configuration in checkpoint metadata: a
    /// restore from a checkpoint taken with another value is refused.
    pub fn with_app_config(mut self, config: serde_json::Value) -> Self {
        self.app_config = config;
        self
    }

    /// Keeps the job's checkpoints in `storage` (any [`CheckpointStorage`]:
    /// another store, or a shared [`MemoryStorage`] a test inspects).
    /// [`CheckpointConfig::dir`] is the shorthand for the common case, a
    /// [`LocalDirStorage`] on that folder; without either a job that
    /// checkpoints keeps its checkpoints in a [`MemoryStorage`] of its own
    /// (enough for restarts within the process). With
    /// [`CheckpointConfig::restore`] the job restores from `storage`.
    ///
    /// [`CheckpointStorage`]: crate::storage::CheckpointStorage
    /// [`MemoryStorage`]: crate::storage::MemoryStorage
    /// [`LocalDirStorage`]: crate::storage::LocalDirStorage
    /// [`CheckpointConfig::dir`]: crate::CheckpointConfig::dir
    /// [`CheckpointConfig::restore`]: crate::CheckpointConfig::restore
    pub fn with_storage(mut self, storage: Box<dyn crate::checkpoint::CheckpointStorage>) -> Self {
        self.storage = Some(storage);
        self
    }

    /// Starts the job from `state`, given whole, instead of from scratch: a
    /// checkpoint's state read by the application, e.g. several jobs'
    /// checkpoints merged ([`RestoredState::merge`], as `lockgate kafka
    /// run --restore` does for several processes). For one folder,
    /// [`CheckpointConfig::restore`] is the shorthand: it picks the
    /// newest checkpoint there whose whole chain loads
    /// ([`load_restorable`]) and checks that this job took it.
    ///
    /// [`RestoredState::merge`]: crate::storage::RestoredState::merge
    /// [`CheckpointConfig::restore`]: crate::CheckpointConfig::restore
    /// [`load_restorable`]: crate::storage::load_restorable
    pub fn with_restored_state(mut self, state: crate::checkpoint::RestoredState) -> Self {
        self.restore = Some(state);
        self
    }

    /// The statistics of every checkpoint of the job as it ends (completed
    /// or aborted), in the order they end, for an application that keeps
    /// more than [`crate::JobHandle::metrics`]'s last
    /// [`crate::CheckpointConfig::history`] (a timeline, a log). Unbounded,
    /// as [`Stream::collect`]: read it, or drop it (then nothing more is
    /// sent). Asking again replaces the earlier subscription.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointConfig, JobBuilder, JobConfig};
    /// use std::time::Duration;
    ///
    /// let mut config = JobConfig::default();
    /// config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(5), None);
    /// let job = JobBuilder::new("events", config);
    /// let events = job.checkpoint_events();
    /// let (stream, ingest) = job.ingest::<u64>("in", 64);
    /// let _out = stream.collect();
    /// let handle = job.start().unwrap();
    /// let first = events.recv().expect("a checkpoint ends while the job runs");
    /// assert!(first.id.get() >= 1);
    /// drop(ingest);
    /// handle.wait().unwrap();
    /// ```
    pub fn checkpoint_events(&self) -> Output<crate::CheckpointStats> {
        let (tx, rx) = crate::transport::handoff::output_channel();
        self.g.borrow_mut().checkpoint_events = Some(tx);
        rx
    }

    /// A source with `parallelism` subtasks; `factory(&info)` makes each
    /// subtask's source (again after each restart), told its [`SubtaskInfo`].
    pub fn source<T, S, F>(&self, name: &str, parallelism: usize, factory: F) -> Stream<T>
    where
        T: Data,
        S: Source<T> + 'static,
        F: Fn(&SubtaskInfo) -> S + Send + Sync + 'static,
    {
        let node = {
            let mut g = self.g.borrow_mut();
            g.claim_name(name);
            g.add_node(name, parallelism, true)
        };
        let name = name.to_string();
        let chain: ChainFn<T> = Arc::new(move |ctx, mut tail| {
            if ctx.config.checkpoint.uses_priority_lanes() {
                // A trigger ends a blocked push (`channel::Interrupt`).
                tail.set_interrupt(&crate::transport::channel::Interrupt {
                    control: Some(ctx.control.clone()),
                    priority: Vec::new(),
                });
            }
            Box::new(SourceTask {
                name: name.clone(),
                source: factory(&ctx.info(&name)),
                chain: tail,
                batch_size: ctx.config.batch_size,
                control: ctx.control.clone(),
                cancel: ctx.cancel.clone(),
                metrics: ctx.metrics.clone(),
                priority_at_trigger: ctx.config.checkpoint.unaligned_after_ns() == Some(0),
                run: crate::runtime::task::SourceRun::new(ctx.config.batch_size),
            })
        });
        Stream {
            g: self.g.clone(),
            node,
            parallelism,
            chain,
            parent: Parent::Node(node),
        }
    }

    /// An ingest source fed by the application through the returned
    /// [`Ingest`] handle: parallelism 1, a channel of `capacity` records
    /// (at least 1), and the default replay log of [`IngestConfig`].
    ///
    /// See [`JobBuilder::ingest_with`] for what survives a failure.
    pub fn ingest<T: Data>(&self, name: &str, capacity: usize) -> (Stream<T>, Ingest<T>) {
        self.ingest_with(
            name,
            IngestConfig {
                channel_capacity: capacity,
                ..IngestConfig::default()
            },
        )
    }

    /// An ingest source fed by the application through the returned
    /// [`Ingest`] handle (parallelism 1), configured by `config`.
    ///
    /// With checkpoints on, the source keeps every record it took since the
    /// last completed checkpoint in a replay log (at most
    /// [`IngestConfig::replay_capacity`] records; when the log is full the
    /// source stops taking records, so [`Ingest::push`] blocks and
    /// [`Ingest::try_push`] answers [`PushError::Full`](crate::ingest::PushError::Full) until a checkpoint
    /// completes and cuts the log). After an in-process restart it replays
    /// the log from the restored checkpoint's position, so a record pushed
    /// once is applied once (exactly-once) or at least once, as the mode
    /// says, and the application pushes nothing again.
    ///
    /// After a process restart (a new job restoring a checkpoint folder),
    /// the log is gone: [`Ingest::restored_position`] tells how many records
    /// the restored checkpoint had consumed, and the application pushes
    /// again from there. With checkpoints off nothing is kept: a restart
    /// starts from no state. The source ends when every [`Ingest`] handle
    /// is dropped or [`Ingest::close`]d.
    pub fn ingest_with<T: Data>(&self, name: &str, config: IngestConfig) -> (Stream<T>, Ingest<T>) {
        self.ingest_source(name, config, None)
    }

    /// An ingest source with event time (as [`JobBuilder::ingest_with`]
    /// otherwise): each record's timestamp comes with it
    /// ([`Ingest::push_at`]) or from the strategy's function, and the
    /// source generates watermarks as `strategy` says (bounded
    /// out-of-orderness, idleness), besides the explicit ones the
    /// application pushes ([`Ingest::push_watermark`]), so that event-time
    /// operators downstream (windows) fire while the input runs.
    ///
    /// The watermark after a record depends only on the records before
    /// it: the source ends its batch right after a record (or explicit
    /// watermark) that moves it, so the same watermark follows the same
    /// record in every attempt. Records, their pushed timestamps and
    /// explicit watermarks are in the replay log, so an in-process restart
    /// replays them exactly; the checkpointed state is the position (still
    /// counting records: [`Ingest::restored_position`]), the largest
    /// timestamp and the watermark. Idleness is processing time: it is not
    /// replayed, and a restarted source starts active.
    ///
    /// # Examples
    /// ```
    /// use lockgate::source::WatermarkStrategy;
    /// use lockgate::{IngestConfig, JobBuilder, JobConfig, Watermark};
    ///
    /// let job = JobBuilder::new("event-time", JobConfig::default());
    /// let strategy = WatermarkStrategy::bounded_out_of_orderness(10).with_timestamps(|t: &i64| *t);
    /// let (times, ingest) = job.ingest_event_time::<i64>("times", IngestConfig::default(), strategy);
    /// let out = times.collect();
    /// let handle = job.start().unwrap();
    /// for t in [100, 105, 103] {
    ///     ingest.push(t).unwrap();
    /// }
    /// ingest.push_watermark(Watermark(200)).unwrap(); // the application knows more
    /// drop(ingest);
    /// handle.wait().unwrap();
    /// assert_eq!(out.try_iter().count(), 3);
    /// ```
    pub fn ingest_event_time<T: Data>(
        &self,
        name: &str,
        config: IngestConfig,
        strategy: crate::operator::event_time::WatermarkStrategy<T>,
    ) -> (Stream<T>, Ingest<T>) {
        self.ingest_source(name, config, Some(strategy))
    }

    fn ingest_source<T: Data>(
        &self,
        name: &str,
        config: IngestConfig,
        strategy: Option<crate::operator::event_time::WatermarkStrategy<T>>,
    ) -> (Stream<T>, Ingest<T>) {
        let (ingest, rx) = crate::transport::handoff::ingest_channel(config.channel_capacity);
        let r2 = ingest.restored.clone();
        // The restored position is published before `start` returns.
        let cell = ingest.restored.clone();
        let source_name = name.to_string();
        self.g.borrow_mut().on_restore.push(Box::new(
            move |r: &crate::checkpoint::RestoredState| {
                let snaps =
                    r.states_of(&crate::types::task_id::TaskId::new(source_name.clone(), 0));
                // The newest of its chain (a part may build on older ones).
                if let Some(s) = snaps.iter().rfind(|s| s.operator == source_name) {
                    let position =
                        crate::operator::ingest::decode_position(&s.bytes).map_err(|e| {
                            JobError::Restore(format!("ingest source '{source_name}': {e}"))
                        })?;
                    cell.store(position, std::sync::atomic::Ordering::Release);
                }
                Ok(())
            },
        ));
        let checkpointing = self.config.checkpoint.mode != crate::barrier::CheckpointMode::None;
        let log = checkpointing.then(|| {
            Arc::new(std::sync::Mutex::new(
                crate::operator::ingest::ReplayLog::new(config.replay_capacity),
            ))
        });
        let stream = self.source(name, 1, move |_| {
            crate::operator::ingest::IngestSource::new(
                rx.clone(),
                r2.clone(),
                log.clone(),
                strategy.clone(),
            )
        });
        (stream, ingest)
    }

    /// What the job restores for source `name` at start, readable once
    /// [`JobBuilder::start`] returned (before any record is read): the
    /// checkpoint and each old subtask's state of that source, decoded as
    /// a replayable source's positions with
    /// [`RestoredSource::positions`](crate::source::RestoredSource::positions).
    /// Empty for a fresh start. Ask before `start`.
    ///
    /// # Examples
    /// See [`crate::source::Replayable`].
    pub fn restored_source(&self, name: &str) -> crate::operator::replayable::RestoredSource {
        let restored = crate::operator::replayable::RestoredSource::default();
        let cell = restored.clone();
        let source_name = name.to_string();
        self.g.borrow_mut().on_restore.push(Box::new(
            move |r: &crate::checkpoint::RestoredState| {
                let old = r.parallelism.get(&source_name).map_or(0, |p| *p as usize);
                let states = (0..old)
                    .map(|j| {
                        r.states_of(&crate::types::task_id::TaskId::new(source_name.clone(), j))
                            .iter()
                            .rfind(|s| s.operator == source_name)
                            .map(|s| s.bytes.clone())
                    })
                    .collect();
                cell.set(r.checkpoint, states);
                Ok(())
            },
        ));
        restored
    }

    /// The tasks the job will run, in start order, by full name
    /// (`keyed_sum[1]`); the index of a name is the task index used by
    /// [`FailurePlan::with`], the name what [`FailurePlan::with_task`]
    /// takes.
    pub fn task_names(&self) -> Vec<String> {
        let g = self.g.borrow();
        g.nodes
            .iter()
            .flat_map(|n| (0..n.parallelism).map(move |i| format!("{}[{i}]", n.name)))
            .collect()
    }

    /// Checks the graph and starts the job's threads.
    ///
    /// # Errors
    /// [`JobError::Config`] for an invalid configuration or graph (a
    /// duplicate operator name, a zero parallelism, a stream that ends in
    /// neither a sink nor an exchange, a forward exchange between different
    /// parallelisms); [`JobError::Storage`] / [`JobError::Restore`] when the
    /// checkpoint folder cannot be used.
    pub fn start(mut self) -> Result<JobHandle, JobError> {
        self.config.validate().map_err(JobError::Config)?;
        let names = self.task_names();
        self.failures
            .resolve_names(&names)
            .map_err(JobError::Config)?;
        let graph = {
            let mut g = self.g.borrow_mut();
            if let Some(e) = g.errors.first() {
                return Err(JobError::Config(e.clone()));
            }
            let mut nodes = Vec::new();
            for n in g.nodes.drain(..) {
                let Some(make) = n.make else {
                    return Err(JobError::Config(format!(
                        "the stream of operator '{}' ends in no sink or exchange",
                        n.name
                    )));
                };
                nodes.push(PlanNode {
                    name: n.name,
                    parallelism: n.parallelism,
                    is_source: n.is_source,
                    make,
                });
            }
            let edges = g
                .edges
                .drain(..)
                .map(|e| PlanEdge {
                    from: e.from,
                    to: e.to,
                    wire: e.wire,
                })
                .collect();
            let mut plan = JobGraph::new(nodes, edges);
            plan.operator_names = g.operator_names.clone();
            plan.on_restore = std::mem::take(&mut g.on_restore);
            plan
        };
        let events = self.g.borrow_mut().checkpoint_events.take();
        crate::job::prepare_and_start(crate::job::JobSpec {
            name: self.name,
            app_config: self.app_config,
            graph,
            config: self.config,
            failures: self.failures,
            restored: self.restore,
            storage: self.storage,
            events,
        })
    }
}

impl<A: Data, B: Data> Stream<Either<A, B>> {
    /// The main (`Left`) and side (`Right`) records of this stream as two
    /// streams, in the same task (see [`crate::Context::emit_side`]): a
    /// [`Stream::split`] whose branches keep one side each. Both must end
    /// in a sink or an exchange.
    pub fn split_either(self) -> (Stream<A>, Stream<B>) {
        let (main, side) = self.split();
        let main = main.flat_map(|e| match e {
            Either::Left(a) => Some(a),
            Either::Right(_) => None,
        });
        let side = side.flat_map(|e| match e {
            Either::Left(_) => None,
            Either::Right(b) => Some(b),
        });
        (main, side)
    }
}

impl<T: Data> Stream<T> {
    /// The parallelism of the chain's task.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Chains `op` after this stream, made per subtask by `factory(&info)`
    /// (told its [`SubtaskInfo`]; again after each restart).
    pub fn process<O, Op, F>(self, name: &str, factory: F) -> Stream<O>
    where
        O: Data,
        Op: Operator<T, O> + 'static,
        F: Fn(&SubtaskInfo) -> Op + Send + Sync + 'static,
    {
        self.g.borrow_mut().claim_name(name);
        self.chain_op(name.to_string(), factory)
    }

    fn chain_op<O, Op, F>(self, name: String, factory: F) -> Stream<O>
    where
        O: Data,
        Op: Operator<T, O> + 'static,
        F: Fn(&SubtaskInfo) -> Op + Send + Sync + 'static,
    {
        let prev = self.chain;
        let chain: ChainFn<O> = Arc::new(move |ctx, tail| {
            let stage = Stage::new(name.clone(), factory(&ctx.info(&name)), tail);
            prev(ctx, Box::new(stage))
        });
        Stream {
            g: self.g,
            node: self.node,
            parallelism: self.parallelism,
            chain,
            parent: self.parent,
        }
    }

    /// Chains a stateless batch function: `f(input, out)` appends outputs.
    pub fn map_batch<O, F>(self, f: F) -> Stream<O>
    where
        O: Data,
        F: Fn(&mut Vec<T>, &mut Vec<O>) + Send + Sync + 'static,
    {
        let name = self.g.borrow_mut().anon_name(self.node, "map_batch");
        let f = Arc::new(f);
        self.chain_op(name, move |_| {
            let f = f.clone();
            FnOperator(move |i: &mut Vec<T>, o: &mut Vec<O>| f(i, o))
        })
    }

    /// Chains a stateless function that changes each record in place: no
    /// copy of the batch (a `map` to the same type moves every record into
    /// a new batch). The cheapest per-record transform of a chain.
    pub fn map_in_place<F>(self, f: F) -> Stream<T>
    where
        F: Fn(&mut T) + Send + Sync + 'static,
    {
        // The changed batch is swapped into the output, not copied.
        self.map_batch(move |i: &mut Vec<T>, o: &mut Vec<T>| {
            i.iter_mut().for_each(&f);
            std::mem::swap(i, o);
        })
    }

    /// Chains a stateless record function.
    pub fn map<O, F>(self, f: F) -> Stream<O>
    where
        O: Data,
        F: Fn(T) -> O + Send + Sync + 'static,
    {
        self.map_batch(move |i, o| o.extend(i.drain(..).map(&f)))
    }

    /// Chains a filter: keeps the records for which `f` is true.
    pub fn filter<F>(self, f: F) -> Stream<T>
    where
        F: Fn(&T) -> bool + Send + Sync + 'static,
    {
        self.map_batch(move |i, o| o.extend(i.drain(..).filter(|r| f(r))))
    }

    /// Chains a function from one record to any number of records.
    pub fn flat_map<O, I, F>(self, f: F) -> Stream<O>
    where
        O: Data,
        I: IntoIterator<Item = O>,
        F: Fn(T) -> I + Send + Sync + 'static,
    {
        self.map_batch(move |i, o| {
            for r in i.drain(..) {
                o.extend(f(r));
            }
        })
    }

    /// Ends the chain in a sink (chained, same parallelism).
    pub fn sink<S, F>(self, name: &str, factory: F)
    where
        S: Sink<T> + 'static,
        F: Fn(&SubtaskInfo) -> S + Send + Sync + 'static,
    {
        let s: Stream<()> = self.process(name, move |i: &SubtaskInfo| SinkOperator(factory(i)));
        s.finish_with(Arc::new(|_| Box::new(NoOutput)));
    }

    /// Ends the chain in a callback called for every record, on the task
    /// thread (keep it short: it is on the record path).
    ///
    /// Not a two-phase-commit sink: after an in-process restart the
    /// callback sees again the records the restored checkpoint had not
    /// covered (at-least-once output, even in exactly-once mode). Emit from
    /// checkpointed state, or use a [`crate::TwoPhaseCommitSink`], for
    /// exactly-once output.
    pub fn for_each<F>(self, f: F)
    where
        F: Fn(T) + Send + Sync + 'static,
    {
        let name = self.g.borrow_mut().anon_name(self.node, "for_each");
        let f = Arc::new(f);
        let s: Stream<()> = self.chain_op(name, move |_| {
            let f = f.clone();
            SinkOperator(crate::operator::sinks::FnSink(move |r: T| f(r)))
        });
        s.finish_with(Arc::new(|_| Box::new(NoOutput)));
    }

    /// Ends the chain in the application's hands: every record is sent to
    /// the returned [`Output`] (unbounded: the application must keep
    /// reading).
    ///
    /// Like [`Stream::for_each`], this is not a two-phase-commit sink:
    /// after an in-process restart the records the restored checkpoint had
    /// not yet covered are sent again (at-least-once output); emit from
    /// checkpointed state at the end of the input, or use a
    /// [`crate::TwoPhaseCommitSink`], for exactly-once output.
    pub fn collect(self) -> Output<T> {
        let (tx, out) = crate::transport::handoff::output_channel();
        self.for_each(move |r| {
            let _ = tx.send(r);
        });
        out
    }

    /// Ends the chain in the application's hands, exactly once: the
    /// records a sink subtask takes between two checkpoint barriers are
    /// kept in the checkpoint (pre-committed) and handed over, as one
    /// [`Committed`](crate::Committed) batch naming the checkpoint, once
    /// that checkpoint completes; a restart hands over nothing twice. A
    /// record waits for it: on average half the checkpoint interval, plus
    /// a checkpoint's end-to-end time. `after`: the newest checkpoint whose
    /// batches the application already has, from an earlier process whose
    /// checkpoint this job restores (`None` for a fresh job): older
    /// batches are not handed over again. Unbounded, as
    /// [`Stream::collect`]: the application must keep reading. Without
    /// checkpointing, everything comes at the end of the input, as
    /// checkpoint `CheckpointId(u64::MAX)`.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointConfig, JobBuilder, JobConfig};
    /// use std::time::Duration;
    ///
    /// let mut config = JobConfig::default();
    /// config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(5), None);
    /// let job = JobBuilder::new("committed", config);
    /// let (stream, ingest) = job.ingest::<u64>("in", 64);
    /// let out = stream.map(|x| x * 2).collect_committed(None);
    /// let handle = job.start().unwrap();
    /// for x in 0..1000 {
    ///     ingest.push(x).unwrap();
    /// }
    /// drop(ingest); // the end of the input: a final checkpoint commits the rest
    /// handle.wait().unwrap();
    /// let mut got: Vec<u64> = out.iter().flat_map(|batch| batch.records).collect();
    /// got.sort_unstable();
    /// assert_eq!(got, (0..1000).map(|x| x * 2).collect::<Vec<_>>());
    /// ```
    pub fn collect_committed(
        self,
        after: Option<crate::CheckpointId>,
    ) -> Output<crate::Committed<T>> {
        let (tx, out) = crate::transport::handoff::output_channel();
        self.for_each_committed(after, move |batch| {
            let _ = tx.send(batch);
        });
        out
    }

    /// As [`Stream::collect_committed`], calling `f` with each committed
    /// batch, on the sink task's thread when its checkpoint's completion
    /// reaches it (keep it short: records wait meanwhile).
    pub fn for_each_committed<F>(self, after: Option<crate::CheckpointId>, f: F)
    where
        F: Fn(crate::Committed<T>) + Send + Sync + 'static,
    {
        // Named by its place in the graph: its state (the pending batches)
        // restores into the same operator of the same program.
        let name = {
            let mut g = self.g.borrow_mut();
            let name = g.anon_name(self.node, "committed");
            g.claim_name(&name);
            name
        };
        let deliver: Arc<dyn Fn(crate::Committed<T>) + Send + Sync> = Arc::new(f);
        let delivered = crate::operator::committed::Delivered::new(after);
        let s: Stream<()> = self.chain_op(name, move |info| {
            SinkOperator(crate::TwoPhaseCommitSink::new(
                crate::operator::committed::CommittedOutput {
                    subtask: info.index,
                    delivered: delivered.clone(),
                    deliver: deliver.clone(),
                },
            ))
        });
        s.finish_with(Arc::new(|_| Box::new(NoOutput)));
    }

    fn finish_with(self, tail: TailFn<T>) {
        let chain = self.chain;
        let make: MakeFn = Arc::new(move |ctx| {
            let t = tail(ctx);
            chain(ctx, t)
        });
        register(&self.g, self.parent, make);
    }

    /// Feeds this stream to two chains: every record goes to both, in the
    /// same task (a `Tee`, no channel), and each branch goes on like any
    /// stream (more operators, an exchange, a sink). Barriers, watermarks
    /// and the end of input reach both branches; both must end in a sink
    /// or an exchange. Records are cloned for the first branch.
    pub fn split(self) -> (Stream<T>, Stream<T>) {
        type Slots<T> = Arc<std::sync::Mutex<[Option<Box<dyn Link<T>>>; 2]>>;
        let slots: Slots<T> = Arc::new(std::sync::Mutex::new([None, None]));
        let chain = self.chain;
        let s2 = slots.clone();
        let combine: CombineFn = Box::new(move |m0: MakeFn, m1: MakeFn| -> MakeFn {
            Arc::new(move |ctx| {
                // Each branch's constructor leaves its chain in its slot.
                let _ = m0(ctx);
                let _ = m1(ctx);
                let (a, b) = {
                    let mut s = s2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    (s[0].take(), s[1].take())
                };
                let tee = crate::runtime::chain::Tee {
                    a: a.expect("the first branch built its chain"),
                    b: b.expect("the second branch built its chain"),
                };
                chain(ctx, Box::new(tee))
            })
        });
        let join = Rc::new(RefCell::new(SplitJoin {
            makes: [None, None],
            combine: Some(combine),
            parent: self.parent,
        }));
        let branch = |i: usize| {
            let slots = slots.clone();
            let chain: ChainFn<T> = Arc::new(move |_ctx, tail| {
                slots
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(tail);
                Box::new(BranchBuilt)
            });
            Stream {
                g: self.g.clone(),
                node: self.node,
                parallelism: self.parallelism,
                chain,
                parent: Parent::Branch(join.clone(), i),
            }
        };
        (branch(0), branch(1))
    }

    fn exchange(self, p: Partitioning<T>) -> Exchange<T> {
        Exchange {
            g: self.g.clone(),
            inputs: vec![(self, p)],
        }
    }

    /// Hash-partitions by `key` (`workloads.md`'s routing, see
    /// [`crate::keys::key_to_subtask`]): every record of a key goes to the same
    /// subtask of the next operator. The key is a `u64`; for a string or
    /// another hashable key use [`crate::keys::hash_key`] (stable across runs,
    /// so restored keyed state meets its keys again).
    pub fn key_by<F>(self, key: F) -> Exchange<T>
    where
        F: Fn(&T) -> u64 + Send + Sync + 'static,
    {
        self.exchange(Partitioning::of(Route::Hash(Arc::new(key))))
    }

    /// Round-robin over the next operator's subtasks.
    pub fn rebalance(self) -> Exchange<T> {
        self.exchange(Partitioning::of(Route::<NoKey>::Rebalance))
    }

    /// Every record to every subtask of the next operator.
    pub fn broadcast(self) -> Exchange<T> {
        self.exchange(Partitioning::of(Route::<NoKey>::Broadcast))
    }

    /// Subtask i to subtask i; needs equal parallelism, and then chains.
    pub fn forward(self) -> Exchange<T> {
        self.exchange(Partitioning::of(Route::<NoKey>::Forward))
    }

    /// Joins this stream with `other` for a two-input operator.
    pub fn connect<B: Data>(self, other: Stream<B>) -> Connected<T, B> {
        Connected { a: self, b: other }
    }
}

impl<T: Data> Exchange<T> {
    /// Merges another exchange's inputs into this one (Flink's `union`):
    /// the next operator reads all of them through one input gate.
    pub fn union(mut self, other: Exchange<T>) -> Exchange<T> {
        self.inputs.extend(other.inputs);
        self
    }

    /// Drops the inputs built by another [`JobBuilder`], recording the
    /// mistake as a configuration error of this job (their node numbers
    /// mean nothing in this graph).
    fn keep_own_inputs(&mut self) {
        let g = self.g.clone();
        self.inputs.retain(|(s, _)| {
            let own = Rc::ptr_eq(&s.g, &g);
            if !own {
                g.borrow_mut().errors.push(
                    "a stream built by another JobBuilder is used in this job (streams, \
                     exchanges and connections must all come from one builder)"
                        .to_string(),
                );
            }
            own
        });
    }

    /// Starts a new task, `name`, of `parallelism` subtasks, that reads
    /// this exchange's inputs through one input gate (and its barrier
    /// handler). Every operation on the returned [`Stream`] chains into
    /// that task, until the next exchange. This is the one way to start a
    /// task after an exchange (as timely makes the partitioning a value
    /// given to one operator signature).
    ///
    /// A forward exchange from one stream of the same parallelism starts no
    /// task: the stream is returned as it is and what follows chains into
    /// its task (as Flink chains operators joined by `forward`); `name` is
    /// then not used. Task names are unique in a job: a second use is
    /// reported by [`JobBuilder::start`].
    ///
    /// # Examples
    /// ```
    /// use lockgate::{JobBuilder, JobConfig};
    /// let job = JobBuilder::new("doubled", JobConfig::default());
    /// let (numbers, ingest) = job.ingest::<u64>("numbers", 16);
    /// let out = numbers
    ///     .rebalance()
    ///     .task("double", 2) // a task of 2 subtasks reading the exchange
    ///     .map(|x| x * 2) // chained into it
    ///     .collect();
    /// let handle = job.start().unwrap();
    /// for x in 1..=3 {
    ///     ingest.push(x).unwrap();
    /// }
    /// ingest.close();
    /// handle.wait().unwrap();
    /// let mut got: Vec<u64> = out.try_iter().collect();
    /// got.sort();
    /// assert_eq!(got, [2, 4, 6]);
    /// ```
    pub fn task(mut self, name: &str, parallelism: usize) -> Stream<T> {
        self.keep_own_inputs();
        // Forward with equal parallelism chains (as Flink does).
        if self.inputs.len() == 1
            && self.inputs[0].1.forward
            && self.inputs[0].0.parallelism == parallelism
        {
            let (s, _) = self.inputs.into_iter().next().expect("one input");
            return s;
        }
        let g = self.g.clone();
        let node = g.borrow_mut().add_node(name, parallelism, false);
        let mut edge_ids = Vec::new();
        for (stream, part) in self.inputs {
            if part.forward && stream.parallelism != parallelism {
                let from = g.borrow().nodes[stream.node].name.clone();
                g.borrow_mut().errors.push(format!(
                    "forward from '{from}' (parallelism {}) to '{name}' (parallelism {parallelism}) needs equal parallelism",
                    stream.parallelism
                ));
            }
            let edge = {
                let mut gm = g.borrow_mut();
                gm.edges.push(EdgeSpec {
                    from: stream.node,
                    to: node,
                    wire: Arc::new(wire_edge::<T>),
                });
                gm.edges.len() - 1
            };
            edge_ids.push(edge);
            let tail: TailFn<T> = Arc::new(move |ctx| {
                let senders = ctx.wiring.edge::<T>(edge).senders[ctx.subtask]
                    .take()
                    .expect("each producer subtask takes its senders once");
                let config = OutputConfig {
                    batch_size: ctx.config.batch_size,
                    buffer_timeout_ns: ctx.config.buffer_timeout.as_nanos() as u64,
                    max_parallelism: ctx.config.max_parallelism,
                    cooperative: ctx.config.workers.is_some(),
                };
                (part.make)(senders, ctx.subtask, config, ctx)
            });
            stream.finish_with(tail);
        }
        let chain: ChainFn<T> = Arc::new(move |ctx, tail| {
            let mut receivers = Vec::new();
            let mut returns = Vec::new();
            let mut lanes = Vec::new();
            let mut names = Vec::new();
            for &e in &edge_ids {
                let ends = ctx.wiring.edge::<T>(e);
                let rs = ends.receivers[ctx.subtask]
                    .take()
                    .expect("each consumer subtask takes its receivers once");
                returns.extend(ends.returns[ctx.subtask].take().into_iter().flatten());
                lanes.extend(ends.lanes[ctx.subtask].take().into_iter().flatten());
                names.extend(ends.producer_names.iter().cloned());
                receivers.extend(rs);
            }
            let handler = AnyHandler::new(
                ctx.config.checkpoint.mode,
                receivers.len(),
                ctx.config.handler,
                ctx.config.checkpoint.unaligned_after_ns(),
            );
            let gate = InputGate::new(
                receivers,
                names,
                handler,
                ctx.config.wait_strategy,
                ctx.control.clone(),
                ctx.cancel.clone(),
                ctx.metrics.clone(),
            )
            .with_returns(returns);
            let mut tail = tail;
            let gate = if ctx.config.workers.is_some() {
                gate.cooperative()
            } else {
                gate
            };
            let gate = if ctx.config.checkpoint.uses_priority_lanes() {
                let gate = gate.with_lanes(lanes);
                tail.set_interrupt(&crate::transport::channel::Interrupt {
                    control: None,
                    priority: gate.priority_receivers(),
                });
                gate
            } else {
                gate
            };
            let channels = gate.num_channels();
            Box::new(GateTask {
                gate,
                chain: tail,
                metrics: ctx.metrics.clone(),
                watermarks: crate::barrier::watermark::WatermarkMerger::new(channels),
                held: None,
                run: Default::default(),
            })
        });
        Stream {
            g,
            node,
            parallelism,
            chain,
            parent: Parent::Node(node),
        }
    }
}

impl<A: Data, B: Data> Connected<A, B> {
    /// Partitions both inputs by their keys and feeds them to a keyed
    /// two-input operator (Flink's `connect(..).keyBy(..).process(..)`): the
    /// operator sees [`Either::Left`] records from this stream and
    /// [`Either::Right`] records from the other, a key's records of both
    /// sides at the same subtask.
    pub fn key_by<KA, KB>(self, key_a: KA, key_b: KB) -> Exchange<Either<A, B>>
    where
        KA: Fn(&A) -> u64 + Send + Sync + 'static,
        KB: Fn(&B) -> u64 + Send + Sync + 'static,
    {
        let key = move |e: &Either<A, B>| match e {
            Either::Left(a) => key_a(a),
            Either::Right(b) => key_b(b),
        };
        // One concrete function behind an `Arc`, so both sides' writers
        // inline it.
        let key = Arc::new(key);
        let k2 = key.clone();
        let left = self.a.map(Either::Left).key_by(move |e| key(e));
        let right = self.b.map(Either::Right).key_by(move |e| k2(e));
        left.union(right)
    }
}
