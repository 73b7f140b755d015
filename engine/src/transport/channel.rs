//! Channels and the output side of a task: partitioning, batching, flushing
//! and backpressure.
//!
//! One bounded crossbeam channel joins each (producer subtask, consumer
//! subtask) pair of an edge. `ChannelWriter` is the tail of a task's
//! operator chain: it routes each record to a channel by the edge's
//! [`Route`], collects records into per-channel batches, and sends a
//! batch when it is full, when the task's input runs dry (natural batching:
//! small batches at low load, full ones at high load), or when its oldest
//! record waited longer than the buffer timeout.
//!
//! A send to a full channel blocks (backpressure) until the consumer makes
//! room or the job is cancelled; the time spent blocked is counted in the
//! task's metrics. On a cooperative worker ([`OutputConfig::cooperative`])
//! a send never blocks: what does not fit waits in the writer, in order,
//! and the task takes no input until [`ChannelWriter::drain`] sent it.
//!
//! **Batch recycling**: each channel has a *return lane* the other way, on
//! which the consumer sends back the emptied vector of every records batch
//! its chain has taken in ([`BatchReturn`]); the writer takes its next
//! batch buffer from there and allocates only when the lane is empty. So a
//! running job circulates a fixed set of batch buffers instead of
//! allocating one per batch in the producer and freeing it in the consumer
//! (a cross-thread free, and fresh pages whenever alignment holds batches
//! back; the hot-path issue's "batches recycled instead of allocated").
//!
//! **Unaligned mode** ([`crate::CheckpointMode::Unaligned`]): each channel
//! has two more lanes ([`ProducerLanes`], [`ConsumerLanes`]). A *priority
//! lane* carries checkpoint barriers only, read by the input gate before
//! the data lane, so a barrier overtakes the records queued before it (the
//! in-band copy still follows them in the data lane and marks where the
//! channel state ends). *Credits* bound what is in flight (credit-based
//! flow control, as Flink's): a producer takes one credit per records
//! batch, watermark or idle marker before it sends, and the consumer
//! returns it when it hands the element to its operator, not when it reads
//! it. The consumer may then read its data lane ahead to persist channel
//! state without letting the producer send more: a channel holds at most
//! `capacity` credited elements, queued or read ahead, whatever happens
//! across checkpoints. Barriers, cancel markers and ends of partition take
//! no credit (a task must be able to send its in-band barrier while its
//! consumer is slow); the data lane has [`EVENT_SLACK`] elements of room
//! for them beyond the credits.

use crate::types::element::{CheckpointBarrier, CheckpointId, StreamElement, Watermark};
use crate::types::error::TaskError;
use crate::types::key_groups::KeyGroupRouter;
use crate::types::metrics::TaskMetrics;
use crossbeam_channel::{Receiver, Select, Sender, TrySendError};
use std::sync::Arc;

/// A record's partitioning key, called once per record by a hash
/// exchange's writer. The writer is generic over it, so the key function
/// is inlined into the routing loop (a `dyn Fn` call per record cost about
/// 5 instructions and kept the key's load out of the loop; the hot-path
/// issue allows a dynamic call per batch, not per record).
pub(crate) trait KeyOf<T>: Send + 'static {
    /// The `u64` key of `record` (the stream's `key_by` function).
    fn key_of(&self, record: &T) -> u64;
}

impl<T, F: Fn(&T) -> u64 + Send + Sync + 'static> KeyOf<T> for Arc<F> {
    #[inline(always)]
    fn key_of(&self, record: &T) -> u64 {
        (**self)(record)
    }
}

/// The key type of a writer that does not route by key (no value exists).
#[derive(Clone, Copy, Debug)]
pub(crate) enum NoKey {}

impl<T> KeyOf<T> for NoKey {
    fn key_of(&self, _record: &T) -> u64 {
        match *self {}
    }
}

/// How an edge distributes records over the consumer's subtasks.
#[derive(Clone, Debug)]
pub(crate) enum Route<K> {
    /// Producer subtask i sends to consumer subtask i (equal parallelism;
    /// with equal parallelism and no other reason for a channel, the two
    /// operators are chained instead).
    Forward,
    /// Round-robin over the consumer subtasks, batch by batch.
    Rebalance,
    /// Every record to every consumer subtask.
    Broadcast,
    /// By key: the key group of the key `K` returns, then the group's
    /// subtask ([`crate::keys::key_to_subtask`]'s rule, with the job's
    /// `max_parallelism`), through the writer's [`KeyGroupRouter`].
    Hash(K),
}

/// A writer's route with what it needs at run time: the hash exchange's
/// key group → channel table, built once the channel count is known.
enum RouteRt<K> {
    Forward,
    Rebalance,
    Broadcast,
    Hash(K, Arc<KeyGroupRouter>),
}

