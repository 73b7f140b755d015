//! The two task loops: a source task (source → chain) and an input-gate task
//! (input gate → barrier handler → chain).

use super::plan::{Step, TaskBody, TaskRt};
use crate::barrier::watermark::WatermarkMerger;
use crate::barrier::{BarrierHandler, BarrierSignal};
use crate::checkpoint::snapshot::SnapshotJob;
use crate::checkpoint::task_state::PendingSnapshot;
use crate::checkpoint::SubtaskCheckpointStats;
use crate::operator::{Source, SourcePoll};
use crate::runtime::chain::Link;
use crate::runtime::events::TaskEvent;
use crate::testing::{injected, FailurePoint};
use crate::transport::input_gate::{GateEvent, InputGate};
use crate::types::control::{CheckpointEnd, Control};
use crate::types::element::{
    CheckpointBarrier, CheckpointId, RecordSize, StreamElement, Watermark,
};
use crate::types::error::TaskError;
use crate::types::metrics::TaskMetrics;
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
    alignment: crate::barrier::AlignmentStats,
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
        sync_ns: crate::util::clock::now_ns().saturating_sub(started_ns),
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
        full: barrier.options.kind == crate::types::element::SnapshotKind::Savepoint,
        marked_full: barrier.options.full,
        parts,
        stats,
    })
}

/// Where a task is in its life: its loop's state, kept between the steps
/// of a cooperative worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Restore and open come first.
    Opening,
    /// Records flow.
    Running,
    /// A finished source waits for the final checkpoint (FLIP-147).
    Draining,
    /// The end of partition went out; what waits in the output is sent.
    Ending,
}

/// A source task's loop variables (see [`Phase`]).
pub(crate) struct SourceRun<T> {
    phase: Phase,
    buf: Vec<T>,
    emitted: u64,
    watermark: i64,
    idle: bool,
    /// The final checkpoint's id, once triggered.
    final_id: Option<CheckpointId>,
    /// Set while the source is idle ([`SourcePoll::Idle`]): polled again
    /// after the deadline it named (if any), when its wake-up channel is
    /// ready, or after a control message, as a waiting source thread is.
    asleep: Option<Option<u64>>,
}

impl<T> SourceRun<T> {
    pub(crate) fn new(batch_size: usize) -> Self {
        SourceRun {
            phase: Phase::Opening,
            buf: Vec::with_capacity(batch_size),
            emitted: 0,
            watermark: i64::MIN,
            idle: false,
            final_id: None,
            asleep: None,
        }
    }
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
    pub(crate) run: SourceRun<T>,
}

impl<T: Send, S: Source<T>> SourceTask<T, S> {
    fn source_err(&self, what: &'static str, e: crate::BoxError) -> TaskError {
        TaskError::from_operator(&self.name, what, e)
    }

