//! The two task loops: a source task (source → chain) and an input-gate task
//! (input gate → barrier handler → chain).

use super::plan::{TaskBody, TaskRt};
use super::snapshot::SnapshotJob;
use crate::barrier::{BarrierHandler, BarrierSignal};
use crate::chain::Link;
use crate::checkpoint::SubtaskCheckpointStats;
use crate::element::{CheckpointBarrier, CheckpointId, RecordSize, StreamElement, Watermark};
use crate::error::TaskError;
use crate::failure::{injected, FailurePoint};
use crate::input_gate::{GateEvent, InputGate};
use crate::metrics::TaskMetrics;
use crate::operator::{Source, SourcePoll};
use crate::protocol::{Control, PendingSnapshot, TaskEvent};
use crate::watermark::WatermarkMerger;
use crossbeam_channel::{Receiver, Select};
use std::sync::Arc;

/// A task's part of checkpoint `barrier`, after the caller forwarded the
/// barrier downstream, in Flink's order
/// (`SubtaskCheckpointCoordinatorImpl.checkpointState`: barrier broadcast
/// before `snapshotState`): the synchronous part of every operator's
/// snapshot (the head's, if any, then the chain's) is taken, and the rest
/// goes to the task's snapshot thread, which acknowledges. No record is
/// processed since the barrier, so the snapshot holds exactly the effects
/// of the records before it. `started_ns`: when the trigger (a source) or
/// the last barrier (a task with inputs) was taken in.
///
/// Returns the job for the snapshot thread; the caller submits it (an
/// unaligned checkpoint's job waits for its channel state first).
fn checkpoint<I>(
    rt: &mut TaskRt,
    head: Option<PendingSnapshot>,
    chain: &mut dyn Link<I>,
    barrier: CheckpointBarrier,
    alignment: crate::AlignmentStats,
    started_ns: u64,
    unaligned: bool,
) -> Result<SnapshotJob, TaskError> {
    let mut parts: Vec<PendingSnapshot> = head.into_iter().collect();
    chain.snapshot(barrier.id, &mut parts)?;
    if let Some(f) = rt.failure {
        if f.at == FailurePoint::DuringSnapshot {
            return Err(injected(&f));
        }
    }
    let first_ns = if alignment.first_barrier_ns > 0 {
        alignment.first_barrier_ns
    } else {
        started_ns
    };
    let stats = SubtaskCheckpointStats {
        task: rt.task_id.clone(),
        sync_ns: crate::clock::now_ns().saturating_sub(started_ns),
        alignment_ns: if alignment.blocking {
            alignment.duration_ns
        } else {
            0
        },
        barrier_spread_ns: alignment.duration_ns,
        buffered_bytes: alignment.buffered_bytes,
        start_delay_ns: first_ns.saturating_sub(barrier.timestamp_ns),
        // The snapshot thread fills in the rest.
        async_ns: 0,
        checkpointed_bytes: 0,
        persisted_bytes: 0,
        state_bytes: 0,
        incremental: false,
        unaligned,
    };
    Ok(SnapshotJob {
        id: barrier.id,
        full: barrier.options.kind == crate::element::SnapshotKind::Savepoint,
        parts,
        stats,
    })
}

/// A source and the chain it feeds.
pub(crate) struct SourceTask<T, S> {
    pub(crate) name: String,
    pub(crate) source: S,
    pub(crate) chain: Box<dyn Link<T>>,
    pub(crate) batch_size: usize,
    pub(crate) control: Receiver<Control>,
    pub(crate) cancel: Receiver<()>,
    pub(crate) metrics: Arc<TaskMetrics>,
    /// Unaligned mode (no aligned phase): the barrier also takes the
    /// priority lanes at the trigger.
    pub(crate) priority_at_trigger: bool,
}

impl<T: Send, S: Source<T>> SourceTask<T, S> {
    fn source_err(&self, what: &'static str, e: crate::BoxError) -> TaskError {
        TaskError::from_operator(&self.name, what, e)
    }