/// Output settings of a task (shared by all its output channels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutputConfig {
    /// Records per batch at most.
    pub batch_size: usize,
    /// A partial batch is sent at the latest this long after its first
    /// record was added, in ns (even if the input never runs dry).
    pub buffer_timeout_ns: u64,
    /// The job's number of key groups (hash partitioning routes by them).
    pub max_parallelism: u32,
    /// The task runs on a cooperative worker ([`crate::JobConfig::workers`]):
    /// a send never blocks, what does not fit waits in the writer (see
    /// [`ChannelWriter::output_blocked`]).
    pub cooperative: bool,
}

/// Sends elements to one channel, blocking on a full channel until there is
/// room or the job is cancelled.
pub(crate) struct ChannelSender<T> {
    pub(crate) tx: Sender<StreamElement<T>>,
    pub(crate) consumer: Arc<str>,
    /// The return lane's end: emptied batch buffers from the consumer.
    pub(crate) spares: Receiver<Vec<T>>,
    /// The priority lane and credits (unaligned mode only).
    pub(crate) lanes: Option<ProducerLanes>,
}

/// Capacity of a priority lane, in barriers: 4. At most one unaligned
/// checkpoint is in flight (rule 11 of the unaligned handler), so a lane
/// holds one barrier unless the consumer is slow to read its priority
/// lanes while checkpoints are subsumed; a barrier that finds its lane
/// full is dropped there (`try_send`), which is safe: its in-band copy
/// follows in the data lane and triggers or ends the channel's state as
/// well, only later.
pub(crate) const PRIORITY_LANE_CAPACITY: usize = 4;

/// Room in a data lane beyond its credits, in elements: 8, for the
/// uncredited events (per checkpoint one in-band barrier and perhaps a
/// cancel marker, and one end of partition per channel), so that their
/// sends do not wait for the consumer to process records. Past it a send
/// blocks as in the aligned modes.
pub(crate) const EVENT_SLACK: usize = 8;

/// A consumer's end of a channel's return lane (see the module docs):
/// [`BatchReturn::give_back`] sends an emptied batch buffer to the
/// channel's producer.
pub(crate) struct BatchReturn<T> {
    tx: Sender<Vec<T>>,
}

impl<T> BatchReturn<T> {
    /// Empties `batch` and hands it to the producer for a later batch;
    /// drops it instead when it has no allocation, or when the lane is full
    /// or its producer gone. Never blocks.
    #[inline]
    pub(crate) fn give_back(&self, mut batch: Vec<T>) {
        if batch.capacity() == 0 {
            return;
        }
        batch.clear();
        let _ = self.tx.try_send(batch);
    }
}

/// Room in a return lane, in batch buffers, per element of channel
/// capacity: 2. A channel holds at most `capacity` batches, and a blocked
/// channel's blocker ([`crate::barrier::HandlerConfig::blocker_capacity_bytes`],
/// 1 MiB by default: about 43 batches of 1,024 24-byte records) about as
/// many again: when an alignment ends and both are handed on, their
/// buffers find room here instead of being freed. Idle buffers per
/// channel: at most `2 × capacity` batches' worth.
const RETURN_LANE_FACTOR: usize = 2;

/// A batch buffer of room for `batch_size` records: an emptied one from
/// the return lane when it is there and of a fitting size (at least
/// `batch_size`, at most four times it: a larger one, e.g. from a
/// flat_map's output, would hold memory idle), else a new one.
#[inline]
fn next_buffer<T>(spares: &Receiver<Vec<T>>, batch_size: usize) -> Vec<T> {
    while let Ok(v) = spares.try_recv() {
        if v.capacity() >= batch_size && v.capacity() <= batch_size.saturating_mul(4) {
            debug_assert!(v.is_empty(), "a returned batch buffer is empty");
            return v;
        }
    }
    Vec::with_capacity(batch_size)
}

/// A producer's ends of a channel's unaligned-mode lanes.
pub(crate) struct ProducerLanes {
    pub(crate) priority: Sender<CheckpointBarrier>,
    pub(crate) credits: Receiver<()>,
    /// Batches sent on overdraft (see [`Credit`]) not yet paid back: each
    /// credit received pays one before any other send takes one.
    pub(crate) debt: std::cell::Cell<usize>,
}

/// A consumer's ends of a channel's unaligned-mode lanes.
pub(crate) struct ConsumerLanes {
    pub(crate) priority: Receiver<CheckpointBarrier>,
    pub(crate) credits: Sender<()>,
}

