//! The exactly-once barrier handler: aligned checkpoints.
//!
//! # The rules, each in one place
//! Semantics of Flink 1.8's `BarrierBuffer` (in-memory buffering), with the
//! Flink 1.9 fix for cancel markers (FLINK-12421-era `BarrierBuffer`: each
//! checkpoint reported at most once) and FLIP-147's rule for ended channels.
//! The numbers are those of `testdata/scenarios/README.md`.
//!
//! 1. **Block** ([`Aligner::on_element`], first branch): a channel that
//!    delivered barrier N of the running alignment is blocked; everything
//!    that arrives on it later (records and events) is held in the blocker
//!    and acts only when replayed.
//! 2. **Replay** ([`Aligner::release`]): when an alignment ends (trigger or
//!    abort) the held elements are replayed in arrival order before any new
//!    input; if an earlier replay is still running, the newly released
//!    elements come first, then the rest of the earlier one (Flink 1.8's
//!    stack of `BufferOrEventSequence`s: `currentBuffered` and
//!    `queuedBuffered`). A release is finished only when the read after its
//!    last element finds it empty (`completeBufferedSequence`).
//! 3. **Trigger** ([`Aligner::check_aligned`]): checkpoint N triggers once
//!    every channel is blocked for N or ended, before any held element is
//!    handed on. With a single channel a newer barrier triggers at once
//!    (the same rule: one blocked channel is all channels).
//! 4. **Subsume** ([`Aligner::on_barrier`]): a newer barrier during an
//!    alignment aborts the current checkpoint (`subsumed`), releases, and
//!    starts aligning the new one. A barrier older than the current
//!    checkpoint, or equal to it when no alignment runs, is ignored.
//! 5. **Cancel** ([`Aligner::on_cancel`]): cancel N for the aligning
//!    checkpoint releases and aborts N; cancel N newer than the current one
//!    releases any alignment, aborts N only (the older one is dropped
//!    silently) and later barriers N are ignored; anything else is ignored
//!    (the Flink 1.9 fix: a checkpoint is reported at most once).
//! 6. **End of partition** ([`Aligner::on_end_of_partition`], FLIP-147):
//!    the channel counts as aligned for the pending and all later
//!    checkpoints. It never aborts; if it was the last channel missing, the
//!    pending checkpoint triggers.
//! 7. **Alignment limit** ([`Aligner::hold`]): after an element is held, if
//!    the bytes held by the running alignment plus the full size (as
//!    released) of every earlier release that a newer release was put in
//!    front of and whose replay has not resumed are strictly greater than
//!    `max_alignment_bytes`, release and abort (`alignment_limit`) and
//!    ignore the rest of that checkpoint. The release being replayed now
//!    does not count (Flink 1.8's `numQueuedBytes` plus
//!    `getBytesBlocked()`, `task.checkpoint.alignment.max-size`): counting
//!    it would make one over-limit alignment abort the next ones too.
//!    Records count their [`RecordSize`] bytes, events 0.
//!
//! **End of input** ([`BarrierHandler::end_of_input`], the README's
//! "end of `input`"): a running alignment ends without a signal and
//! everything held is released for replay. From then on nothing is held:
//! replayed (or later) records, watermarks and ends of partition pass, and
//! barriers and cancel markers are consumed without a signal. (A replayed
//! barrier could otherwise start a new alignment that blocks its channel
//! and holds the rest of the replay for good: no more input can complete
//! it, as a channel that never delivered the old barrier is still open.)
//!
//! The blocker is a ring buffer ([`VecDeque`]) that keeps its allocation
//! between alignments, so a warm aligner allocates nothing per element.

use super::{
    AbortReason, AlignmentStats, BarrierHandler, BarrierSignal, ChannelSet, HandlerConfig,
};
use crate::types::element::{CheckpointBarrier, CheckpointId, RecordSize, StreamElement};
use std::collections::VecDeque;

