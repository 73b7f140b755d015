//! The two task loops: a source task (source → chain) and an input-gate task
//! (input gate → barrier handler → chain).

use super::{Control, TaskBody, TaskError, TaskEvent, TaskRt};
use crate::barrier::{BarrierHandler, BarrierSignal};
use crate::chain::{Link, OperatorSnapshot};
use crate::element::{CheckpointBarrier, CheckpointId, RecordSize, StreamElement, Watermark};
use crate::input_gate::{GateEvent, InputGate};
use crate::metrics::TaskMetrics;
use crate::operator::{Source, SourcePoll};
use crossbeam_channel::{Receiver, Select};
use std::sync::Arc;

/// Where a planned failure strikes a task (see [`crate::FailurePlan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePoint {
    /// When the task has handled this many records in the current attempt
    /// (received, or emitted for a source).
    AfterRecords(u64),
    /// While the task aligns a checkpoint (after a barrier blocked one of
    /// its channels and before the alignment ends); only tasks with two or
    /// more inputs in exactly-once mode align.
    DuringAlignment,
    /// While the task takes its snapshot: after its state was copied and
    /// before it acknowledged the checkpoint.
    DuringSnapshot,
}

/// One armed failure in one task attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InjectedFailure {
    pub(crate) index: usize,
    pub(crate) at: FailurePoint,
}

fn injected(f: &InjectedFailure) -> TaskError {
    TaskError::Injected(format!("planned failure #{} ({:?})", f.index, f.at))
}

/// Snapshots the head's state (if any) and the chain, then acknowledges.
fn snapshot_and_ack<I>(
    rt: &mut TaskRt,
    head: Option<OperatorSnapshot>,
    chain: &mut dyn Link<I>,
    barrier: CheckpointBarrier,
    alignment: crate::AlignmentStats,
) -> Result<(), TaskError> {
    let mut states: Vec<OperatorSnapshot> = head.into_iter().collect();
    chain.snapshot(barrier.id, &mut states)?;
    if let Some(f) = rt.failure {
        if f.at == FailurePoint::DuringSnapshot {
            return Err(injected(&f));
        }
    }
    // The job thread may be gone when the job is being torn down; then the
    // ack no longer matters.
    let _ = rt.events.send(TaskEvent::Ack {
        task: rt.task,
        id: barrier.id,
        states,
        alignment,
    });
    Ok(())
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
}

impl<T: Send, S: Source<T>> SourceTask<T, S> {
    fn source_err(&self, what: &str, e: crate::BoxError) -> TaskError {
        TaskError::from_operator(&self.name, what, e)
    }

    fn trigger(&mut self, rt: &mut TaskRt, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        let head = match self.source.snapshot_state(barrier.id) {
            Ok(s) => s.map(|bytes| OperatorSnapshot {
                operator: self.name.clone(),
                bytes,
            }),
            Err(e) => return Err(self.source_err("snapshot_state", e)),
        };
        snapshot_and_ack(rt, head, &mut *self.chain, barrier, Default::default())?;
        self.chain.barrier(barrier)
    }

    fn done(&mut self, id: CheckpointId, completed: bool) -> Result<(), TaskError> {
        if completed {
            if let Err(e) = self.source.notify_checkpoint_complete(id) {
                return Err(self.source_err("notify_checkpoint_complete", e));
            }
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
            sel.recv(rx);
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
            if let Some(s) = states.iter().find(|s| s.operator == self.name) {
                if let Err(e) = self.source.restore_state(&s.bytes) {
                    return Err(self.source_err("restore_state", e));
                }
            }
            self.chain.restore(&states)?;
        }
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
                    Control::Done(id, ok) => self.done(id, ok)?,
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
                        Some(Control::Done(id, ok)) => self.done(id, ok)?,
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
                        self.done(id, ok)?;
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
}

/// The event-time watermark of a task with several input channels: the
/// minimum over its channels that are neither ended nor idle (Flink's
/// `StatusWatermarkValve`). It only ever advances.
pub(crate) struct WatermarkMerger {
    per_channel: Vec<i64>,
    ended: Vec<bool>,
    idle: Vec<bool>,
    current: i64,
    output_idle: bool,
}

impl WatermarkMerger {
    pub(crate) fn new(channels: usize) -> Self {
        WatermarkMerger {
            per_channel: vec![i64::MIN; channels],
            ended: vec![false; channels],
            idle: vec![false; channels],
            current: i64::MIN,
            output_idle: false,
        }
    }