    fn trigger(&mut self, rt: &mut TaskRt, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        let started_ns = crate::clock::now_ns();
        // The barrier leaves first (see `checkpoint`); the source emits
        // nothing in between, so its position is the barrier's. In
        // unaligned mode its priority copy overtakes the queued records.
        if self.priority_at_trigger && !barrier.must_align() {
            self.chain.priority_barrier(barrier);
        }
        self.chain.barrier(barrier)?;
        let head = match self.source.snapshot_state_async(barrier.id) {
            Ok(s) => s.map(|snapshot| PendingSnapshot {
                operator: self.name.clone(),
                snapshot,
            }),
            Err(e) => return Err(self.source_err("snapshot_state", e)),
        };
        let job = checkpoint(
            rt,
            head,
            &mut *self.chain,
            barrier,
            Default::default(),
            started_ns,
            false,
        )?;
        rt.submit_snapshot(job);
        Ok(())
    }

    fn done(&mut self, rt: &TaskRt, id: CheckpointId, completed: bool) -> Result<(), TaskError> {
        rt.checkpoint_done(id, completed);
        if let Err((call, e)) = crate::operator::notify(&mut self.source, id, completed) {
            return Err(self.source_err(call, e));
        }
        self.chain.checkpoint_done(id, completed)
    }

    /// Waits for a control message until `deadline_ns` (forever if `None`),
    /// or until the source's own wake-up channel is ready.
    fn wait_control(
        &mut self,
        deadline_ns: Option<u64>,
        wake_on_source: bool,
    ) -> Result<Option<Control>, TaskError> {
        let start = crate::clock::now_ns();
        let timeout = match deadline_ns {
            Some(d) if d <= start => return Ok(None),
            Some(d) => crossbeam_channel::after(std::time::Duration::from_nanos(d - start)),
            None => crossbeam_channel::never(),
        };
        let mut sel = Select::new();
        let ctl_i = sel.recv(&self.control);
        let cancel_i = sel.recv(&self.cancel);
        sel.recv(&timeout);
        if let Some(rx) = self.source.wake_on().filter(|_| wake_on_source) {
            sel.recv(rx.raw());
        }
        let ready = sel.ready();
        self.metrics.add_idle_ns(crate::clock::now_ns() - start);
        if ready == ctl_i {
            return Ok(self.control.try_recv().ok());
        }
        if ready == cancel_i
            && matches!(
                self.cancel.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            )
        {
            return Err(TaskError::Cancelled);
        }
        Ok(None)
    }
}