/// One release of the blocker (rule 2): its elements in replay order and
/// its full size as released (what rule 7 counts while it is queued).
#[derive(Debug)]
struct Release<T> {
    items: VecDeque<(usize, StreamElement<T>)>,
    bytes: u64,
}

/// Exactly-once barrier handler (Flink 1.8 `BarrierBuffer` semantics, see the
/// module docs for the rules).
///
/// Memory: the blocker holds whole elements as they arrived; its byte count
/// is the sum of their [`RecordSize`] sizes. Its capacity
/// ([`HandlerConfig::blocker_capacity_bytes`]) is advice to the input gate,
/// [`HandlerConfig::max_alignment_bytes`] the hard limit that aborts.
///
/// Cost per element on an unblocked channel: an inlined fast path, one
/// compare of the blocked count with no alignment running (a bit test
/// while one runs): about 1.0× the [`crate::barrier::Tracker`]'s instructions
/// (1.3× during an alignment), see `docs/benchmarks-history.md`.
#[derive(Debug)]
pub struct Aligner<T> {
    num_channels: usize,
    config: HandlerConfig,
    /// Channels blocked for the running alignment (rule 1).
    blocked: ChannelSet,
    /// `blocked.len()`, kept beside it (the fast path of `on_element`).
    num_blocked: usize,
    /// Channels that delivered end of partition (rule 6).
    closed: ChannelSet,
    num_closed: usize,
    /// The newest checkpoint this handler has seen a barrier or cancel for
    /// (Flink's `currentCheckpointId`).
    current: CheckpointId,
    /// The barrier of the running alignment; `None` when none runs.
    aligning: Option<CheckpointBarrier>,
    align_start_ns: u64,
    max_held_bytes: u64,
    /// The blocker: elements of blocked channels, in arrival order.
    held: VecDeque<(usize, StreamElement<T>)>,
    held_bytes: u64,
    /// The release being replayed (Flink's `currentBuffered`); `None` when
    /// none is open. It stays open, even empty, until a read finds it
    /// empty (rule 2).
    replay: Option<Release<T>>,
    /// Earlier releases a newer one was put in front of, newest last
    /// (Flink's `queuedBuffered`); their replay resumes in that order.
    queued: Vec<Release<T>>,
    /// The full size of the queued releases (Flink's `numQueuedBytes`,
    /// rule 7).
    queued_bytes: u64,
    /// The buffer of the last finished release, kept warm for the next
    /// one (a warm aligner allocates nothing per alignment).
    spare: VecDeque<(usize, StreamElement<T>)>,
    /// Set by `end_of_input`: no more alignments, nothing is held.
    input_ended: bool,
}

impl<T: RecordSize> Aligner<T> {
    /// An aligner over `num_channels` input channels.
    ///
    /// # Panics
    /// When `num_channels` is 0.
    pub fn new(num_channels: usize, config: HandlerConfig) -> Self {
        assert!(num_channels > 0, "an input gate has at least one channel");
        Aligner {
            num_channels,
            config,
            blocked: ChannelSet::new(num_channels),
            num_blocked: 0,
            closed: ChannelSet::new(num_channels),
            num_closed: 0,
            current: CheckpointId::NONE,
            aligning: None,
            align_start_ns: 0,
            max_held_bytes: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            replay: None,
            queued: Vec::new(),
            queued_bytes: 0,
            spare: VecDeque::new(),
            input_ended: false,
        }
    }

    /// The newest checkpoint seen (by barrier or cancel marker).
    pub fn current_checkpoint(&self) -> CheckpointId {
        self.current
    }

    /// The checkpoint being aligned, if an alignment runs.
    pub fn aligning(&self) -> Option<CheckpointId> {
        self.aligning.map(|b| b.id)
    }