    /// The new task watermark if it advanced.
    fn advance(&mut self) -> Option<Watermark> {
        let min = (0..self.per_channel.len())
            .filter(|c| !self.ended[*c] && !self.idle[*c])
            .map(|c| self.per_channel[c])
            .min()?;
        (min > self.current).then(|| {
            self.current = min;
            Watermark(min)
        })
    }

    /// Channel `ch` delivered watermark `w` (it is active again).
    pub(crate) fn on_watermark(&mut self, ch: usize, w: Watermark) -> Option<Watermark> {
        self.idle[ch] = false;
        if w.0 > self.per_channel[ch] {
            self.per_channel[ch] = w.0;
        }
        self.advance()
    }

    /// Channel `ch` ended: it no longer holds the watermark back.
    pub(crate) fn on_end(&mut self, ch: usize) -> Option<Watermark> {
        self.ended[ch] = true;
        self.advance()
    }

    /// Channel `ch` became idle (`true`) or active (`false`).
    pub(crate) fn on_idle(&mut self, ch: usize, idle: bool) -> Option<Watermark> {
        self.idle[ch] = idle;
        self.advance()
    }

    /// `Some(all idle)` when the task's own status changed: it is idle when
    /// every open channel is idle, as Flink's `StatusWatermarkValve`.
    pub(crate) fn status_change(&mut self) -> Option<bool> {
        let open: Vec<usize> = (0..self.idle.len()).filter(|c| !self.ended[*c]).collect();
        let all_idle = !open.is_empty() && open.iter().all(|c| self.idle[*c]);
        (all_idle != self.output_idle).then(|| {
            self.output_idle = all_idle;
            all_idle
        })
    }
}

impl<T: RecordSize + Send> GateTask<T> {
    fn on_signal(&mut self, rt: &mut TaskRt, s: BarrierSignal) -> Result<(), TaskError> {
        match s {
            BarrierSignal::Trigger { barrier, alignment } => {
                snapshot_and_ack(rt, None, &mut *self.chain, barrier, alignment)?;
                self.chain.barrier(barrier)
            }
            BarrierSignal::Abort { id, reason } => {
                // As Flink's tasks do: tell downstream to stop aligning for
                // `id`, and decline it to the coordinator.
                self.chain.cancel_checkpoint(id)?;
                let _ = rt.events.send(TaskEvent::Decline {
                    task: rt.task,
                    id,
                    reason,
                });
                Ok(())
            }
        }
    }

    fn control(&mut self, c: Control) -> Result<(), TaskError> {
        match c {
            Control::Done(id, ok) => self.chain.checkpoint_done(id, ok),
            Control::Trigger(_) | Control::Stop => Ok(()),
        }
    }
}

impl<T: RecordSize + Send> TaskBody for GateTask<T> {
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError> {
        if let Some(states) = rt.restored.take() {
            self.chain.restore(&states)?;
        }
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
                GateEvent::Control(c) => self.control(c)?,
                GateEvent::Dry => self.chain.flush()?,
                GateEvent::End => break,
            }
        }
        self.chain.end()?;
        // Take the notifications that were sent before our inputs ended
        // (e.g. the completion of the final checkpoint).
        while let Some(c) = self.gate.try_control() {
            self.control(c)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_minimum_over_open_active_channels() {
        let mut m = WatermarkMerger::new(3);
        assert_eq!(
            m.on_watermark(0, Watermark(10)),
            None,
            "channels 1, 2 unknown"
        );
        assert_eq!(m.on_watermark(1, Watermark(5)), None);
        assert_eq!(m.on_watermark(2, Watermark(7)), Some(Watermark(5)));
        assert_eq!(m.on_watermark(1, Watermark(20)), Some(Watermark(7)));
        // an older watermark on a channel changes nothing
        assert_eq!(m.on_watermark(2, Watermark(3)), None);
        // an ended channel no longer holds it back
        assert_eq!(m.on_end(2), Some(Watermark(10)));
        // an idle channel neither; when it wakes up it holds again, but the
        // task watermark never goes back
        assert_eq!(m.on_idle(0, true), Some(Watermark(20)));
        assert_eq!(m.on_watermark(0, Watermark(12)), None);
        assert_eq!(m.on_watermark(0, Watermark(25)), None);
        assert_eq!(m.on_watermark(1, Watermark(30)), Some(Watermark(25)));
    }

    #[test]
    fn all_channels_ended_or_idle_give_no_watermark() {
        let mut m = WatermarkMerger::new(2);
        assert_eq!(m.on_idle(0, true), None);
        assert_eq!(m.on_end(1), None);
    }
}