impl<T: Send, S: Source<T>> TaskBody for SourceTask<T, S> {
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        if let Some(states) = rt.restored.take() {
            if let Err(e) = states.restore_into(&self.name, &mut self.source) {
                return Err(self.source_err("restore_state", e));
            }
            self.chain.restore(&states)?;
        }
        self.chain.open()?;
        let mut buf: Vec<T> = Vec::with_capacity(self.batch_size);
        let mut emitted: u64 = 0;
        let mut stopping = false;
        let mut watermark = i64::MIN;
        let mut idle = false;
        loop {
            if let Some(t) = self.chain.next_timer_ns() {
                let now = crate::clock::now_ns();
                if now >= t {
                    self.chain.on_processing_time(now)?;
                }
            }
            while let Ok(c) = self.control.try_recv() {
                match c {
                    Control::Trigger(b) => self.trigger(rt, b)?,
                    Control::Done(id, ok) => self.done(rt, id, ok)?,
                    Control::Stop => stopping = true,
                }
            }
            if stopping {
                break;
            }
            buf.clear();
            let poll = match self.source.poll(&mut buf, self.batch_size) {
                Ok(p) => p,
                Err(e) => return Err(self.source_err("poll", e)),
            };
            if !buf.is_empty() {
                emitted += buf.len() as u64;
                self.metrics.add_in(buf.len() as u64);
                self.chain.push(&mut buf)?;
                if let Some(f) = rt.failure {
                    if matches!(f.at, FailurePoint::AfterRecords(k) if emitted >= k) {
                        return Err(injected(&f));
                    }
                }
            }
            if let Some(w) = self.source.current_watermark() {
                if w.0 > watermark {
                    watermark = w.0;
                    self.chain.watermark(w)?;
                }
            }
            let now_idle = self.source.is_idle();
            if now_idle != idle {
                idle = now_idle;
                self.chain.idle(idle)?;
            }
            match poll {
                SourcePoll::Ready => {}
                SourcePoll::Idle { wake_at_ns } => {
                    self.chain.flush()?;
                    let wake = crate::chain::earliest(wake_at_ns, self.chain.next_timer_ns());
                    match self.wait_control(wake, true)? {
                        Some(Control::Trigger(b)) => self.trigger(rt, b)?,
                        Some(Control::Done(id, ok)) => self.done(rt, id, ok)?,
                        Some(Control::Stop) => stopping = true,
                        None => {}
                    }
                }
                SourcePoll::Finished => break,
            }
        }
        // The end of a source's input is the end of event time for it
        // (Flink emits `Watermark.MAX_WATERMARK` when a source finishes).
        if watermark > i64::MIN && watermark < i64::MAX {
            self.chain.watermark(Watermark(i64::MAX))?;
        }
        self.chain.flush()?;
        if rt.checkpointing {
            // FLIP-147: a finished source waits for the final checkpoint,
            // so two-phase-commit sinks commit the tail of the output, and
            // ends its output only after it completed.
            let _ = rt.events.send(TaskEvent::SourceDrained { task: rt.task });
            let mut final_id = None;
            loop {
                match self.wait_control(None, false)? {
                    Some(Control::Trigger(b)) => {
                        if b.options.is_final {
                            final_id = Some(b.id);
                        }
                        self.trigger(rt, b)?;
                    }
                    Some(Control::Done(id, ok)) => {
                        self.done(rt, id, ok)?;
                        if ok && final_id.is_some_and(|f| id >= f) {
                            break;
                        }
                    }
                    Some(Control::Stop) | None => {}
                }
            }
        }
        self.chain.end()
    }
}

/// An input gate, its barrier handler and the chain it feeds.
pub(crate) struct GateTask<T> {
    pub(crate) gate: InputGate<T>,
    pub(crate) chain: Box<dyn Link<T>>,
    pub(crate) metrics: Arc<TaskMetrics>,
    pub(crate) watermarks: WatermarkMerger,
    /// Unaligned mode: the snapshot of the pending checkpoint, submitted
    /// once its channel state is complete.
    pub(crate) held: Option<SnapshotJob>,
}

/// What a gate task's records must be: channel state is persisted.
pub(crate) trait GateData:
    RecordSize + Clone + Send + serde::Serialize + serde::de::DeserializeOwned + 'static
{
}
impl<T: RecordSize + Clone + Send + serde::Serialize + serde::de::DeserializeOwned + 'static>
    GateData for T
{
}