    /// The full size of the earlier releases queued behind a newer one:
    /// what rule 7 counts beside the held bytes.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Rule 1 and rule 7: hold an element of a blocked channel, then check
    /// the alignment limit.
    fn hold(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        signals: &mut Vec<BarrierSignal>,
    ) {
        self.held_bytes = self.held_bytes.saturating_add(element.size_bytes() as u64);
        self.max_held_bytes = self.max_held_bytes.max(self.held_bytes);
        self.held.push_back((channel, element));
        if let Some(limit) = self.config.max_alignment_bytes {
            if self.held_bytes.saturating_add(self.queued_bytes) > limit {
                // `current` stays the aborted id, so its late barriers are
                // ignored by rule 4 ("the rest of that checkpoint").
                let id = self.current;
                self.release();
                signals.push(BarrierSignal::Abort {
                    id,
                    reason: AbortReason::AlignmentLimit,
                });
            }
        }
    }

    /// Rule 2: end the alignment, unblock every channel, and put the held
    /// elements in front of any earlier replay.
    fn release(&mut self) {
        self.aligning = None;
        self.blocked.clear();
        self.num_blocked = 0;
        if self.held.is_empty() {
            return; // nothing to replay: no new release (Flink: rollOver is null)
        }
        let bytes = self.held_bytes;
        self.held_bytes = 0;
        match self.replay.as_mut() {
            // Common case: nothing replays now. O(1): the blocker's buffer
            // becomes the replay and the last replay's (empty, warm)
            // buffer becomes the blocker.
            None => {
                let mut items = std::mem::take(&mut self.spare);
                std::mem::swap(&mut items, &mut self.held);
                self.replay = Some(Release { items, bytes });
            }
            // An earlier release is open (even if its last element was
            // just handed on): it is queued, with its full size, behind
            // the new one.
            Some(_) => {
                let earlier = self.replay.take().expect("matched Some");
                self.queued_bytes = self.queued_bytes.saturating_add(earlier.bytes);
                self.queued.push(earlier);
                let items = std::mem::take(&mut self.held);
                self.replay = Some(Release { items, bytes });
            }
        }
    }

    /// Starts aligning `barrier`, which arrived on `channel`.
    fn begin_alignment(&mut self, channel: usize, barrier: CheckpointBarrier, now_ns: u64) {
        self.current = barrier.id;
        self.aligning = Some(barrier);
        self.align_start_ns = now_ns;
        self.max_held_bytes = 0;
        self.blocked.insert(channel);
        self.num_blocked = 1;
    }

    /// Rule 3: trigger when every channel is blocked or ended.
    fn check_aligned(&mut self, now_ns: u64, signals: &mut Vec<BarrierSignal>) {
        if let Some(barrier) = self.aligning {
            if self.num_blocked + self.num_closed == self.num_channels {
                let alignment = AlignmentStats {
                    duration_ns: now_ns.saturating_sub(self.align_start_ns),
                    first_barrier_ns: self.align_start_ns,
                    blocking: true,
                    buffered_bytes: self.max_held_bytes,
                    unaligned: false,
                };
                self.release();
                signals.push(BarrierSignal::Trigger { barrier, alignment });
            }
        }
    }

    /// Rules 3 and 4.
    fn on_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        match self.aligning {
            Some(running) if barrier.id == running.id => {
                // The channel is unblocked (blocked ones are held before we
                // get here), so this is its first barrier for `running`.
                self.blocked.insert(channel);
                self.num_blocked += 1;
            }
            Some(running) if barrier.id > running.id => {
                self.release();
                signals.push(BarrierSignal::Abort {
                    id: running.id,
                    reason: AbortReason::Subsumed,
                });
                self.begin_alignment(channel, barrier, now_ns);
            }
            Some(_) => return, // older than the running alignment
            None if barrier.id > self.current => self.begin_alignment(channel, barrier, now_ns),
            None => return, // already triggered or given up
        }
        self.check_aligned(now_ns, signals);
    }

    /// Rule 5.
    fn on_cancel(&mut self, id: CheckpointId, signals: &mut Vec<BarrierSignal>) {
        let report = match self.aligning {
            Some(running) if id >= running.id => true,
            Some(_) => false,
            None => id > self.current,
        };
        if report {
            if self.aligning.is_some() {
                self.release();
            }
            self.current = id;
            signals.push(BarrierSignal::Abort {
                id,
                reason: AbortReason::Canceled,
            });
        }
    }

    /// Rule 6.
    fn on_end_of_partition(
        &mut self,
        channel: usize,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        if self.closed.insert(channel) {
            self.num_closed += 1;
        }
        self.check_aligned(now_ns, signals);
    }
}

