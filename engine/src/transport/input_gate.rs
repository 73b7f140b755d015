//! The input gate: the N input channels of one task, read fairly, through
//! the task's barrier handler.
//!
//! Reading order: elements released by an alignment are replayed first
//! (rule 2 of the barrier contract); then the channels are polled
//! round-robin, one element at a time. A channel blocked by an alignment is
//! still read, its elements going to the handler's blocker, while the
//! blocker has room; once the handler reports the blocker full, blocked
//! channels are skipped, so their bounded channels fill and push back
//! upstream (as Arroyo and RisingWave align). With a blocker capacity of 0
//! that is pure blocking, as Flink 1.11+ aligns.
//!
//! When nothing is ready the gate backs off by its [`WaitStrategy`]; tasks
//! outnumber cores on small machines, so the default never burns a core.
//!
//! **Unaligned mode** (`InputGate::next_unaligned`, the handler's rules in
//! `barrier/unaligned.rs`), in this order on every call:
//! 1. control messages;
//! 2. the priority lanes: a barrier there goes to the handler at once
//!    (a first barrier triggers the snapshot);
//! 3. while a checkpoint's channel state is open, **read-ahead**: each
//!    channel whose state is open is read up to its in-band barrier (or end
//!    of partition) through the handler, every element that is channel
//!    state copied into the recording, and the elements handed on queued in
//!    the gate's *ready* queue, so that the state is complete without
//!    waiting for the operator to process what it holds;
//! 4. the ready queue, in order;
//! 5. the channels, round-robin: first each channel's restored channel
//!    state (replayed before anything new on that channel), then its data
//!    lane.
//!
//! At a trigger, what sits in the ready queue (read, not yet processed)
//! starts each channel's state. A credit goes back to the producer when an
//! element is handed to the task, not when it is read (`crate::channel`),
//! so reading ahead never lets a producer send more.

use crate::barrier::{AnyHandler, BarrierHandler, BarrierSignal, ChannelSet};
use crate::transport::channel::{takes_credit, BatchReturn, ConsumerLanes};
use crate::types::control::Control;
use crate::types::element::{CheckpointId, RecordSize, StreamElement};
use crate::types::error::TaskError;
use crate::types::metrics::TaskMetrics;
use crossbeam_channel::{Receiver, Select, TryRecvError};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;

/// Channel state per input channel: its elements in channel order
/// (records batches, watermarks, idle markers only).
pub(crate) type ChannelState<T> = Vec<Vec<StreamElement<T>>>;

/// How an idle task waits for input.
///
/// Measured costs on the 2-core reference machine (`workloads.md`): waking
/// a parked thread costs ~11 µs plus ~10 µs of kernel CPU, a record between
/// two awake threads ~0.17 µs, and busy-spinning 5 threads on 2 cores
/// collapses latency, so the default parks after a short spin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Park at once (block in the OS until an element arrives).
    Park,
    /// Spin `spins` polls, then yield a few times, then park.
    SpinPark {
        /// Polls of all channels before parking.
        spins: u32,
    },
    /// Never park: spin, yielding the core every [`SPIN_YIELD_EVERY`] polls.
    /// Only for tasks that each have a core of their own.
    Spin,
}

/// Spin polls before yielding under [`WaitStrategy::Spin`]: 1024 polls of
/// an empty channel take ~10–20 µs, about one scheduler wake-up, so a
/// spinning task gives the core away at that rate at most.
pub const SPIN_YIELD_EVERY: u32 = 1024;

/// Default spins of [`WaitStrategy::SpinPark`]: 100 polls (~1–2 µs), enough
/// to catch the next batch of a busy producer without a park/unpark pair
/// (~20 µs of CPU), short enough not to starve other tasks on 2 cores.
pub const DEFAULT_SPINS: u32 = 100;

/// Yields between spinning and parking under [`WaitStrategy::SpinPark`].
const YIELDS_BEFORE_PARK: u32 = 2;