/// How a send takes its credit in unaligned mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credit {
    /// Wait for a credit (backpressure); while waiting, the writer's
    /// [`Interrupt`] may turn the rest of the push into overdraft.
    Take,
    /// Send at once without a credit while the channel owes fewer than
    /// [`OVERDRAFT_LIMIT`] batches (else wait as `Take`), the debt paid
    /// from the next credits: a bounded overdraft (as Flink's FLIP-227
    /// lets a task finish the output of its current input) so that a
    /// task's in-band barrier, and the partial batches before it, never
    /// wait behind a slow consumer.
    Overdraft,
}

/// The most batches a channel may owe: 2, one for the partial batch
/// flushed before an in-band barrier and one for the rest of an
/// interrupted push. In flight per channel: at most `capacity` credited
/// elements plus this many batches.
pub(crate) const OVERDRAFT_LIMIT: usize = 2;

/// What ends a producer's wait for a credit early (unaligned mode): a
/// pending trigger (a source's control channel) or a barrier on one of the
/// task's input priority lanes. The rest of the push then goes on overdraft,
/// so the task reaches its next batch boundary, where it takes its snapshot
/// and emits its in-band barrier, without waiting for its consumer.
#[derive(Clone, Default)]
pub(crate) struct Interrupt {
    pub(crate) control: Option<Receiver<crate::types::control::Control>>,
    pub(crate) priority: Vec<Receiver<CheckpointBarrier>>,
}

/// True for the elements that take a credit in unaligned mode: records
/// batches, watermarks and idle markers (what can be channel state).
#[inline]
pub(crate) fn takes_credit<T>(el: &StreamElement<T>) -> bool {
    matches!(
        el,
        StreamElement::Records(_) | StreamElement::Watermark(_) | StreamElement::Idle(_)
    )
}

/// One channel of `capacity` elements: the producer's and the consumer's
/// ends with the return lane's consumer end ([`BatchReturn`]), and the
/// unaligned-mode lanes when `unaligned` (the data lane then has
/// [`EVENT_SLACK`] more room and `capacity` credits are issued).
pub(crate) fn channel<T>(
    capacity: usize,
    unaligned: bool,
    consumer: Arc<str>,
) -> (
    ChannelSender<T>,
    Receiver<StreamElement<T>>,
    BatchReturn<T>,
    Option<ConsumerLanes>,
) {
    let (rtx, rrx) = crossbeam_channel::bounded(capacity.saturating_mul(RETURN_LANE_FACTOR));
    let returns = BatchReturn { tx: rtx };
    if !unaligned {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        let sender = ChannelSender {
            tx,
            consumer,
            spares: rrx,
            lanes: None,
        };
        return (sender, rx, returns, None);
    }
    let (tx, rx) = crossbeam_channel::bounded(capacity + OVERDRAFT_LIMIT + EVENT_SLACK);
    let (ptx, prx) = crossbeam_channel::bounded(PRIORITY_LANE_CAPACITY);
    // Room for the credits of overdraft batches too: they come back before
    // the producer takes them to pay its debt.
    let (ctx, crx) = crossbeam_channel::bounded(capacity + OVERDRAFT_LIMIT);
    for _ in 0..capacity {
        ctx.try_send(()).expect("room for every credit");
    }
    let sender = ChannelSender {
        tx,
        consumer,
        spares: rrx,
        lanes: Some(ProducerLanes {
            priority: ptx,
            credits: crx,
            debt: std::cell::Cell::new(0),
        }),
    };
    let lanes = ConsumerLanes {
        priority: prx,
        credits: ctx,
    };
    (sender, rx, returns, Some(lanes))
}

/// Takes the credit of a send (see [`Credit`]), blocking (backpressure)
/// until the consumer returns one. Returns true when `interrupt` fired
/// during the wait and the send went on overdraft instead: the caller sends
/// the rest of its push on overdraft too.
fn take_credit(
    lanes: &ProducerLanes,
    credit: Credit,
    interrupt: Option<&Interrupt>,
    consumer: &Arc<str>,
    cancel: &Receiver<()>,
    metrics: &TaskMetrics,
) -> Result<bool, TaskError> {
    let can_overdraw = || lanes.debt.get() < OVERDRAFT_LIMIT;
    if credit == Credit::Overdraft && can_overdraw() {
        lanes.debt.set(lanes.debt.get() + 1);
        return Ok(false);
    }
    let mut interrupt = interrupt;
    loop {
        match receive_credit(lanes, interrupt, consumer, cancel, metrics)? {
            true if lanes.debt.get() > 0 => lanes.debt.set(lanes.debt.get() - 1),
            true => return Ok(false),
            false if can_overdraw() => {
                lanes.debt.set(lanes.debt.get() + 1);
                return Ok(true);
            }
            // At the limit: wait for the credit, deaf to the interrupt
            // (it stays ready until the task reads it).
            false => interrupt = None,
        }
    }
}