    fn trigger(&mut self, rt: &mut TaskRt, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        let started_ns = crate::util::clock::now_ns();
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

    fn done(&mut self, id: CheckpointId, completed: bool) -> Result<(), TaskError> {
        if let Err((call, e)) = crate::operator::notify(&mut self.source, id, completed) {
            return Err(self.source_err(call, e));
        }
        self.chain.checkpoint_done(id, completed)
    }

    /// Waits (thread-per-task mode) for a control message, or until
    /// `deadline_ns` (forever if `None`), or while records flow until the
    /// source's own wake-up channel is ready. Takes nothing: the next step
    /// does.
    fn wait(&mut self, deadline_ns: Option<u64>) -> Result<(), TaskError> {
        let start = crate::util::clock::now_ns();
        let timeout = match deadline_ns {
            Some(d) if d <= start => return Ok(()),
            Some(d) => crossbeam_channel::after(std::time::Duration::from_nanos(d - start)),
            None => crossbeam_channel::never(),
        };
        let mut sel = Select::new();
        self.watch(&mut sel);
        let cancel_i = sel.recv(&self.cancel);
        sel.recv(&timeout);
        let ready = sel.ready();
        self.metrics
            .add_idle_ns(crate::util::clock::now_ns() - start);
        if ready == cancel_i
            && matches!(
                self.cancel.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            )
        {
            return Err(TaskError::Cancelled);
        }
        Ok(())
    }

    /// True when an idle source is due again: its deadline passed or its
    /// wake-up channel is ready (holds a message or is disconnected).
    fn wakes(&self, deadline_ns: Option<u64>) -> bool {
        if deadline_ns.is_some_and(|d| crate::util::clock::now_ns() >= d) {
            return true;
        }
        let mut on = crate::transport::handoff::WakeOn::default();
        self.source.wake_on(&mut on);
        on.any_ready()
    }

    /// Restores and opens the chain (once per run attempt).
    fn open(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        if let Some(states) = rt.restored.take() {
            if let Err(e) = states.restore_into(&self.name, &mut self.source) {
                return Err(self.source_err("restore_state", e));
            }
            self.chain.restore(&states)?;
        }
        self.chain.open()
    }

    /// The source's input ended (or the job stops it): the end of event
    /// time, then (when checkpointing) the wait for the final checkpoint.
    fn finish_input(&mut self, rt: &TaskRt) -> Result<(), TaskError> {
        // The end of a source's input is the end of event time for it
        // (Flink emits `Watermark.MAX_WATERMARK` when a source finishes).
        let watermark = self.run.watermark;
        if watermark > i64::MIN && watermark < i64::MAX {
            self.chain.watermark(Watermark(i64::MAX))?;
        }
        self.chain.flush()?;
        if rt.checkpointing {
            // FLIP-147: a finished source waits for the final checkpoint,
            // so two-phase-commit sinks commit the tail of the output, and
            // ends its output only after it completed.
            let _ = rt.events.send(TaskEvent::SourceDrained { task: rt.task });
            self.run.phase = Phase::Draining;
            Ok(())
        } else {
            self.end_output()
        }
    }

    fn end_output(&mut self) -> Result<(), TaskError> {
        self.run.phase = Phase::Ending;
        self.chain.end()
    }

    /// `Phase::Running`: up to `budget` polls of the source.
    fn step_running(&mut self, rt: &mut TaskRt, budget: u32) -> Result<Step, TaskError> {
        for _ in 0..budget {
            crate::checkpoint::snapshot::run_overdue();
            let blocked = self.chain.output_blocked() && !self.chain.drain_output()?;
            if let Some(t) = self.chain.next_timer_ns().filter(|_| !blocked) {
                let now = crate::util::clock::now_ns();
                if now >= t {
                    self.chain.on_processing_time(now)?;
                }
            }
            let mut stopping = false;
            while let Ok(c) = self.control.try_recv() {
                self.run.asleep = None;
                match c {
                    Control::Trigger(b) => self.trigger(rt, b)?,
                    Control::Ended(id, end) => self.done(id, end == CheckpointEnd::Completed)?,
                    Control::Stop => stopping = true,
                }
            }
            if stopping {
                self.finish_input(rt)?;
                return Ok(Step::Busy);
            }
            if blocked {
                // Cooperative mode: the rest of the last batch's output
                // waits; no new input until it is sent.
                return Ok(Step::Idle(None));
            }
            if let Some(wake) = self.run.asleep {
                if !self.wakes(wake) {
                    return Ok(Step::Idle(wake));
                }
                self.run.asleep = None;
            }
            let mut buf = std::mem::take(&mut self.run.buf);
            buf.clear();
            let poll = match self.source.poll(&mut buf, self.batch_size) {
                Ok(p) => p,
                Err(e) => return Err(self.source_err("poll", e)),
            };
            if !buf.is_empty() {
                self.run.emitted += buf.len() as u64;
                self.metrics.add_in(buf.len() as u64);
                let pushed = self.chain.push(&mut buf);
                self.run.buf = buf;
                pushed?;
                if let Some(f) = rt.failure {
                    if matches!(f.at, FailurePoint::AfterRecords(k) if self.run.emitted >= k) {
                        return Err(injected(&f));
                    }
                }
            } else {
                self.run.buf = buf;
            }
            if let Some(w) = self.source.current_watermark() {
                if w.0 > self.run.watermark {
                    self.run.watermark = w.0;
                    self.chain.watermark(w)?;
                }
            }
            let now_idle = self.source.is_idle();
            if now_idle != self.run.idle {
                self.run.idle = now_idle;
                self.chain.idle(now_idle)?;
            }
            match poll {
                SourcePoll::Ready => {}
                SourcePoll::Idle { wake_at_ns } => {
                    self.chain.flush()?;
                    let wake =
                        crate::runtime::chain::earliest(wake_at_ns, self.chain.next_timer_ns());
                    self.run.asleep = Some(wake);
                    return Ok(Step::Idle(wake));
                }
                SourcePoll::Finished => {
                    self.finish_input(rt)?;
                    return Ok(Step::Busy);
                }
            }
        }
        Ok(Step::Busy)
    }

    /// `Phase::Draining`: notifications until the final checkpoint
    /// completed.
    fn step_draining(&mut self, rt: &mut TaskRt) -> Result<Step, TaskError> {
        self.chain.drain_output()?;
        let mut busy = false;
        while let Ok(c) = self.control.try_recv() {
            busy = true;
            match c {
                Control::Trigger(b) => {
                    if b.options.is_final {
                        self.run.final_id = Some(b.id);
                    }
                    self.trigger(rt, b)?;
                }
                Control::Ended(id, end) => {
                    let ok = end == CheckpointEnd::Completed;
                    self.done(id, ok)?;
                    if ok && self.run.final_id.is_some_and(|f| id >= f) {
                        self.end_output()?;
                        return Ok(Step::Busy);
                    }
                }
                Control::Stop => {}
            }
        }
        Ok(if busy { Step::Busy } else { Step::Idle(None) })
    }
}

impl<T: Send, S: Source<T>> TaskBody for SourceTask<T, S> {
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        loop {
            match self.step(rt, u32::MAX)? {
                Step::Done => return Ok(()),
                Step::Busy => {}
                // Checkpoint work of its own first, slice by slice: the
                // next step looks at the source again after each.
                Step::Idle(deadline) => {
                    if !crate::util::background::run_idle_slice() {
                        self.wait(deadline)?
                    }
                }
            }
        }
    }