impl<T: GateData> GateTask<T> {
    fn on_signal(&mut self, rt: &mut TaskRt, s: BarrierSignal) -> Result<(), TaskError> {
        match s {
            BarrierSignal::Trigger { barrier, alignment } => {
                let started_ns = crate::clock::now_ns();
                if alignment.unaligned {
                    // FLIP-76: the barrier overtakes this task's queued
                    // output at once; the in-band one follows the records
                    // the snapshot reflects.
                    self.chain.priority_barrier(barrier);
                }
                self.chain.barrier(barrier)?;
                let job = checkpoint(
                    rt,
                    None,
                    &mut *self.chain,
                    barrier,
                    alignment,
                    started_ns,
                    alignment.unaligned,
                )?;
                if self.gate.is_unaligned() {
                    // Submitted with its channel state (rule 13).
                    self.held = Some(job);
                } else {
                    rt.submit_snapshot(job);
                }
                Ok(())
            }
            BarrierSignal::ChannelStateDone { id } => {
                let (Some(mut job), Some(state)) =
                    (self.held.take(), self.gate.take_channel_state(id))
                else {
                    return Err(TaskError::from_operator(
                        &rt.task_id.to_string(),
                        "checkpoint",
                        format!("channel state of checkpoint {id} complete without its snapshot")
                            .into(),
                    ));
                };
                // An empty state is not written: a restore ignores any
                // other checkpoint's state in the chain (its id differs).
                // Its size (`persisted_bytes`) is taken on the snapshot
                // thread, from the encoding.
                if state.iter().any(|ch| !ch.is_empty()) {
                    job.parts.push(PendingSnapshot {
                        operator: crate::channel_state::CHANNEL_STATE_OPERATOR.to_string(),
                        snapshot: crate::channel_state::snapshot(id, state),
                    });
                }
                rt.submit_snapshot(job);
                Ok(())
            }
            BarrierSignal::Abort { id, reason } => {
                if self.held.as_ref().is_some_and(|j| j.id == id) {
                    self.held = None;
                }
                // As Flink's tasks do: tell downstream to stop aligning for
                // `id`, and decline it to the coordinator.
                self.chain.cancel_checkpoint(id)?;
                let _ = rt.events.send(TaskEvent::Decline {
                    task: rt.task,
                    id,
                    reason,
                    detail: None,
                });
                Ok(())
            }
        }
    }

    fn control(&mut self, rt: &TaskRt, c: Control) -> Result<(), TaskError> {
        match c {
            Control::Done(id, ok) => {
                if !ok && self.held.as_ref().is_some_and(|j| j.id <= id) {
                    // Rule 17: the coordinator gave up the checkpoint whose
                    // channel state this task still records (a timeout, a
                    // decline elsewhere): stop, and end that state
                    // downstream in band, where no in-band barrier may come.
                    self.held = None;
                    self.gate.abort_unaligned(id);
                    self.chain.cancel_checkpoint(id)?;
                }
                rt.checkpoint_done(id, ok);
                self.chain.checkpoint_done(id, ok)
            }
            Control::Trigger(_) | Control::Stop => Ok(()),
        }
    }
}

impl<T: GateData> GateTask<T> {
    /// Unaligned mode: hands the restored checkpoint's channel state to the
    /// gate, to replay before new input. A restore at another parallelism
    /// from a checkpoint that holds channel state is refused (rescaling
    /// channel state is not built), as is channel state restored into a
    /// job that is not in unaligned mode.
    fn restore_channel_state(
        &mut self,
        rt: &TaskRt,
        states: &crate::protocol::TaskRestore,
    ) -> Result<(), TaskError> {
        use crate::channel_state::{decode, CHANNEL_STATE_OPERATOR};
        use crate::protocol::TaskRestore;
        let Some(restored) = rt.restored_checkpoint else {
            return Ok(());
        };
        let err = |msg: String| {
            TaskError::from_operator(
                &rt.task_id.to_string(),
                "restore channel state",
                Box::new(crate::FatalError(msg)),
            )
        };
        let parts: Vec<&crate::protocol::OperatorSnapshot> = match states {
            TaskRestore::Same(parts) => parts.iter().collect(),
            TaskRestore::Rescaled { old, .. } => old.iter().flatten().collect(),
        };
        let mut found = Vec::new();
        for p in parts
            .iter()
            .filter(|p| p.operator == CHANNEL_STATE_OPERATOR)
        {
            match decode::<T>(&p.bytes, restored) {
                Ok(Some(state)) => found.push(state),
                Ok(None) => {} // an earlier checkpoint's, in an incremental chain
                Err(e) => {
                    return Err(err(format!(
                    "checkpoint {restored}: the channel state of task {} cannot be decoded: {e}",
                    rt.task_id
                )))
                }
            }
        }
        let holds_records = found.iter().flatten().any(|ch| !ch.is_empty());
        if matches!(states, TaskRestore::Rescaled { .. }) {
            if holds_records {
                return Err(err(format!(
                    "checkpoint {restored} holds in-flight records of an unaligned checkpoint \
                     for task {}, and restoring channel state at another parallelism is not \
                     supported; restore at the checkpoint's parallelism, or from an aligned \
                     checkpoint",
                    rt.task_id.operator
                )));
            }
            return Ok(());
        }
        let Some(state) = found.pop().filter(|_| holds_records) else {
            return Ok(());
        };
        if !self.gate.is_unaligned() {
            if !holds_records {
                return Ok(());
            }
            return Err(err(format!(
                "checkpoint {restored} is unaligned and holds in-flight records for task {}: \
                 restore it with unaligned checkpoints (--checkpoint unaligned) or with an \
                 aligned-checkpoint timeout",
                rt.task_id
            )));
        }
        self.gate.restore_channel_state(state).map_err(err)
    }
}

