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

use crate::barrier::{AnyHandler, BarrierHandler, BarrierSignal, ChannelSet};
use crate::element::{RecordSize, StreamElement};
use crate::error::TaskError;
use crate::metrics::TaskMetrics;
use crate::protocol::Control;
use crossbeam_channel::{Receiver, Select, TryRecvError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
}

/// The input side of a task (see the module docs).
pub(crate) struct InputGate<T> {
    receivers: Vec<Receiver<StreamElement<T>>>,
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
        }
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

    /// Blocks until a readable channel, the control channel or the cancel
    /// channel is ready (without taking anything), or until `deadline_ns`;
    /// returns false when the deadline passed.
    fn park(&mut self, deadline_ns: Option<u64>) -> Result<bool, TaskError> {
        let start = crate::clock::now_ns();
        let mut sel = Select::new();
        for ch in 0..self.receivers.len() {
            if self.readable(ch) {
                sel.recv(&self.receivers[ch]);
            }
        }
        sel.recv(&self.control);
        let cancel_i = sel.recv(&self.cancel);
        let ready = match deadline_ns {
            Some(d) => sel.ready_deadline(crate::clock::instant_of(d)).ok(),
            None => Some(sel.ready()),
        };
        self.metrics.add_idle_ns(crate::clock::now_ns() - start);
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

    /// The next thing for the task to do. Signals of the barrier handler are
    /// appended to `signals`; act on them before the returned element. When
    /// idle past `deadline_ns`, returns [`GateEvent::Deadline`].
    pub(crate) fn next(
        &mut self,
        signals: &mut Vec<BarrierSignal>,
        deadline_ns: Option<u64>,
    ) -> Result<GateEvent<T>, TaskError> {
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
                                    deadline_ns.is_none_or(|d| crate::clock::now_ns() < d)
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
                crate::clock::now_ns()
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