impl Default for WaitStrategy {
    fn default() -> Self {
        WaitStrategy::SpinPark {
            spins: DEFAULT_SPINS,
        }
    }
}

impl std::str::FromStr for WaitStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "park" => Ok(WaitStrategy::Park),
            "spin-park" => Ok(WaitStrategy::default()),
            "spin" => Ok(WaitStrategy::Spin),
            other => Err(format!(
                "unknown wait strategy '{other}' (expected park, spin-park or spin)"
            )),
        }
    }
}

/// What the gate hands to its task.
pub(crate) enum GateEvent<T> {
    /// An element for the operator chain (records, watermark, end of
    /// partition), after the handler's signals (already in `signals`).
    Element(usize, StreamElement<T>),
    /// Only signals (a barrier or cancel marker was consumed, or an element
    /// was held).
    Signals,
    /// A control message from the job.
    Control(Control),
    /// Nothing arrived for now: flush partial outputs before waiting.
    Dry,
    /// The deadline passed while waiting (a processing-time timer is due).
    Deadline,
    /// Every channel ended and nothing is left to replay.
    End,
    /// Cooperative mode ([`InputGate::cooperative`]): nothing is ready; the
    /// gate would wait here. The worker waits on [`InputGate::watch`].
    Idle,
}

/// The input side of a task (see the module docs).
pub(crate) struct InputGate<T> {
    receivers: Vec<Receiver<StreamElement<T>>>,
    /// Per channel, the way back for emptied batch buffers
    /// ([`InputGate::recycle`]); empty when the gate was built without.
    returns: Vec<BatchReturn<T>>,
    pub(crate) handler: AnyHandler<T>,
    ended: ChannelSet,
    num_ended: usize,
    next: usize,
    wait: WaitStrategy,
    control: Receiver<Control>,
    cancel: Receiver<()>,
    metrics: Arc<TaskMetrics>,
    /// True after `Dry` was returned, so the next empty poll waits.
    dry: bool,
    upstream_names: Vec<Arc<str>>,
    /// Unaligned mode only.
    unaligned: Option<UnalignedInput<T>>,
    /// Runs on a cooperative worker: never waits, returns
    /// [`GateEvent::Idle`] instead.
    cooperative: bool,
}

/// The unaligned-mode side of an input gate (see the module docs).
struct UnalignedInput<T> {
    /// Per channel, its priority lane and the way back for its credits.
    lanes: Vec<ConsumerLanes>,
    /// Read ahead through the handler, not yet handed to the task:
    /// `(channel, element, took a credit)`.
    ready: VecDeque<(usize, StreamElement<T>, bool)>,
    /// Per channel, restored channel state not yet replayed.
    restored: Vec<VecDeque<StreamElement<T>>>,
    /// The channel state being recorded, for the pending checkpoint.
    recording: Option<(CheckpointId, ChannelState<T>)>,
    /// A complete channel state, until the task takes it.
    complete: Option<(CheckpointId, ChannelState<T>)>,
}

