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
//! task's metrics.

use crate::element::{CheckpointBarrier, CheckpointId, StreamElement, Watermark};
use crate::error::TaskError;
use crate::key_groups::KeyGroupRouter;
use crate::metrics::TaskMetrics;
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
    /// subtask ([`crate::key_to_subtask`]'s rule, with the job's
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
}

/// Sends elements to one channel, blocking on a full channel until there is
/// room or the job is cancelled.
pub(crate) struct ChannelSender<T> {
    pub(crate) tx: Sender<StreamElement<T>>,
    pub(crate) consumer: Arc<str>,
}

/// Sends `el`, blocking (backpressure) while the channel is full.
///
/// # Errors
/// [`TaskError::Cancelled`] when the job is cancelled while blocked;
/// [`TaskError::Disconnected`] when the consumer is gone.
pub(crate) fn send_blocking<T>(
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
    let start = crate::clock::now_ns();
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
    metrics.add_backpressure_ns(crate::clock::now_ns() - start);
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
}

impl<T: Clone + Send, K: KeyOf<T> + Clone> ChannelWriter<T, K> {
    pub(crate) fn new(
        channels: Vec<ChannelSender<T>>,
        route: Route<K>,
        subtask: usize,
        config: OutputConfig,
        cancel: Receiver<()>,
        metrics: Arc<TaskMetrics>,
    ) -> Self {
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
        }
    }

    fn send_buffer(&mut self, ch: usize) -> Result<(), TaskError> {
        if self.buffers[ch].is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(
            &mut self.buffers[ch],
            Vec::with_capacity(self.config.batch_size),
        );
        self.metrics.add_out(batch.len() as u64);
        send_blocking(
            &self.channels[ch],
            StreamElement::Records(batch),
            &self.cancel,
            &self.metrics,
        )
    }

    /// Adds records; sends every batch that fills up.
    pub(crate) fn push(&mut self, records: &mut Vec<T>) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
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
            let now = crate::clock::now_ns();
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
        self.flush()?;
        for ch in 0..self.channels.len() {
            let copy = match &el {
                StreamElement::Barrier(b) => StreamElement::Barrier(*b),
                StreamElement::CancelCheckpoint(id) => StreamElement::CancelCheckpoint(*id),
                StreamElement::EndOfPartition => StreamElement::EndOfPartition,
                StreamElement::Watermark(w) => StreamElement::Watermark(*w),
                StreamElement::Idle(i) => StreamElement::Idle(*i),
                StreamElement::Records(_) => unreachable!("records are pushed, not broadcast"),
            };
            send_blocking(&self.channels[ch], copy, &self.cancel, &self.metrics)?;
        }
        Ok(())
    }

    pub(crate) fn barrier(&mut self, b: CheckpointBarrier) -> Result<(), TaskError> {
        self.broadcast_event(StreamElement::Barrier(b))
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
