//! Operator chains: the operators of one task, called one after the other
//! with no channel between them (as Flink chains operators joined by
//! `forward` with equal parallelism).
//!
//! A chain is a linked list of [`Link`]s built from the tail: each
//! [`Stage`] owns an operator and the next link; the last link is a
//! [`ChannelWriter`] (to the next task) or the end of a sink.

use crate::checkpoint::task_state::PendingSnapshot;
use crate::checkpoint::task_state::TaskRestore;
use crate::operator::Operator;
use crate::transport::channel::{ChannelWriter, KeyOf};
use crate::types::element::{CheckpointBarrier, CheckpointId, Watermark};
use crate::types::error::TaskError;

/// One link of an operator chain, fed with records of type `I`.
pub(crate) trait Link<I>: Send {
    /// Processes a batch; `batch` is left empty (its allocation reused).
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError>;
    /// The task's watermark advanced.
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError>;
    /// The task became idle (`true`) or active again (`false`): forwarded
    /// downstream as [`crate::barrier::StreamElement::Idle`].
    fn idle(&mut self, idle: bool) -> Result<(), TaskError>;
    /// Collects every operator's state for checkpoint `id`.
    fn snapshot(
        &mut self,
        id: CheckpointId,
        out: &mut Vec<PendingSnapshot>,
    ) -> Result<(), TaskError>;
    /// Restores the operators found in `states` (by operator name).
    fn restore(&mut self, states: &TaskRestore) -> Result<(), TaskError>;
    /// Opens every operator ([`crate::Operator::open`]), once per run
    /// attempt, after the restore and before the first record.
    fn open(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    /// Forwards a barrier downstream (after every record before it).
    fn barrier(&mut self, b: CheckpointBarrier) -> Result<(), TaskError>;
    /// Forwards a cancel-checkpoint marker downstream.
    fn cancel_checkpoint(&mut self, id: CheckpointId) -> Result<(), TaskError>;
    /// Unaligned mode: sends the barrier on every output's priority lane,
    /// ahead of what is queued (never blocks). Default: nothing (no output).
    fn priority_barrier(&mut self, _b: CheckpointBarrier) {}
    /// Unaligned mode: what interrupts the chain's writers' waits for
    /// credits ([`crate::transport::channel::Interrupt`]). Default: nothing.
    fn set_interrupt(&mut self, _interrupt: &crate::transport::channel::Interrupt) {}
    /// Checkpoint `id` completed (`true`) or was aborted (`false`).
    fn checkpoint_done(&mut self, id: CheckpointId, completed: bool) -> Result<(), TaskError>;
    /// The input ran dry: send partial batches.
    fn flush(&mut self) -> Result<(), TaskError>;
    /// All inputs ended: operators emit what is left, then end of partition
    /// goes downstream.
    fn end(&mut self) -> Result<(), TaskError>;
    /// The earliest processing-time timer of the chain's operators.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    /// Fires the processing-time timers due at `now_ns`.
    fn on_processing_time(&mut self, _now_ns: u64) -> Result<(), TaskError> {
        Ok(())
    }
    /// Cooperative mode: true while some output of the chain waits to be
    /// sent ([`ChannelWriter::output_blocked`]). Default: false.
    fn output_blocked(&self) -> bool {
        false
    }
    /// Cooperative mode: sends what waits as far as the channels take it;
    /// true when nothing waits ([`ChannelWriter::drain`]). Default: true.
    fn drain_output(&mut self) -> Result<bool, TaskError> {
        Ok(true)
    }
    /// Cooperative mode: registers what would let waiting output move
    /// ([`ChannelWriter::watch`]). Default: nothing.
    fn watch_output<'a>(&'a self, _sel: &mut crossbeam_channel::Select<'a>) {}
}

/// The earlier of two optional deadlines.
pub(crate) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A chain stage: one operator and the rest of the chain.
pub(crate) struct Stage<I, O, Op> {
    pub(crate) name: String,
    pub(crate) op: Op,
    pub(crate) out: Vec<O>,
    pub(crate) next: Box<dyn Link<O>>,
    /// The task's watermark as this stage last saw it.
    watermark: Option<Watermark>,
    /// The processing-time timer the operator asked for (ns).
    timer: Option<u64>,
    pub(crate) _in: std::marker::PhantomData<fn(I)>,
}

/// The [`crate::Context`] of one operator call: the stage's output batch,
/// the watermark and the timer request, borrowed field by field so the
/// operator itself can be borrowed beside them.
macro_rules! ctx {
    ($stage:ident) => {
        crate::operator::Context::new(&mut $stage.out, $stage.watermark, &mut $stage.timer)
    };
}

impl<I, O, Op: Operator<I, O>> Stage<I, O, Op> {
    pub(crate) fn new(name: String, op: Op, next: Box<dyn Link<O>>) -> Self {
        Stage {
            name,
            op,
            out: Vec::new(),
            next,
            watermark: None,
            timer: None,
            _in: std::marker::PhantomData,
        }
    }