impl<T: RecordSize> InputGate<T> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        receivers: Vec<Receiver<StreamElement<T>>>,
        upstream_names: Vec<Arc<str>>,
        handler: AnyHandler<T>,
        wait: WaitStrategy,
        control: Receiver<Control>,
        cancel: Receiver<()>,
        metrics: Arc<TaskMetrics>,
    ) -> Self {
        let n = receivers.len();
        InputGate {
            receivers,
            returns: Vec::new(),
            handler,
            ended: ChannelSet::new(n),
            num_ended: 0,
            next: 0,
            wait,
            control,
            cancel,
            metrics,
            dry: false,
            upstream_names,
            unaligned: None,
            cooperative: false,
        }
    }

    /// The gate runs on a cooperative worker ([`crate::JobConfig::workers`]):
    /// where it would spin or park, [`InputGate::next`] returns
    /// [`GateEvent::Idle`], and the worker waits on [`InputGate::watch`].
    pub(crate) fn cooperative(mut self) -> Self {
        self.cooperative = true;
        self
    }

    /// The channels' return lanes, one per channel in channel order (see
    /// [`InputGate::recycle`]).
    ///
    /// # Panics
    /// When the count is wrong.
    pub(crate) fn with_returns(mut self, returns: Vec<BatchReturn<T>>) -> Self {
        assert_eq!(
            returns.len(),
            self.receivers.len(),
            "one return lane per channel"
        );
        self.returns = returns;
        self
    }

    /// Gives the vector of a records batch from channel `ch`, once its
    /// records are taken, back to the channel's producer for a later batch
    /// ([`BatchReturn::give_back`]: emptied, never blocks); drops it when
    /// the gate has no return lanes.
    #[inline]
    pub(crate) fn recycle(&self, ch: usize, batch: Vec<T>) {
        if let Some(back) = self.returns.get(ch) {
            back.give_back(batch);
        }
    }

    /// Unaligned mode: the channels' priority lanes and credits, one per
    /// channel in channel order.
    ///
    /// # Panics
    /// When the handler is not the unaligned one, or the count is wrong.
    pub(crate) fn with_lanes(mut self, lanes: Vec<ConsumerLanes>) -> Self {
        assert!(
            self.handler.as_unaligned().is_some(),
            "lanes need the unaligned handler"
        );
        assert_eq!(
            lanes.len(),
            self.receivers.len(),
            "one lane set per channel"
        );
        let n = lanes.len();
        self.unaligned = Some(UnalignedInput {
            lanes,
            ready: VecDeque::new(),
            restored: (0..n).map(|_| VecDeque::new()).collect(),
            recording: None,
            complete: None,
        });
        self
    }

    /// Unaligned mode: the restored channel state, replayed on each channel
    /// before its new input.
    ///
    /// # Errors
    /// When the gate is not in unaligned mode or `state` is not one list
    /// per channel (the checkpoint was taken by another job graph).
    pub(crate) fn restore_channel_state(&mut self, state: ChannelState<T>) -> Result<(), String> {
        let n = self.receivers.len();
        let Some(u) = self.unaligned.as_mut() else {
            return Err("channel state restored into a task that is not in unaligned mode".into());
        };
        if state.len() != n {
            return Err(format!(
                "channel state for {} input channels, but the task has {n}",
                state.len()
            ));
        }
        for (queue, items) in u.restored.iter_mut().zip(state) {
            queue.extend(items);
        }
        Ok(())
    }

    /// Unaligned mode: the complete channel state of checkpoint `id`, once
    /// its `ChannelStateDone` was signalled.
    pub(crate) fn take_channel_state(&mut self, id: CheckpointId) -> Option<ChannelState<T>> {
        let u = self.unaligned.as_mut()?;
        match u.complete.take() {
            Some((c, state)) if c == id => Some(state),
            other => {
                u.complete = other;
                None
            }
        }
    }

    /// Unaligned mode: the task gave up checkpoint `id` (rule 17): its
    /// recording stops.
    pub(crate) fn abort_unaligned(&mut self, id: CheckpointId) {
        if let (Some(u), Some(h)) = (self.unaligned.as_mut(), self.handler.as_unaligned_mut()) {
            h.abort(id);
            if u.recording.as_ref().is_some_and(|(c, _)| *c <= id) {
                u.recording = None;
            }
            if u.complete.as_ref().is_some_and(|(c, _)| *c <= id) {
                u.complete = None;
            }
        }
    }

    /// Unaligned mode: clones of the channels' priority lanes, for the
    /// task's writers to watch while they wait for credits.
    pub(crate) fn priority_receivers(
        &self,
    ) -> Vec<Receiver<crate::types::element::CheckpointBarrier>> {
        self.unaligned
            .iter()
            .flat_map(|u| u.lanes.iter().map(|l| l.priority.clone()))
            .collect()
    }

    /// True in unaligned mode.
    pub(crate) fn is_unaligned(&self) -> bool {
        self.unaligned.is_some()
    }

    /// The number of input channels.
    pub(crate) fn num_channels(&self) -> usize {
        self.receivers.len()
    }

    /// A pending control message, if any.
    pub(crate) fn try_control(&self) -> Option<Control> {
        self.control.try_recv().ok()
    }

    /// Total elements queued in the input channels now.
    pub(crate) fn queued(&self) -> usize {
        self.receivers.iter().map(|r| r.len()).sum()
    }

    fn readable(&self, ch: usize) -> bool {
        !(self.ended.contains(ch) || self.handler.is_blocked(ch) && self.handler.blocker_full())
    }

    /// One round-robin pass over the channels.
    fn poll_channels(&mut self) -> Result<Option<(usize, StreamElement<T>)>, TaskError> {
        let n = self.receivers.len();
        for i in 0..n {
            let ch = (self.next + i) % n;
            if !self.readable(ch) {
                continue;
            }
            match self.receivers[ch].try_recv() {
                Ok(el) => {
                    self.next = ch + 1;
                    if let StreamElement::Records(b) = &el {
                        self.metrics.add_in(b.len() as u64);
                    }
                    return Ok(Some((ch, el)));
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    return Err(TaskError::Disconnected(self.upstream_names[ch].to_string()))
                }
            }
        }
        Ok(None)
    }

    /// Registers in `sel` what would give the gate something to do: the
    /// readable channels (with `data`), the priority lanes (unaligned
    /// mode) and the control channel. `data` false: events only (a
    /// cooperative task whose output is blocked takes no records).
    pub(crate) fn watch<'a>(&'a self, sel: &mut Select<'a>, data: bool) {
        for ch in 0..self.receivers.len() {
            // Unaligned mode: a channel blocked by an aligned barrier is not
            // read (rule 18), its priority lane is.
            let blocked = self.unaligned.is_some() && self.handler.is_blocked(ch);
            if data && self.readable(ch) && !blocked {
                sel.recv(&self.receivers[ch]);
            }
            if let Some(u) = self.unaligned.as_ref().filter(|_| !self.ended.contains(ch)) {
                sel.recv(&u.lanes[ch].priority);
            }
        }
        sel.recv(&self.control);
    }

    /// Cooperative mode, while the task's output is blocked: only a control
    /// message or (unaligned mode) the priority lanes' barriers, so that a
    /// trigger is taken at once (the task is at a batch boundary: its
    /// operator finished the batch whose output waits).
    pub(crate) fn next_event(&mut self, signals: &mut Vec<BarrierSignal>) -> GateEvent<T>
    where
        T: Clone,
    {
        if let Ok(c) = self.control.try_recv() {
            return GateEvent::Control(c);
        }
        if self.unaligned.is_some() && self.poll_priority(signals) {
            return GateEvent::Signals;
        }
        GateEvent::Idle
    }

    /// Blocks until a readable channel (or, in unaligned mode, a priority
    /// lane), the control channel or the cancel channel is ready (without
    /// taking anything), or until `deadline_ns`; returns false when the
    /// deadline passed.
    fn park(&mut self, deadline_ns: Option<u64>) -> Result<bool, TaskError> {
        let start = crate::util::clock::now_ns();
        let mut sel = Select::new();
        self.watch(&mut sel, true);
        let cancel_i = sel.recv(&self.cancel);
        let ready = match deadline_ns {
            Some(d) => sel.ready_deadline(crate::util::clock::instant_of(d)).ok(),
            None => Some(sel.ready()),
        };
        self.metrics
            .add_idle_ns(crate::util::clock::now_ns() - start);
        match ready {
            None => Ok(false),
            Some(i)
                if i == cancel_i
                    && matches!(self.cancel.try_recv(), Err(TryRecvError::Disconnected)) =>
            {
                Err(TaskError::Cancelled)
            }
            Some(_) => Ok(true),
        }
    }

    /// Where the gate would start to wait: runs one slice of the task
    /// thread's own checkpoint work (true), unless it has none ready or
    /// `deadline_ns` (a timer of the task's) passed.
    fn idle_slice(deadline_ns: Option<u64>) -> bool {
        deadline_ns.is_none_or(|d| crate::util::clock::now_ns() < d)
            && crate::util::background::run_idle_slice()
    }

    /// The next thing for the task to do. Signals of the barrier handler are
    /// appended to `signals`; act on them before the returned element. When
    /// idle past `deadline_ns`, returns [`GateEvent::Deadline`].
    pub(crate) fn next(
        &mut self,
        signals: &mut Vec<BarrierSignal>,
        deadline_ns: Option<u64>,
    ) -> Result<GateEvent<T>, TaskError>
    where
        T: Clone,
    {
        if self.unaligned.is_some() {
            return self.next_unaligned(signals, deadline_ns);
        }
        let mut spins = 0u32;
        let mut yields = 0u32;
        loop {
            let (ch, el) = if let Some(x) = self.handler.next_replay() {
                x
            } else {
                if let Ok(c) = self.control.try_recv() {
                    return Ok(GateEvent::Control(c));
                }
                match self.poll_channels()? {
                    Some(x) => x,
                    None => {
                        if self.num_ended == self.receivers.len() {
                            // Anything still held (it cannot be, as every
                            // channel is then aligned or closed, but the
                            // handler decides) is replayed before the end.
                            self.handler.end_of_input();
                            if self.handler.has_replay() {
                                continue;
                            }
                            return Ok(GateEvent::End);
                        }
                        if !self.dry {
                            self.dry = true;
                            self.metrics.set_queued(0);
                            return Ok(GateEvent::Dry);
                        }
                        if self.cooperative {
                            return Ok(GateEvent::Idle);
                        }
                        // A task thread that runs its own checkpoint work
                        // runs a slice of it (≤ 50 µs at yield points)
                        // where it would start to wait, then looks at its
                        // channels again.
                        if spins == 0 && yields == 0 && Self::idle_slice(deadline_ns) {
                            continue;
                        }
                        let parked = match self.wait {
                            WaitStrategy::Park => self.park(deadline_ns)?,
                            WaitStrategy::SpinPark { spins: max } => {
                                if spins < max {
                                    spins += 1;
                                    std::hint::spin_loop();
                                    true
                                } else if yields < YIELDS_BEFORE_PARK {
                                    yields += 1;
                                    std::thread::yield_now();
                                    true
                                } else {
                                    self.park(deadline_ns)?
                                }
                            }
                            WaitStrategy::Spin => {
                                spins += 1;
                                if spins % SPIN_YIELD_EVERY == 0 {
                                    std::thread::yield_now();
                                    if matches!(
                                        self.cancel.try_recv(),
                                        Err(TryRecvError::Disconnected)
                                    ) {
                                        return Err(TaskError::Cancelled);
                                    }
                                    deadline_ns.is_none_or(|d| crate::util::clock::now_ns() < d)
                                } else {
                                    std::hint::spin_loop();
                                    true
                                }
                            }
                        };
                        if !parked {
                            return Ok(GateEvent::Deadline);
                        }
                        continue;
                    }
                }
            };
            self.dry = false;
            if matches!(el, StreamElement::EndOfPartition) && self.ended.insert(ch) {
                self.num_ended += 1;
            }
            let now = if el.is_event() {
                crate::util::clock::now_ns()
            } else {
                0
            };
            return Ok(match self.handler.on_element(ch, el, now, signals) {
                Some(el) => GateEvent::Element(ch, el),
                None => GateEvent::Signals,
            });
        }
    }
}