impl<T: RecordSize> Aligner<T> {
    /// [`BarrierHandler::on_element`] for every element but records of an
    /// unblocked channel (kept out of line, so the fast path inlines).
    #[inline(never)]
    fn on_other_element(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>> {
        if self.num_blocked != 0 && self.blocked.contains(channel) {
            self.hold(channel, element, signals);
            return None;
        }
        match element {
            StreamElement::Records(_) | StreamElement::Watermark(_) | StreamElement::Idle(_) => {
                Some(element)
            }
            // End of input (module docs): no more decisions.
            StreamElement::Barrier(_) | StreamElement::CancelCheckpoint(_) if self.input_ended => {
                None
            }
            StreamElement::Barrier(barrier) => {
                self.on_barrier(channel, barrier, now_ns, signals);
                None
            }
            StreamElement::CancelCheckpoint(id) => {
                self.on_cancel(id, signals);
                None
            }
            StreamElement::EndOfPartition => {
                self.on_end_of_partition(channel, now_ns, signals);
                Some(StreamElement::EndOfPartition)
            }
        }
    }
}

impl<T: RecordSize> BarrierHandler<T> for Aligner<T> {
    /// The fast path, inlined into the input gate: records of an
    /// unblocked channel pass at once (`num_blocked` is the blocked set's
    /// size, so with no alignment running one compare replaces the bit
    /// test, and [`ChannelSet::is_member`] skips the range check: an
    /// input gate passes the index of one of its own channels, and a
    /// channel outside the range is never blocked); everything else goes
    /// to the rules (`on_other_element`).
    #[inline(always)]
    fn on_element(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>> {
        if matches!(element, StreamElement::Records(_))
            && (self.num_blocked == 0 || !self.blocked.is_member(channel))
        {
            return Some(element);
        }
        self.on_other_element(channel, element, now_ns, signals)
    }

    #[inline]
    fn next_replay(&mut self) -> Option<(usize, StreamElement<T>)> {
        loop {
            let open = self.replay.as_mut()?;
            if let Some(next) = open.items.pop_front() {
                return Some(next);
            }
            // The read finds the open release empty: it is finished, and the
            // newest queued one resumes (no longer counted by rule 7).
            let done = self.replay.take().expect("open");
            self.spare = done.items;
            if let Some(resumed) = self.queued.pop() {
                self.queued_bytes = self.queued_bytes.saturating_sub(resumed.bytes);
                self.replay = Some(resumed);
            }
        }
    }

    #[inline]
    fn has_replay(&self) -> bool {
        self.replay.as_ref().is_some_and(|r| !r.items.is_empty())
            || self.queued.iter().any(|r| !r.items.is_empty())
    }

    #[inline]
    fn is_blocked(&self, channel: usize) -> bool {
        self.blocked.contains(channel)
    }

    fn blocked(&self) -> &ChannelSet {
        &self.blocked
    }

    #[inline]
    fn blocker_full(&self) -> bool {
        self.held_bytes >= self.config.blocker_capacity_bytes
    }

    fn num_channels(&self) -> usize {
        self.num_channels
    }

    fn num_closed(&self) -> usize {
        self.num_closed
    }

    /// See "End of input" in the module docs.
    fn end_of_input(&mut self) {
        self.input_ended = true;
        if self.aligning.is_some() || !self.held.is_empty() {
            self.release();
        }
    }

    fn held_bytes(&self) -> u64 {
        self.held_bytes
    }
}