/// Takes the credit of a send without waiting (a cooperative worker's
/// writer): the rules of [`take_credit`], false when the send must wait.
fn try_take_credit(
    lanes: &ProducerLanes,
    credit: Credit,
    consumer: &Arc<str>,
) -> Result<bool, TaskError> {
    if credit == Credit::Overdraft && lanes.debt.get() < OVERDRAFT_LIMIT {
        lanes.debt.set(lanes.debt.get() + 1);
        return Ok(true);
    }
    loop {
        match lanes.credits.try_recv() {
            Ok(()) if lanes.debt.get() > 0 => lanes.debt.set(lanes.debt.get() - 1),
            Ok(()) => return Ok(true),
            Err(crossbeam_channel::TryRecvError::Empty) => return Ok(false),
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                return Err(TaskError::Disconnected(consumer.to_string()))
            }
        }
    }
}

/// An element a cooperative writer could not send yet, in send order.
struct Unsent<T> {
    el: StreamElement<T>,
    /// The credit it still has to take (unaligned mode); `None` once it
    /// has one or needs none.
    credit: Option<Credit>,
}

/// Receives one credit (true), blocking until the consumer returns one, or
/// until `interrupt` is ready (false).
fn receive_credit(
    lanes: &ProducerLanes,
    interrupt: Option<&Interrupt>,
    consumer: &Arc<str>,
    cancel: &Receiver<()>,
    metrics: &TaskMetrics,
) -> Result<bool, TaskError> {
    match lanes.credits.try_recv() {
        Ok(()) => return Ok(true),
        Err(crossbeam_channel::TryRecvError::Disconnected) => {
            return Err(TaskError::Disconnected(consumer.to_string()))
        }
        Err(crossbeam_channel::TryRecvError::Empty) => {}
    }
    let start = crate::util::clock::now_ns();
    let result = loop {
        let mut sel = Select::new();
        let credit_i = sel.recv(&lanes.credits);
        let cancel_i = sel.recv(cancel);
        if let Some(i) = interrupt {
            if let Some(c) = &i.control {
                sel.recv(c);
            }
            for p in &i.priority {
                sel.recv(p);
            }
        }
        let ready = sel.ready();
        if ready == credit_i {
            match lanes.credits.try_recv() {
                Ok(()) => break Ok(true),
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    break Err(TaskError::Disconnected(consumer.to_string()))
                }
                Err(crossbeam_channel::TryRecvError::Empty) => continue,
            }
        } else if ready == cancel_i {
            if matches!(
                cancel.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            ) {
                break Err(TaskError::Cancelled);
            }
        } else {
            break Ok(false);
        }
    };
    metrics.add_backpressure_ns(crate::util::clock::now_ns() - start);
    result
}

/// Sends `el`, blocking (backpressure) while the channel is full (in
/// unaligned mode: until it has a credit, see [`Credit`]). Returns true when
/// `interrupt` turned the send into an overdraft.
///
/// # Errors
/// [`TaskError::Cancelled`] when the job is cancelled while blocked;
/// [`TaskError::Disconnected`] when the consumer is gone.
pub(crate) fn send_blocking<T>(
    ch: &ChannelSender<T>,
    el: StreamElement<T>,
    credit: Credit,
    interrupt: Option<&Interrupt>,
    cancel: &Receiver<()>,
    metrics: &TaskMetrics,
) -> Result<bool, TaskError> {
    let mut interrupted = false;
    if let Some(lanes) = &ch.lanes {
        if takes_credit(&el) {
            interrupted = take_credit(lanes, credit, interrupt, &ch.consumer, cancel, metrics)?;
        }
    }
    send_on_lane(ch, el, cancel, metrics)?;
    Ok(interrupted)
}

/// Sends `el` on the data lane, blocking while it is full.
fn send_on_lane<T>(
    ch: &ChannelSender<T>,
    el: StreamElement<T>,
    cancel: &Receiver<()>,
    metrics: &TaskMetrics,
) -> Result<(), TaskError> {
    let el = match ch.tx.try_send(el) {
        Ok(()) => return Ok(()),
        Err(TrySendError::Disconnected(_)) => {
            return Err(TaskError::Disconnected(ch.consumer.to_string()))
        }
        Err(TrySendError::Full(el)) => el,
    };
    let start = crate::util::clock::now_ns();
    let mut sel = Select::new();
    let send_i = sel.send(&ch.tx);
    sel.recv(cancel);
    let oper = sel.select();
    let res = if oper.index() == send_i {
        oper.send(&ch.tx, el)
            .map_err(|_| TaskError::Disconnected(ch.consumer.to_string()))
    } else {
        let _ = oper.recv(cancel);
        Err(TaskError::Cancelled)
    };
    metrics.add_backpressure_ns(crate::util::clock::now_ns() - start);
    res
}