impl<T: GateData> TaskBody for GateTask<T> {
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        if let Some(states) = rt.restored.take() {
            self.chain.restore(&states)?;
            self.restore_channel_state(rt, &states)?;
        }
        self.chain.open()?;
        let mut signals: Vec<BarrierSignal> = Vec::with_capacity(4);
        let mut received: u64 = 0;
        let mut batches: u64 = 0;
        loop {
            let timer = self.chain.next_timer_ns();
            if let Some(t) = timer {
                let now = crate::clock::now_ns();
                if now >= t {
                    self.chain.on_processing_time(now)?;
                    continue;
                }
            }
            let ev = self.gate.next(&mut signals, timer)?;
            for s in signals.drain(..) {
                self.on_signal(rt, s)?;
            }
            match ev {
                GateEvent::Element(_, StreamElement::Records(mut batch)) => {
                    received += batch.len() as u64;
                    batches += 1;
                    // Sample the queue length now and then: summing the
                    // channels' lengths costs O(channels).
                    if batches % 256 == 0 {
                        self.metrics.set_queued(self.gate.queued() as u64);
                    }
                    self.chain.push(&mut batch)?;
                    if let Some(f) = rt.failure {
                        if matches!(f.at, FailurePoint::AfterRecords(k) if received >= k) {
                            return Err(injected(&f));
                        }
                    }
                }
                GateEvent::Element(ch, StreamElement::Watermark(w)) => {
                    if let Some(w) = self.watermarks.on_watermark(ch, w) {
                        self.chain.watermark(w)?;
                    }
                }
                GateEvent::Element(ch, StreamElement::Idle(idle)) => {
                    if let Some(w) = self.watermarks.on_idle(ch, idle) {
                        self.chain.watermark(w)?;
                    }
                    if let Some(all_idle) = self.watermarks.status_change() {
                        self.chain.idle(all_idle)?;
                    }
                }
                GateEvent::Element(ch, StreamElement::EndOfPartition) => {
                    if let Some(w) = self.watermarks.on_end(ch) {
                        self.chain.watermark(w)?;
                    }
                }
                GateEvent::Element(_, _) => {}
                GateEvent::Deadline => {}
                GateEvent::Signals => {
                    if let Some(f) = rt.failure {
                        let aligning = !self.gate.handler.blocked().is_empty();
                        if f.at == FailurePoint::DuringAlignment && aligning {
                            return Err(injected(&f));
                        }
                    }
                }
                GateEvent::Control(c) => self.control(rt, c)?,
                GateEvent::Dry => self.chain.flush()?,
                GateEvent::End => break,
            }
        }
        self.chain.end()?;
        // Take the notifications that were sent before our inputs ended
        // (e.g. the completion of the final checkpoint).
        while let Some(c) = self.gate.try_control() {
            self.control(rt, c)?;
        }
        Ok(())
    }
}