/// Unaligned mode (module docs, steps 1-5).
impl<T: RecordSize + Clone> InputGate<T> {
    fn next_unaligned(
        &mut self,
        signals: &mut Vec<BarrierSignal>,
        deadline_ns: Option<u64>,
    ) -> Result<GateEvent<T>, TaskError> {
        let mut spins = 0u32;
        loop {
            if let Ok(c) = self.control.try_recv() {
                return Ok(GateEvent::Control(c));
            }
            if self.poll_priority(signals) || self.read_ahead(signals)? {
                return Ok(GateEvent::Signals);
            }
            if let Some((ch, el, credited)) = self.u().ready.pop_front() {
                self.hand_out(ch, credited);
                return Ok(GateEvent::Element(ch, el));
            }
            let n = self.receivers.len();
            let mut read = None;
            for i in 0..n {
                let ch = (self.next + i) % n;
                // Blocked by an aligned barrier (rule 18): not read.
                if self.handler.is_blocked(ch) {
                    continue;
                }
                if let Some(x) = self.read_channel(ch)? {
                    self.next = ch + 1;
                    read = Some((ch, x));
                    break;
                }
            }
            let Some((ch, (el, credited))) = read else {
                if self.num_ended == n {
                    self.handler.end_of_input();
                    return Ok(GateEvent::End);
                }
                if !self.dry {
                    self.dry = true;
                    self.metrics.set_queued(0);
                    return Ok(GateEvent::Dry);
                }
                if self.cooperative {
                    return Ok(GateEvent::Idle);
                }
                // Checkpoint work of the task's own first (as `next`).
                if spins == 0 && Self::idle_slice(deadline_ns) {
                    continue;
                }
                // A short spin (as `SpinPark`), then park on every lane.
                if spins < DEFAULT_SPINS && self.wait != WaitStrategy::Park {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
                if !self.park(deadline_ns)? {
                    return Ok(GateEvent::Deadline);
                }
                continue;
            };
            self.dry = false;
            let passed = self.admit(ch, el, signals);
            self.hand_out(ch, credited);
            return Ok(match passed {
                Some(el) => GateEvent::Element(ch, el),
                None => GateEvent::Signals,
            });
        }
    }

    fn u(&mut self) -> &mut UnalignedInput<T> {
        self.unaligned.as_mut().expect("unaligned mode")
    }

    /// An element goes to the task: its credit goes back (step 4/5).
    fn hand_out(&mut self, ch: usize, credited: bool) {
        if credited {
            // Never full (at most `capacity` credits exist); a producer
            // that is gone needs none.
            let _ = self.u().lanes[ch].credits.try_send(());
        }
    }

    /// Step 2: every barrier waiting on a priority lane goes to the
    /// handler. True when it signalled.
    fn poll_priority(&mut self, signals: &mut Vec<BarrierSignal>) -> bool {
        let before = signals.len();
        for ch in 0..self.receivers.len() {
            if self.ended.contains(ch) {
                continue;
            }
            while let Ok(b) = self.u().lanes[ch].priority.try_recv() {
                let now = crate::util::clock::now_ns();
                let h = self.handler.as_unaligned_mut().expect("unaligned mode");
                h.on_priority(ch, b, now, signals);
                self.bookkeep(before, signals);
            }
        }
        signals.len() > before
    }

    /// Step 3: reads every channel whose state is open up to its in-band
    /// barrier (or end of partition), as far as it holds elements now, one
    /// element per channel in turn: the ready queue is processed in order,
    /// so reading one channel's whole lane first would hand the operator
    /// that channel's backlog before any other's, and the other producers
    /// would get no credit back meanwhile (measured under W4: a sink reading
    /// 64 batches of one channel ahead kept its other producer, and that
    /// one's sources, waiting up to 0.7 s for a credit, so their snapshots
    /// started that late). True when the handler signalled (the task acts
    /// on it first).
    fn read_ahead(&mut self, signals: &mut Vec<BarrierSignal>) -> Result<bool, TaskError> {
        if self
            .handler
            .as_unaligned()
            .and_then(|h| h.pending())
            .is_none()
        {
            return Ok(false);
        }
        let n = self.receivers.len();
        loop {
            let mut read_any = false;
            for ch in 0..n {
                if !self.state_open(ch) {
                    continue;
                }
                let Some((el, credited)) = self.read_channel(ch)? else {
                    continue;
                };
                read_any = true;
                match self.admit(ch, el, signals) {
                    Some(el) => self.u().ready.push_back((ch, el, credited)),
                    None => self.hand_out(ch, credited),
                }
                if !signals.is_empty() {
                    return Ok(true);
                }
            }
            if !read_any {
                return Ok(false);
            }
        }
    }

    fn state_open(&self, ch: usize) -> bool {
        self.handler
            .as_unaligned()
            .is_some_and(|h| h.channel_state_open(ch))
    }

    /// The next element of channel `ch`: its restored state first, then its
    /// data lane. `(element, took a credit)`.
    fn read_channel(&mut self, ch: usize) -> Result<Option<(StreamElement<T>, bool)>, TaskError> {
        if let Some(el) = self.u().restored[ch].pop_front() {
            return Ok(Some((el, false)));
        }
        if self.ended.contains(ch) {
            return Ok(None);
        }
        match self.receivers[ch].try_recv() {
            Ok(el) => {
                match &el {
                    StreamElement::Records(b) => self.metrics.add_in(b.len() as u64),
                    StreamElement::EndOfPartition if self.ended.insert(ch) => self.num_ended += 1,
                    _ => {}
                }
                let credited = takes_credit(&el);
                Ok(Some((el, credited)))
            }
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => {
                Err(TaskError::Disconnected(self.upstream_names[ch].to_string()))
            }
        }
    }

    /// Feeds one element read from channel `ch` to the handler, copying it
    /// into the recording first when it is channel state (rule 12). The
    /// clock is read for events only, as in the aligned path.
    fn admit(
        &mut self,
        ch: usize,
        el: StreamElement<T>,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>> {
        let now = if el.is_event() {
            crate::util::clock::now_ns()
        } else {
            0
        };
        if takes_credit(&el) && self.state_open(ch) {
            if let Some((_, state)) = self.u().recording.as_mut() {
                state[ch].push(el.clone());
            }
        }
        let before = signals.len();
        let passed = self.handler.on_element(ch, el, now, signals);
        self.bookkeep(before, signals);
        passed
    }

    /// Follows the handler's new signals (from `signals[from..]`): a
    /// trigger starts a recording with what the ready queue holds (read,
    /// not processed: it precedes the barrier on its channel), a completed
    /// state is kept for the task, an abort drops the recording.
    fn bookkeep(&mut self, from: usize, signals: &[BarrierSignal]) {
        let n = self.receivers.len();
        let u = self.unaligned.as_mut().expect("unaligned mode");
        for s in &signals[from..] {
            match *s {
                BarrierSignal::Trigger { barrier, .. } => {
                    let mut state: ChannelState<T> = (0..n).map(|_| Vec::new()).collect();
                    for (ch, el, _) in &u.ready {
                        if takes_credit(el) {
                            state[*ch].push(el.clone());
                        }
                    }
                    u.recording = Some((barrier.id, state));
                }
                BarrierSignal::ChannelStateDone { id } => {
                    if u.recording.as_ref().is_some_and(|(c, _)| *c == id) {
                        u.complete = u.recording.take();
                    }
                }
                BarrierSignal::Abort { id, .. } => {
                    if u.recording.as_ref().is_some_and(|(c, _)| *c == id) {
                        u.recording = None;
                    }
                }
            }
        }
    }
}