    fn step(&mut self, rt: &mut TaskRt, budget: u32) -> Result<Step, TaskError> {
        match self.run.phase {
            Phase::Opening => {
                self.open(rt)?;
                self.run.phase = Phase::Running;
                Ok(Step::Busy)
            }
            Phase::Running => self.step_running(rt, budget),
            Phase::Draining => self.step_draining(rt),
            Phase::Ending => Ok(if self.chain.drain_output()? {
                Step::Done
            } else {
                Step::Idle(None)
            }),
        }
    }

    fn watch<'a>(&'a self, sel: &mut Select<'a>) {
        sel.recv(&self.control);
        if self.run.phase == Phase::Running && !self.chain.output_blocked() {
            let mut on = crate::transport::handoff::WakeOn::default();
            self.source.wake_on(&mut on);
            on.register(sel);
        }
        self.chain.watch_output(sel);
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
    pub(crate) run: GateRun,
}

/// A gate task's loop variables (see [`Phase`]).
pub(crate) struct GateRun {
    phase: Phase,
    signals: Vec<BarrierSignal>,
    received: u64,
    batches: u64,
}

impl Default for GateRun {
    fn default() -> Self {
        GateRun {
            phase: Phase::Opening,
            signals: Vec::with_capacity(4),
            received: 0,
            batches: 0,
        }
    }
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
                let started_ns = crate::util::clock::now_ns();
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
                        operator: crate::checkpoint::channel_state::CHANNEL_STATE_OPERATOR
                            .to_string(),
                        snapshot: crate::checkpoint::channel_state::snapshot(id, state),
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