/// The tail of an operator chain: partitions records over an edge's
/// channels and batches them (see the module docs). `K` is the hash
/// exchange's key function ([`NoKey`] for the other routes).
pub(crate) struct ChannelWriter<T, K = NoKey> {
    channels: Vec<ChannelSender<T>>,
    buffers: Vec<Vec<T>>,
    route: RouteRt<K>,
    /// This producer's subtask index (for forward partitioning).
    subtask: usize,
    next_rr: usize,
    config: OutputConfig,
    /// When the oldest unsent record was added; `None` when all are sent.
    oldest_ns: Option<u64>,
    cancel: Receiver<()>,
    metrics: Arc<TaskMetrics>,
    /// Unaligned mode: what ends a wait for a credit early.
    interrupt: Option<Interrupt>,
    /// Set when the interrupt fired during this push: its other sends go
    /// on overdraft.
    overdraft_push: bool,
    /// Cooperative mode ([`OutputConfig::cooperative`]): per channel, what
    /// waits for room (or a credit), in order; empty in the other mode.
    unsent: Vec<std::collections::VecDeque<Unsent<T>>>,
    /// The number of non-empty queues of `unsent`.
    blocked_channels: usize,
    /// When `unsent` last became non-empty (ns): the time until it is
    /// empty again is the task's backpressure time.
    blocked_since_ns: u64,
}