    fn op_err(&self, what: &'static str, e: crate::types::error::BoxError) -> TaskError {
        TaskError::from_operator(&self.name, what, e)
    }

    fn emit(&mut self) -> Result<(), TaskError> {
        if !self.out.is_empty() {
            self.next.push(&mut self.out)?;
            self.out.clear();
        }
        Ok(())
    }
}

impl<I, O: Send, Op: Operator<I, O>> Link<I> for Stage<I, O, Op> {
    #[inline]
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        if let Err(e) = self.op.process(batch, &mut ctx!(self)) {
            return Err(self.op_err("process", e));
        }
        batch.clear();
        self.emit()
    }

    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        self.watermark = Some(w);
        if let Err(e) = self.op.on_watermark(w, &mut ctx!(self)) {
            return Err(self.op_err("on_watermark", e));
        }
        self.emit()?;
        self.next.watermark(w)
    }

    fn idle(&mut self, idle: bool) -> Result<(), TaskError> {
        self.next.idle(idle)
    }

    fn snapshot(
        &mut self,
        id: CheckpointId,
        out: &mut Vec<PendingSnapshot>,
    ) -> Result<(), TaskError> {
        match self.op.snapshot_state_async(id) {
            Ok(Some(snapshot)) => out.push(PendingSnapshot {
                operator: self.name.clone(),
                snapshot,
            }),
            Ok(None) => {}
            Err(e) => return Err(self.op_err("snapshot_state", e)),
        }
        self.next.snapshot(id, out)
    }

    fn restore(&mut self, states: &TaskRestore) -> Result<(), TaskError> {
        if let Err(e) = states.restore_into(&self.name, &mut self.op) {
            return Err(self.op_err("restore_state", e));
        }
        self.next.restore(states)
    }

    fn barrier(&mut self, b: CheckpointBarrier) -> Result<(), TaskError> {
        self.next.barrier(b)
    }

    fn priority_barrier(&mut self, b: CheckpointBarrier) {
        self.next.priority_barrier(b)
    }

    fn set_interrupt(&mut self, interrupt: &crate::transport::channel::Interrupt) {
        self.next.set_interrupt(interrupt)
    }

    fn cancel_checkpoint(&mut self, id: CheckpointId) -> Result<(), TaskError> {
        self.next.cancel_checkpoint(id)
    }

    fn checkpoint_done(&mut self, id: CheckpointId, completed: bool) -> Result<(), TaskError> {
        if let Err((call, e)) = crate::operator::notify(&mut self.op, id, completed) {
            return Err(self.op_err(call, e));
        }
        self.next.checkpoint_done(id, completed)
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        self.next.flush()
    }

    fn end(&mut self) -> Result<(), TaskError> {
        if let Err(e) = self.op.end_of_input(&mut ctx!(self)) {
            return Err(self.op_err("end_of_input", e));
        }
        self.emit()?;
        self.next.end()
    }

    fn open(&mut self) -> Result<(), TaskError> {
        if let Err(e) = self.op.open(&mut ctx!(self)) {
            return Err(self.op_err("open", e));
        }
        self.emit()?;
        self.next.open()
    }

    fn next_timer_ns(&self) -> Option<u64> {
        earliest(self.timer, self.next.next_timer_ns())
    }
    #[inline]
    fn output_blocked(&self) -> bool {
        self.next.output_blocked()
    }
    fn drain_output(&mut self) -> Result<bool, TaskError> {
        self.next.drain_output()
    }
    fn watch_output<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) {
        self.next.watch_output(sel)
    }

    fn on_processing_time(&mut self, now_ns: u64) -> Result<(), TaskError> {
        if self.timer.is_some_and(|t| t <= now_ns) {
            // A fired request is spent: the operator asks again if it
            // needs a later one.
            self.timer = None;
            if let Err(e) = self.op.on_processing_time(now_ns, &mut ctx!(self)) {
                return Err(self.op_err("on_processing_time", e));
            }
            self.emit()?;
        }
        self.next.on_processing_time(now_ns)
    }
}

impl<T: Clone + Send, K: KeyOf<T> + Clone> Link<T> for ChannelWriter<T, K> {
    #[inline]
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        ChannelWriter::push(self, batch)
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        ChannelWriter::watermark(self, w)
    }
    fn idle(&mut self, idle: bool) -> Result<(), TaskError> {
        ChannelWriter::idle(self, idle)
    }
    fn snapshot(
        &mut self,
        _id: CheckpointId,
        _out: &mut Vec<PendingSnapshot>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn restore(&mut self, _states: &TaskRestore) -> Result<(), TaskError> {
        Ok(())
    }
    fn barrier(&mut self, b: CheckpointBarrier) -> Result<(), TaskError> {
        ChannelWriter::barrier(self, b)
    }
    fn priority_barrier(&mut self, b: CheckpointBarrier) {
        ChannelWriter::priority_barrier(self, b)
    }
    fn set_interrupt(&mut self, interrupt: &crate::transport::channel::Interrupt) {
        ChannelWriter::set_interrupt(self, interrupt.clone())
    }
    fn cancel_checkpoint(&mut self, id: CheckpointId) -> Result<(), TaskError> {
        ChannelWriter::cancel_checkpoint(self, id)
    }
    fn checkpoint_done(&mut self, _id: CheckpointId, _completed: bool) -> Result<(), TaskError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        ChannelWriter::flush(self)
    }
    fn end(&mut self) -> Result<(), TaskError> {
        ChannelWriter::end_of_partition(self)
    }
    #[inline]
    fn output_blocked(&self) -> bool {
        ChannelWriter::output_blocked(self)
    }
    fn drain_output(&mut self) -> Result<bool, TaskError> {
        ChannelWriter::drain(self)
    }
    fn watch_output<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) {
        ChannelWriter::watch(self, sel)
    }
}