    fn control(&mut self, c: Control) -> Result<(), TaskError> {
        match c {
            Control::Ended(id, end) => {
                let ok = end == CheckpointEnd::Completed;
                if !ok && self.held.as_ref().is_some_and(|j| j.id <= id) {
                    // Rule 17: the coordinator gave up the checkpoint whose
                    // channel state this task still records (a timeout, a
                    // decline elsewhere): stop, and end that state
                    // downstream in band, where no in-band barrier may come.
                    self.held = None;
                    self.gate.abort_unaligned(id);
                    self.chain.cancel_checkpoint(id)?;
                }
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
        states: &crate::checkpoint::task_state::TaskRestore,
    ) -> Result<(), TaskError> {
        use crate::checkpoint::channel_state::{decode, CHANNEL_STATE_OPERATOR};
        use crate::checkpoint::task_state::TaskRestore;
        let Some(restored) = rt.restored_checkpoint else {
            return Ok(());
        };
        let err = |msg: String| {
            TaskError::from_operator(
                &rt.task_id.to_string(),
                "restore channel state",
                Box::new(crate::error::FatalError(msg)),
            )
        };
        let parts: Vec<&crate::checkpoint::task_state::OperatorSnapshot> = match states {
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

impl<T: GateData> GateTask<T> {
    /// Acts on the handler's signals gathered with the last event.
    fn take_signals(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        let mut signals = std::mem::take(&mut self.run.signals);
        let res = signals.drain(..).try_for_each(|s| self.on_signal(rt, s));
        self.run.signals = signals;
        res
    }

    /// `Phase::Running`: up to `budget` elements through the gate.
    fn step_running(&mut self, rt: &mut TaskRt, budget: u32) -> Result<Step, TaskError> {
        for _ in 0..budget {
            crate::checkpoint::snapshot::run_overdue();
            if self.chain.output_blocked() && !self.chain.drain_output()? {
                // Cooperative mode: the rest of the last batch's output
                // waits; only control and priority barriers meanwhile.
                match self.gate.next_event(&mut self.run.signals) {
                    GateEvent::Control(c) => {
                        self.take_signals(rt)?;
                        self.control(c)?;
                    }
                    GateEvent::Idle => return Ok(Step::Idle(None)),
                    _ => self.take_signals(rt)?,
                }
                continue;
            }
            let timer = self.chain.next_timer_ns();
            if let Some(t) = timer {
                let now = crate::util::clock::now_ns();
                if now >= t {
                    self.chain.on_processing_time(now)?;
                    continue;
                }
            }
            let ev = self.gate.next(&mut self.run.signals, timer)?;
            self.take_signals(rt)?;
            match ev {
                GateEvent::Element(ch, StreamElement::Records(mut batch)) => {
                    self.run.received += batch.len() as u64;
                    self.run.batches += 1;
                    // Sample the queue length now and then: summing the
                    // channels' lengths costs O(channels).
                    if self.run.batches % 256 == 0 {
                        self.metrics.set_queued(self.gate.queued() as u64);
                    }
                    self.chain.push(&mut batch)?;
                    self.gate.recycle(ch, batch);
                    if let Some(f) = rt.failure {
                        if matches!(f.at, FailurePoint::AfterRecords(k) if self.run.received >= k) {
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
                GateEvent::Control(c) => self.control(c)?,
                GateEvent::Dry => self.chain.flush()?,
                GateEvent::Idle => return Ok(Step::Idle(timer)),
                GateEvent::End => {
                    self.run.phase = Phase::Ending;
                    self.chain.end()?;
                    // Take the notifications that were sent before our
                    // inputs ended (e.g. the completion of the final
                    // checkpoint).
                    while let Some(c) = self.gate.try_control() {
                        self.control(c)?;
                    }
                    return Ok(Step::Busy);
                }
            }
        }
        Ok(Step::Busy)
    }
}

impl<T: GateData> TaskBody for GateTask<T> {
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        // On its own thread the gate waits inside `next`: a step returns
        // only at the end.
        while self.step(rt, u32::MAX)? != Step::Done {}
        Ok(())
    }

    fn step(&mut self, rt: &mut TaskRt, budget: u32) -> Result<Step, TaskError> {
        match self.run.phase {
            Phase::Opening => {
                if let Some(states) = rt.restored.take() {
                    self.chain.restore(&states)?;
                    self.restore_channel_state(rt, &states)?;
                }
                self.chain.open()?;
                self.run.phase = Phase::Running;
                Ok(Step::Busy)
            }
            Phase::Running | Phase::Draining => self.step_running(rt, budget),
            Phase::Ending => Ok(if self.chain.drain_output()? {
                Step::Done
            } else {
                Step::Idle(None)
            }),
        }
    }

    fn watch<'a>(&'a self, sel: &mut Select<'a>) {
        if self.run.phase != Phase::Ending {
            self.gate.watch(sel, !self.chain.output_blocked());
        }
        self.chain.watch_output(sel);
    }
}