impl<T: Clone + Send, K: KeyOf<T> + Clone> ChannelWriter<T, K> {
    /// Unaligned mode: what interrupts this writer's waits for credits.
    pub(crate) fn set_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupt = Some(interrupt);
    }

    pub(crate) fn new(
        channels: Vec<ChannelSender<T>>,
        route: Route<K>,
        subtask: usize,
        config: OutputConfig,
        cancel: Receiver<()>,
        metrics: Arc<TaskMetrics>,
    ) -> Self {
        let n = channels.len();
        let buffers = channels
            .iter()
            .map(|_| Vec::with_capacity(config.batch_size))
            .collect();
        let route = match route {
            Route::Forward => RouteRt::Forward,
            Route::Rebalance => RouteRt::Rebalance,
            Route::Broadcast => RouteRt::Broadcast,
            Route::Hash(key) => RouteRt::Hash(
                key,
                Arc::new(KeyGroupRouter::new(channels.len(), config.max_parallelism)),
            ),
        };
        ChannelWriter {
            channels,
            buffers,
            route,
            subtask,
            next_rr: subtask,
            config,
            oldest_ns: None,
            cancel,
            metrics,
            interrupt: None,
            overdraft_push: false,
            unsent: (0..n).map(|_| std::collections::VecDeque::new()).collect(),
            blocked_channels: 0,
            blocked_since_ns: 0,
        }
    }

    /// Sends `el` on channel `ch`: blocking in the thread-per-task mode,
    /// or at once in cooperative mode, where what cannot go now (a full
    /// channel, no credit, or an earlier element still waiting) waits in
    /// order until [`ChannelWriter::drain`] sends it. Returns true when an
    /// interrupt turned a blocking send into overdraft.
    fn send_el(
        &mut self,
        ch: usize,
        el: StreamElement<T>,
        credit: Credit,
        interrupt: bool,
    ) -> Result<bool, TaskError> {
        if !self.config.cooperative {
            let interrupt = if interrupt {
                self.interrupt.as_ref()
            } else {
                None
            };
            return send_blocking(
                &self.channels[ch],
                el,
                credit,
                interrupt,
                &self.cancel,
                &self.metrics,
            );
        }
        let mut item = Unsent {
            credit: (self.channels[ch].lanes.is_some() && takes_credit(&el)).then_some(credit),
            el,
        };
        if self.unsent[ch].is_empty() {
            match self.try_send_now(ch, item)? {
                None => return Ok(false),
                Some(rest) => {
                    item = rest;
                    if self.blocked_channels == 0 {
                        self.blocked_since_ns = crate::util::clock::now_ns();
                    }
                    self.blocked_channels += 1;
                }
            }
        }
        self.unsent[ch].push_back(item);
        Ok(false)
    }

    /// One attempt to send `item` on channel `ch` without waiting; gives
    /// it back when it must wait.
    fn try_send_now(
        &mut self,
        ch: usize,
        mut item: Unsent<T>,
    ) -> Result<Option<Unsent<T>>, TaskError> {
        let chan = &self.channels[ch];
        if let (Some(credit), Some(lanes)) = (item.credit, &chan.lanes) {
            if !try_take_credit(lanes, credit, &chan.consumer)? {
                return Ok(Some(item));
            }
            item.credit = None;
        }
        match chan.tx.try_send(item.el) {
            Ok(()) => Ok(None),
            Err(TrySendError::Full(el)) => {
                item.el = el;
                Ok(Some(item))
            }
            Err(TrySendError::Disconnected(_)) => {
                Err(TaskError::Disconnected(chan.consumer.to_string()))
            }
        }
    }

    /// Cooperative mode: true while some output waits to be sent; the task
    /// then takes no input (its operator finished the batch that produced
    /// it, so this is a batch boundary). Always false in the other mode.
    #[inline]
    pub(crate) fn output_blocked(&self) -> bool {
        self.blocked_channels > 0
    }

    /// Cooperative mode: sends what waits, as far as the channels take it.
    /// Returns true when nothing waits any more.
    ///
    /// # Errors
    /// [`TaskError::Disconnected`] when a consumer is gone.
    pub(crate) fn drain(&mut self) -> Result<bool, TaskError> {
        if self.blocked_channels == 0 {
            return Ok(true);
        }
        for ch in 0..self.unsent.len() {
            while let Some(item) = self.unsent[ch].pop_front() {
                if let Some(rest) = self.try_send_now(ch, item)? {
                    self.unsent[ch].push_front(rest);
                    break;
                }
                if self.unsent[ch].is_empty() {
                    self.blocked_channels -= 1;
                }
            }
        }
        if self.blocked_channels > 0 {
            return Ok(false);
        }
        // Backpressure: how long output waited, as a blocking send's.
        self.metrics.add_backpressure_ns(
            crate::util::clock::now_ns().saturating_sub(self.blocked_since_ns),
        );
        Ok(true)
    }

    /// Cooperative mode: registers in `sel` what would let waiting output
    /// move: room in a full channel, or a credit it waits for.
    pub(crate) fn watch<'a>(&'a self, sel: &mut Select<'a>) {
        for (ch, q) in self.unsent.iter().enumerate() {
            let Some(front) = q.front() else { continue };
            match (&self.channels[ch].lanes, front.credit) {
                (Some(lanes), Some(_)) => {
                    sel.recv(&lanes.credits);
                }
                _ => {
                    sel.send(&self.channels[ch].tx);
                }
            }
        }
    }

    fn send_buffer(&mut self, ch: usize) -> Result<(), TaskError> {
        self.send_buffer_with(ch, Credit::Take)
    }

    fn send_buffer_with(&mut self, ch: usize, credit: Credit) -> Result<(), TaskError> {
        if self.buffers[ch].is_empty() {
            return Ok(());
        }
        let next = next_buffer(&self.channels[ch].spares, self.config.batch_size);
        let batch = std::mem::replace(&mut self.buffers[ch], next);
        self.metrics.add_out(batch.len() as u64);
        let credit = if self.overdraft_push {
            Credit::Overdraft
        } else {
            credit
        };
        let interrupted = self.send_el(ch, StreamElement::Records(batch), credit, true)?;
        self.overdraft_push |= interrupted;
        Ok(())
    }

    /// Adds records; sends every batch that fills up.
    pub(crate) fn push(&mut self, records: &mut Vec<T>) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.overdraft_push = false;
        let n = self.channels.len();
        let batch_size = self.config.batch_size;
        match &self.route {
            // One channel, whatever the partitioning: whole runs of records.
            _ if n == 1 => self.push_run(0, records)?,
            RouteRt::Forward => self.push_run(self.subtask % n, records)?,
            RouteRt::Rebalance => {
                // Batch by batch round robin: each run fills one channel's
                // batch, then the next channel takes over.
                while !records.is_empty() {
                    let ch = self.next_rr % n;
                    let room = batch_size - self.buffers[ch].len();
                    let take = room.min(records.len());
                    if take == records.len() {
                        self.push_run(ch, records)?;
                    } else {
                        self.buffers[ch].extend(records.drain(..take));
                        self.send_buffer(ch)?;
                    }
                    if self.buffers[ch].is_empty() {
                        self.next_rr = self.next_rr.wrapping_add(1);
                    }
                }
            }
            RouteRt::Broadcast => {
                for r in records.drain(..) {
                    for ch in 0..n {
                        self.buffers[ch].push(r.clone());
                        if self.buffers[ch].len() >= batch_size {
                            self.send_buffer(ch)?;
                        }
                    }
                }
            }
            RouteRt::Hash(key, router) => {
                // Cloned (once a batch) to free `self` for `send_buffer`.
                let (key, router) = (key.clone(), router.clone());
                for r in records.drain(..) {
                    let ch = router.route(key.key_of(&r));
                    self.buffers[ch].push(r);
                    if self.buffers[ch].len() >= batch_size {
                        self.send_buffer(ch)?;
                    }
                }
            }
        }
        if self.buffers.iter().any(|b| !b.is_empty()) {
            let now = crate::util::clock::now_ns();
            match self.oldest_ns {
                None => self.oldest_ns = Some(now),
                Some(t) if now.saturating_sub(t) >= self.config.buffer_timeout_ns => {
                    self.flush()?;
                }
                Some(_) => {}
            }
        } else {
            self.oldest_ns = None;
        }
        self.overdraft_push = false;
        Ok(())
    }

    /// Appends a run of records to channel `ch`'s batch, sending every batch
    /// that fills. When the batch is empty and the run fits, the run's
    /// vector itself becomes the batch (no copy); `records` is left empty.
    #[inline]
    fn push_run(&mut self, ch: usize, records: &mut Vec<T>) -> Result<(), TaskError> {
        let batch_size = self.config.batch_size;
        if self.buffers[ch].is_empty() && records.len() <= batch_size {
            std::mem::swap(&mut self.buffers[ch], records);
            if self.buffers[ch].len() >= batch_size {
                self.send_buffer(ch)?;
            }
            return Ok(());
        }
        while !records.is_empty() {
            let room = batch_size - self.buffers[ch].len();
            let take = room.min(records.len());
            self.buffers[ch].extend(records.drain(..take));
            if self.buffers[ch].len() >= batch_size {
                self.send_buffer(ch)?;
            }
        }
        Ok(())
    }

    /// Sends every partial batch.
    pub(crate) fn flush(&mut self) -> Result<(), TaskError> {
        for ch in 0..self.channels.len() {
            self.send_buffer(ch)?;
        }
        self.oldest_ns = None;
        Ok(())
    }

    /// Flushes, then sends `el` on every channel (events are broadcast and
    /// keep their place after every record pushed before them).
    pub(crate) fn broadcast_event(&mut self, el: StreamElement<T>) -> Result<(), TaskError> {
        if matches!(el, StreamElement::Barrier(_)) {
            // The partial batches before an in-band barrier go on overdraft
            // in unaligned mode ([`Credit::Overdraft`]); so does what waits
            // in a cooperative writer (the rest of the last batch's output,
            // as an interrupted push).
            for q in &mut self.unsent {
                for item in q.iter_mut() {
                    if item.credit.is_some() {
                        item.credit = Some(Credit::Overdraft);
                    }
                }
            }
            for ch in 0..self.channels.len() {
                self.send_buffer_with(ch, Credit::Overdraft)?;
            }
            self.oldest_ns = None;
        } else {
            self.flush()?;
        }
        for ch in 0..self.channels.len() {
            let copy = match &el {
                StreamElement::Barrier(b) => StreamElement::Barrier(*b),
                StreamElement::CancelCheckpoint(id) => StreamElement::CancelCheckpoint(*id),
                StreamElement::EndOfPartition => StreamElement::EndOfPartition,
                StreamElement::Watermark(w) => StreamElement::Watermark(*w),
                StreamElement::Idle(i) => StreamElement::Idle(*i),
                StreamElement::Records(_) => unreachable!("records are pushed, not broadcast"),
            };
            self.send_el(ch, copy, Credit::Take, false)?;
        }
        Ok(())
    }

    pub(crate) fn barrier(&mut self, b: CheckpointBarrier) -> Result<(), TaskError> {
        self.broadcast_event(StreamElement::Barrier(b))
    }

    /// Unaligned mode: sends `b` on every channel's priority lane, ahead
    /// of everything queued (and of the partial batches, which stay for the
    /// in-band barrier). Never blocks: a full lane drops its copy (see
    /// [`PRIORITY_LANE_CAPACITY`]). Nothing in the other modes.
    pub(crate) fn priority_barrier(&mut self, b: CheckpointBarrier) {
        for ch in &self.channels {
            if let Some(lanes) = &ch.lanes {
                let _ = lanes.priority.try_send(b);
            }
        }
    }

    pub(crate) fn cancel_checkpoint(&mut self, id: CheckpointId) -> Result<(), TaskError> {
        self.broadcast_event(StreamElement::CancelCheckpoint(id))
    }

    pub(crate) fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        self.broadcast_event(StreamElement::Watermark(w))
    }

    pub(crate) fn idle(&mut self, idle: bool) -> Result<(), TaskError> {
        self.broadcast_event(StreamElement::Idle(idle))
    }

    pub(crate) fn end_of_partition(&mut self) -> Result<(), TaskError> {
        self.broadcast_event(StreamElement::EndOfPartition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forward writer over `channel`, with the job's cancel sender (a
    /// writer whose cancel sender is gone counts as cancelled).
    fn writer(channel: ChannelSender<u64>, batch_size: usize) -> (ChannelWriter<u64>, Sender<()>) {
        let (cancel_tx, cancel) = crossbeam_channel::bounded(0);
        let config = OutputConfig {
            batch_size,
            buffer_timeout_ns: u64::MAX,
            max_parallelism: 128,
            cooperative: false,
        };
        let metrics = Arc::new(TaskMetrics::new("test"));
        let w = ChannelWriter::new(vec![channel], Route::Forward, 0, config, cancel, metrics);
        (w, cancel_tx)
    }

    fn records_of(el: StreamElement<u64>) -> Vec<u64> {
        match el {
            StreamElement::Records(b) => b,
            other => panic!("expected a records batch, got {other:?}"),
        }
    }

    #[test]
    fn a_given_back_batch_buffer_carries_a_later_batch() {
        let (tx, rx, back, _) = channel::<u64>(4, false, "c".into());
        let (mut w, _cancel) = writer(tx, 8);
        // A run of two batches: the writer copies it into its buffers.
        w.push(&mut (0..16).collect()).unwrap();
        let first = records_of(rx.try_recv().unwrap());
        let second = records_of(rx.try_recv().unwrap());
        assert_eq!(first, (0..8).collect::<Vec<_>>());
        assert_eq!(second, (8..16).collect::<Vec<_>>());
        // A capacity no new buffer has (they get 8) marks it: the
        // allocator could hand a freed buffer's address out again.
        let mut first = first;
        first.reserve_exact(16);
        assert_eq!(first.capacity(), 24);
        let first_ptr = first.as_ptr();
        back.give_back(first);
        // The writer took the buffer for the third batch when it sent the
        // second, so the given-back one carries the fourth.
        w.push(&mut (16..32).collect()).unwrap();
        let third = records_of(rx.try_recv().unwrap());
        let fourth = records_of(rx.try_recv().unwrap());
        assert_eq!(third, (16..24).collect::<Vec<_>>());
        assert_eq!(fourth, (24..32).collect::<Vec<_>>());
        assert_ne!(third.as_ptr(), first_ptr);
        assert_eq!(
            fourth.as_ptr(),
            first_ptr,
            "the given-back buffer was reused"
        );
    }

    #[test]
    fn a_batch_buffer_of_the_wrong_size_is_not_reused() {
        let (tx, _rx, back, _) = channel::<u64>(4, false, "c".into());
        back.give_back(Vec::with_capacity(3));
        back.give_back(Vec::with_capacity(8 * 4 + 1));
        let fitting = Vec::with_capacity(8 * 4);
        let fitting_ptr = fitting.as_ptr();
        back.give_back(fitting);
        let got = next_buffer(&tx.spares, 8);
        assert_eq!(got.as_ptr(), fitting_ptr, "the two misfits were skipped");
        assert_eq!(got.capacity(), 8 * 4);
        assert!(got.is_empty());
        assert_eq!(next_buffer(&tx.spares, 8).capacity(), 8, "a new one");
    }

    #[test]
    fn giving_back_empties_the_batch_never_blocks_and_drops_what_does_not_fit() {
        let (tx, _rx, back, _) = channel::<String>(2, false, "c".into());
        // Capacity 2: room for 4 buffers, the 5th and later are dropped.
        for i in 0..10 {
            back.give_back(vec![format!("record {i}"); 3]);
        }
        back.give_back(Vec::new());
        let mut kept = 0;
        while let Ok(v) = tx.spares.try_recv() {
            assert!(v.is_empty(), "given-back buffers are emptied");
            assert!(v.capacity() >= 3);
            kept += 1;
        }
        assert_eq!(kept, 2 * RETURN_LANE_FACTOR);
        drop(tx);
        back.give_back(vec!["after the producer ended".to_string()]);
    }

    #[test]
    fn batches_keep_their_records_when_buffers_circulate_between_threads() {
        // Many batches through a small channel with recycling, producer
        // and consumer on their own threads, runs that straddle batches
        // (so the writer fills given-back buffers): every record arrives
        // once, in order.
        const BATCHES: u64 = 20_000;
        const BATCH: u64 = 16;
        const RUN: u64 = 24;
        let (tx, rx, back, _) = channel::<u64>(2, false, "c".into());
        let producer = std::thread::spawn(move || {
            let (mut w, _cancel) = writer(tx, BATCH as usize);
            let mut next = 0;
            while next < BATCHES * BATCH {
                let end = (next + RUN).min(BATCHES * BATCH);
                let mut run: Vec<u64> = (next..end).collect();
                next = end;
                w.push(&mut run).unwrap();
            }
            w.flush().unwrap();
            w.end_of_partition().unwrap();
        });
        let mut expected = 0u64;
        loop {
            match rx.recv().unwrap() {
                StreamElement::Records(batch) => {
                    for r in &batch {
                        assert_eq!(*r, expected);
                        expected += 1;
                    }
                    back.give_back(batch);
                }
                StreamElement::EndOfPartition => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        producer.join().unwrap();
        assert_eq!(expected, BATCHES * BATCH);
    }
}