/// The end of a sink's chain: it receives nothing (sinks emit no records).
pub(crate) struct NoOutput;

impl Link<()> for NoOutput {
    fn push(&mut self, batch: &mut Vec<()>) -> Result<(), TaskError> {
        batch.clear();
        Ok(())
    }
    fn watermark(&mut self, _w: Watermark) -> Result<(), TaskError> {
        Ok(())
    }
    fn idle(&mut self, _idle: bool) -> Result<(), TaskError> {
        Ok(())
    }
    fn snapshot(
        &mut self,
        _id: CheckpointId,
        _out: &mut Vec<PendingSnapshot>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn restore(&mut self, _states: &TaskRestore) -> Result<(), TaskError> {
        Ok(())
    }
    fn barrier(&mut self, _b: CheckpointBarrier) -> Result<(), TaskError> {
        Ok(())
    }
    fn cancel_checkpoint(&mut self, _id: CheckpointId) -> Result<(), TaskError> {
        Ok(())
    }
    fn checkpoint_done(&mut self, _id: CheckpointId, _completed: bool) -> Result<(), TaskError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn end(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
}

/// Both branches of a [`crate::Stream::split`]: every call goes to both;
/// records are cloned for the first.
pub(crate) struct Tee<T> {
    pub(crate) a: Box<dyn Link<T>>,
    pub(crate) b: Box<dyn Link<T>>,
}

impl<T: Clone + Send> Link<T> for Tee<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let mut copy = batch.clone();
        self.a.push(&mut copy)?;
        self.b.push(batch)
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        self.a.watermark(w)?;
        self.b.watermark(w)
    }
    fn idle(&mut self, idle: bool) -> Result<(), TaskError> {
        self.a.idle(idle)?;
        self.b.idle(idle)
    }
    fn snapshot(
        &mut self,
        id: CheckpointId,
        out: &mut Vec<PendingSnapshot>,
    ) -> Result<(), TaskError> {
        self.a.snapshot(id, out)?;
        self.b.snapshot(id, out)
    }
    fn restore(&mut self, states: &TaskRestore) -> Result<(), TaskError> {
        self.a.restore(states)?;
        self.b.restore(states)
    }
    fn open(&mut self) -> Result<(), TaskError> {
        self.a.open()?;
        self.b.open()
    }
    fn barrier(&mut self, b: CheckpointBarrier) -> Result<(), TaskError> {
        self.a.barrier(b)?;
        self.b.barrier(b)
    }
    fn priority_barrier(&mut self, b: CheckpointBarrier) {
        self.a.priority_barrier(b);
        self.b.priority_barrier(b)
    }
    fn set_interrupt(&mut self, interrupt: &crate::transport::channel::Interrupt) {
        self.a.set_interrupt(interrupt);
        self.b.set_interrupt(interrupt)
    }
    fn cancel_checkpoint(&mut self, id: CheckpointId) -> Result<(), TaskError> {
        self.a.cancel_checkpoint(id)?;
        self.b.cancel_checkpoint(id)
    }
    fn checkpoint_done(&mut self, id: CheckpointId, completed: bool) -> Result<(), TaskError> {
        self.a.checkpoint_done(id, completed)?;
        self.b.checkpoint_done(id, completed)
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        self.a.flush()?;
        self.b.flush()
    }
    fn end(&mut self) -> Result<(), TaskError> {
        self.a.end()?;
        self.b.end()
    }
    fn next_timer_ns(&self) -> Option<u64> {
        earliest(self.a.next_timer_ns(), self.b.next_timer_ns())
    }
    fn output_blocked(&self) -> bool {
        self.a.output_blocked() || self.b.output_blocked()
    }
    fn drain_output(&mut self) -> Result<bool, TaskError> {
        let a = self.a.drain_output()?;
        Ok(self.b.drain_output()? && a)
    }
    fn watch_output<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) {
        self.a.watch_output(sel);
        self.b.watch_output(sel)
    }
    fn on_processing_time(&mut self, now_ns: u64) -> Result<(), TaskError> {
        self.a.on_processing_time(now_ns)?;
        self.b.on_processing_time(now_ns)
    }
}
