//! The unaligned barrier handler: unaligned checkpoints (FLIP-76).
//!
//! An unaligned checkpoint never blocks a channel. A task takes its
//! snapshot as soon as the first barrier of checkpoint n reaches it on any
//! input, on a channel's priority lane (the barrier overtook the records
//! queued before it) or in band; from then on, every element that arrives on
//! a channel before that channel's in-band barrier n is *channel state* of
//! n: it was sent before the barrier, so the upstream snapshot does not hold
//! it, and it is processed after this task's snapshot, so this snapshot does
//! not hold it either. The checkpoint's part of this task is complete once
//! every channel's state has ended. A restore replays each channel's state
//! before any new input of that channel.
//!
//! # The rules, each in one place
//! Semantics of Flink's `SingleCheckpointBarrierHandler` in its unaligned
//! states (`AlternatingWaitingForFirstBarrierUnaligned`,
//! `AlternatingCollectingBarriersUnaligned`) and of its
//! `ChannelStatePersister`, with FLIP-147's rule for ended channels. The
//! numbers continue those of the aligner (1–7) and the tracker (8–10), as
//! `testdata/scenarios/EXTENSIONS.md` lists them.
//!
//! 11. **First barrier triggers** ([`Unaligned::on_first_barrier`]): a
//!     barrier n newer than every checkpoint this handler has seen, on a
//!     priority lane or in band, triggers n at once. The state of n opens on
//!     every channel that has not ended; a pending (triggered, state not yet
//!     ended) checkpoint m < n is aborted first (`subsumed`), so at most one
//!     unaligned checkpoint is in flight (as Flink).
//! 12. **Channel state** ([`Unaligned::channel_state_open`]): a record
//!     batch, watermark or idle marker read from the data lane of a channel
//!     whose state for the pending n is open belongs to n's channel state,
//!     and is handed on at once as well: nothing is ever held.
//! 13. **In-band barrier ends a channel's state**
//!     ([`Unaligned::on_in_band_barrier`]): barrier n in the data lane of
//!     channel c ends c's state for the pending n. When the last open state
//!     ends, [`BarrierSignal::ChannelStateDone`] for n. An in-band barrier
//!     of a checkpoint that is not pending and not newer is ignored.
//! 14. **Late priority barriers are ignored** ([`Unaligned::on_priority`]):
//!     a priority barrier n that is not newer than every checkpoint seen is
//!     ignored. In particular one whose in-band twin on the same channel was
//!     read first (the two race): honouring it would open that channel's
//!     state again and put records that follow the in-band barrier, i.e.
//!     post-snapshot records, into the state.
//! 15. **End of partition** ([`Unaligned::on_end_of_partition`]): an ended
//!     channel's state ends too (its producer finished without barrier n:
//!     the state is everything before its end of partition), and it takes
//!     no part in later checkpoints (FLIP-147, as in the aligned mode). It
//!     never aborts.
//! 16. **Cancel marker** ([`Unaligned::on_cancel`]): cancel n in band for
//!     the pending n aborts n (`canceled`) and ends every channel's state
//!     (the rest is discarded). Cancel n newer than the pending m aborts m
//!     (`subsumed`) and n (`canceled`); with nothing pending, cancel n newer
//!     than every checkpoint seen aborts n; later barriers n are ignored
//!     (rule 10: no checkpoint is notified twice as aborted, none older than
//!     a triggered one is triggered).
//! 17. **Aborted by the task** ([`Unaligned::abort`]): when the task gives up
//!     the pending n itself (a snapshot or storage error, the coordinator's
//!     timeout or abort), the handler stops recording n with no signal, and
//!     the task sends cancel marker n in band downstream, which ends n's
//!     state there by rule 16: no reader waits for an in-band barrier that
//!     will not come.
//!
//! 18. **Aligned barriers** ([`Unaligned::on_aligned_barrier`]): a
//!     barrier that must stay aligned ([`CheckpointBarrier::must_align`]:
//!     a savepoint's, the final checkpoint's) arrives in band only and is
//!     aligned by pure blocking (Flink 1.11+'s aligned mode, blocker
//!     capacity 0): its channel is blocked ([`BarrierHandler::is_blocked`])
//!     and the input gate stops reading it, so nothing is held here and
//!     credits push back upstream; once every channel not ended is blocked
//!     (an end of partition counts as aligned) it triggers, with no channel
//!     state (`ChannelStateDone` follows at once), and unblocks. A newer
//!     barrier or a cancel marker ends the alignment as in rules 11 and 16
//!     (`subsumed`, `canceled`).
//!
//! 19. **Aligned checkpoints with a timeout**
//!     ([`Unaligned::with_aligned_timeout`], Flink 1.12's
//!     `execution.checkpointing.aligned-checkpoint-timeout`, measured from
//!     the checkpoint's trigger, the barrier's timestamp, since Flink 1.14,
//!     FLINK-23041; Flink's `AlternatingWaitingForFirstBarrier` and
//!     `AlternatingCollectingBarriers`): every checkpoint starts aligned,
//!     by pure blocking as in rule 18. The alignment of n **switches to
//!     unaligned** at the first of: a priority barrier n (which means that
//!     T has passed: the job puts n on the priority lanes at its deadline,
//!     FLINK-27251); once T has passed since n's trigger (`now_ns >=
//!     timestamp_ns + T`), an in-band barrier n that completes nothing, or
//!     an end of partition that completes nothing (Flink 1.20's
//!     `AlternatingCollectingBarriers.endOfPartitionReceived`). A switch
//!     triggers n now: its state opens on every channel that has neither
//!     delivered barrier n nor ended, and the blocked channels are
//!     unblocked (what follows their barrier is after the snapshot, so it
//!     is not channel state). With nothing of n seen yet, a priority
//!     barrier n, or an in-band barrier n once T has passed, starts n
//!     unaligned as rule 11 (the in-band one's own channel state is then
//!     already ended, by rule 13). A complete alignment wins over the
//!     timeout (Flink's
//!     `AbstractAlternatingAlignedBarrierHandlerState.barrierReceived`
//!     checks it first): a checkpoint whose alignment is completed by an
//!     in-band barrier or an end of partition, before T or after it,
//!     triggers aligned, with no channel state; so does a first barrier
//!     that completes the alignment at once (a single channel, or every
//!     other channel ended), even after T.
//!     With no timeout ([`Unaligned::new`]) every checkpoint is unaligned
//!     from its first barrier (the same as T = 0).
//!
//! **Notifications.** Each triggered checkpoint is then either aborted or
//! reported [`BarrierSignal::ChannelStateDone`], exactly once. (Unlike the
//! aligner, an unaligned checkpoint can be aborted after its trigger.)
//!
//! **End of input** ([`BarrierHandler::end_of_input`]): a pending checkpoint
//! whose state never ended is dropped without a signal, as the aligner drops
//! a running alignment.
//!
//! Priority lanes carry barriers only: a cancel marker travels in band,
//! where it also ends the channel's state (rule 16).

use super::{AbortReason, AlignmentStats, BarrierHandler, BarrierSignal, ChannelSet};
use crate::types::element::{CheckpointBarrier, CheckpointId, StreamElement};

/// A triggered checkpoint whose channel state is still being recorded.
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: CheckpointId,
    /// When its first barrier arrived, ns on the caller's clock.
    first_ns: u64,
}

/// Unaligned-checkpoint barrier handler (Flink's unaligned
/// `SingleCheckpointBarrierHandler`; the rules are in the module docs).
///
/// It holds no element: [`BarrierHandler::on_element`] hands records,
/// watermarks, idle markers and ends of partition on at once, and the
/// caller asks [`Unaligned::channel_state_open`] before feeding an element
/// whether it is channel state to persist. Memory: two [`ChannelSet`]s.
///
/// Cost per element: records pass after one compare with no checkpoint
/// pending (the caller's `channel_state_open` is then one compare too).
///
/// ```
/// use lockgate::{barrier::BarrierHandler, barrier::BarrierSignal, barrier::CheckpointBarrier, CheckpointId, barrier::StreamElement, barrier::Unaligned};
/// let mut h = Unaligned::new(2);
/// let mut signals = Vec::new();
/// // Barrier 1 overtakes the records queued on channel 0: trigger at once.
/// h.on_priority(0, CheckpointBarrier::new(CheckpointId(1), 0), 0, &mut signals);
/// assert!(matches!(signals[0], BarrierSignal::Trigger { .. }));
/// // A record read from channel 1 before its barrier is channel state...
/// assert!(h.channel_state_open(1));
/// let el: StreamElement<u64> = StreamElement::Records(vec![7]);
/// assert!(h.on_element(1, el, 0, &mut signals).is_some()); // ...and passes
/// // The in-band barriers end each channel's state.
/// signals.clear();
/// for ch in 0..2 {
///     let b: StreamElement<u64> =
///         StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(1), 0));
///     h.on_element(ch, b, 0, &mut signals);
/// }
/// assert_eq!(signals, vec![BarrierSignal::ChannelStateDone { id: CheckpointId(1) }]);
/// ```
#[derive(Debug)]
pub struct Unaligned {
    num_channels: usize,
    /// Channels that delivered end of partition (rule 15).
    closed: ChannelSet,
    num_closed: usize,
    /// The newest checkpoint seen by barrier, cancel marker or task abort
    /// (Flink's `currentCheckpointId`).
    current: CheckpointId,
    pending: Option<Pending>,
    /// Channels whose state for the pending checkpoint is open (rule 12).
    open: ChannelSet,
    num_open: usize,
    /// Channels blocked by an aligned barrier (rule 18).
    blocked: ChannelSet,
    num_blocked: usize,
    /// The barrier being aligned (rules 18 and 19) and when its first
    /// barrier arrived.
    aligning: Option<(CheckpointBarrier, u64)>,
    /// Rule 19: the aligned-checkpoint timeout in ns; `None`: unaligned
    /// from the first barrier.
    aligned_timeout_ns: Option<u64>,
}

impl Unaligned {
    /// An unaligned handler over `num_channels` input channels.
    ///
    /// # Panics
    /// When `num_channels` is 0.
    pub fn new(num_channels: usize) -> Self {
        assert!(num_channels > 0, "an input gate has at least one channel");
        Unaligned {
            num_channels,
            closed: ChannelSet::new(num_channels),
            num_closed: 0,
            current: CheckpointId::NONE,
            pending: None,
            open: ChannelSet::new(num_channels),
            num_open: 0,
            blocked: ChannelSet::new(num_channels),
            num_blocked: 0,
            aligning: None,
            aligned_timeout_ns: None,
        }
    }

    /// A handler for aligned checkpoints that switch to unaligned once
    /// `timeout_ns` has passed since their trigger (rule 19), over
    /// `num_channels` input channels. A timeout of 0 is the same as
    /// [`Unaligned::new`].
    ///
    /// # Panics
    /// When `num_channels` is 0.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{barrier::BarrierHandler, barrier::BarrierSignal, barrier::CheckpointBarrier, CheckpointId, barrier::StreamElement, barrier::Unaligned};
    /// // Barriers triggered at 0 ns, a timeout of 1,000 ns.
    /// let mut h = Unaligned::with_aligned_timeout(2, 1_000);
    /// let b = CheckpointBarrier::new(CheckpointId(1), 0);
    /// let mut signals = Vec::new();
    /// // Before the timeout, a barrier blocks its channel (aligned).
    /// h.on_element(0, StreamElement::<u64>::Barrier(b), 500, &mut signals);
    /// assert!(signals.is_empty() && BarrierHandler::<u64>::is_blocked(&h, 0));
    /// // At the deadline the job's priority copy switches it to unaligned:
    /// // it triggers now, channel 1's state opens, channel 0 is unblocked.
    /// h.on_priority(1, b, 1_000, &mut signals);
    /// assert!(matches!(signals[0], BarrierSignal::Trigger { alignment, .. } if alignment.unaligned));
    /// assert!(h.channel_state_open(1) && !h.channel_state_open(0));
    /// assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
    /// ```
    pub fn with_aligned_timeout(num_channels: usize, timeout_ns: u64) -> Self {
        Unaligned {
            aligned_timeout_ns: (timeout_ns > 0).then_some(timeout_ns),
            ..Unaligned::new(num_channels)
        }
    }

    /// The aligned-checkpoint timeout in ns (rule 19), if any.
    pub fn aligned_timeout_ns(&self) -> Option<u64> {
        self.aligned_timeout_ns
    }

    /// True when `barrier`, seen at `now_ns`, is to be taken unaligned:
    /// always without a timeout, else once the timeout has passed since
    /// its trigger (rule 19). Barriers that must align never are.
    fn timed_out(&self, barrier: &CheckpointBarrier, now_ns: u64) -> bool {
        !barrier.must_align()
            && self
                .aligned_timeout_ns
                .is_none_or(|t| now_ns >= barrier.timestamp_ns.saturating_add(t))
    }

    /// True when checkpoint `id` is being aligned (rules 18, 19).
    pub fn aligning(&self) -> Option<CheckpointId> {
        self.aligning.map(|(b, _)| b.id)
    }

    /// The newest checkpoint seen (by barrier, cancel marker or abort).
    pub fn current_checkpoint(&self) -> CheckpointId {
        self.current
    }

    /// The triggered checkpoint whose channel state is still recorded.
    pub fn pending(&self) -> Option<CheckpointId> {
        self.pending.map(|p| p.id)
    }

    /// Rule 12: true when an element read from `channel`'s data lane now
    /// (before it is fed) belongs to the pending checkpoint's channel
    /// state, if it is a record batch, watermark or idle marker.
    ///
    /// # Panics
    /// When `channel` is not below the number of channels.
    #[inline]
    pub fn channel_state_open(&self, channel: usize) -> bool {
        self.num_open != 0 && self.open.contains(channel)
    }

    /// A barrier that arrived on `channel`'s priority lane (rules 11, 14).
    ///
    /// # Panics
    /// When `channel` is not below the number of channels.
    pub fn on_priority(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        assert!(
            channel < self.num_channels,
            "channel {channel} out of range"
        );
        if barrier.must_align() {
            return;
        }
        if self.aligning.is_some_and(|(b, _)| b.id == barrier.id) {
            self.switch_to_unaligned(now_ns, signals); // rule 19
        } else if barrier.id > self.current {
            self.on_first_barrier(barrier, now_ns, signals);
        }
    }

    /// Rule 19: the running alignment times out and its checkpoint is
    /// taken unaligned now.
    fn switch_to_unaligned(&mut self, now_ns: u64, signals: &mut Vec<BarrierSignal>) {
        let Some((barrier, start_ns)) = self.aligning else {
            return;
        };
        // Open the state of every channel that neither delivered the
        // barrier (blocked) nor ended, then unblock.
        for ch in 0..self.num_channels {
            if !self.closed.contains(ch) && !self.blocked.contains(ch) && self.open.insert(ch) {
                self.num_open += 1;
            }
        }
        self.end_alignment();
        self.pending = Some(Pending {
            id: barrier.id,
            first_ns: start_ns,
        });
        signals.push(blocking_trigger(barrier, start_ns, now_ns, true));
        self.check_done(signals);
    }

    /// Rule 17: the task gave up checkpoint `id` itself. Stops recording it
    /// (if pending) without a signal; later barriers of `id` are ignored.
    pub fn abort(&mut self, id: CheckpointId) {
        if self.pending.is_some_and(|p| p.id <= id) {
            self.end_pending();
        }
        if self.aligning.is_some_and(|(b, _)| b.id <= id) {
            self.end_alignment();
        }
        self.current = self.current.max(id);
    }

    fn end_pending(&mut self) {
        self.pending = None;
        self.open.clear();
        self.num_open = 0;
    }

    /// Ends whatever runs for an older checkpoint (rules 11, 18): a
    /// pending unaligned one or an alignment, aborted as `subsumed`.
    fn subsume_older(&mut self, signals: &mut Vec<BarrierSignal>) {
        if let Some(old) = self.pending {
            self.end_pending();
            signals.push(BarrierSignal::Abort {
                id: old.id,
                reason: AbortReason::Subsumed,
            });
        }
        if let Some((old, _)) = self.aligning {
            self.end_alignment();
            signals.push(BarrierSignal::Abort {
                id: old.id,
                reason: AbortReason::Subsumed,
            });
        }
    }

    fn end_alignment(&mut self) {
        self.aligning = None;
        self.blocked.clear();
        self.num_blocked = 0;
    }

    /// Rules 18 and 19: in-band barrier `barrier`, to be aligned (one that
    /// must align, or one of an aligned checkpoint with a timeout, before
    /// its timeout), on `channel`: blocks the channel and triggers once
    /// every channel not ended is blocked. Never switches to unaligned
    /// itself (the caller checks the timeout).
    pub fn on_aligned_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        match self.aligning {
            Some((running, _)) if running.id == barrier.id => {}
            _ if barrier.id > self.current => {
                self.subsume_older(signals);
                self.current = barrier.id;
                self.aligning = Some((barrier, now_ns));
            }
            _ => return, // older, or already triggered or given up
        }
        if self.blocked.insert(channel) {
            self.num_blocked += 1;
        }
        self.check_aligned(now_ns, signals);
    }

    /// Rule 18: trigger once every channel not ended is blocked.
    fn check_aligned(&mut self, now_ns: u64, signals: &mut Vec<BarrierSignal>) {
        let Some((barrier, start_ns)) = self.aligning else {
            return;
        };
        let aligned =
            (0..self.num_channels).all(|ch| self.blocked.contains(ch) || self.closed.contains(ch));
        if aligned {
            self.end_alignment();
            signals.push(blocking_trigger(barrier, start_ns, now_ns, false));
            signals.push(BarrierSignal::ChannelStateDone { id: barrier.id });
        }
    }

    /// Rule 11.
    fn on_first_barrier(
        &mut self,
        barrier: CheckpointBarrier,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        self.subsume_older(signals);
        self.current = barrier.id;
        self.pending = Some(Pending {
            id: barrier.id,
            first_ns: now_ns,
        });
        for ch in 0..self.num_channels {
            if !self.closed.contains(ch) && self.open.insert(ch) {
                self.num_open += 1;
            }
        }
        signals.push(BarrierSignal::Trigger {
            barrier,
            alignment: AlignmentStats {
                duration_ns: 0,
                first_barrier_ns: now_ns,
                blocking: false,
                buffered_bytes: 0,
                unaligned: true,
            },
        });
        // Every channel may have ended already: then nothing is recorded.
        self.check_done(signals);
    }

    /// Ends `channel`'s state for the pending checkpoint (rules 13, 15).
    fn end_channel_state(&mut self, channel: usize, signals: &mut Vec<BarrierSignal>) {
        if self.open.remove(channel) {
            self.num_open -= 1;
            self.check_done(signals);
        }
    }

    fn check_done(&mut self, signals: &mut Vec<BarrierSignal>) {
        if self.num_open == 0 {
            if let Some(p) = self.pending.take() {
                signals.push(BarrierSignal::ChannelStateDone { id: p.id });
            }
        }
    }

    /// Rules 11 and 13.
    fn on_in_band_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        let aligning_it = self.aligning.is_some_and(|(b, _)| b.id == barrier.id);
        if barrier.must_align()
            || aligning_it
            || barrier.id > self.current
                && (!self.timed_out(&barrier, now_ns) || self.completes_alignment(channel))
        {
            // Rules 18 and 19: aligned, by blocking (a first barrier that
            // completes the alignment triggers aligned even once T has
            // passed); a timeoutable alignment still running once T has
            // passed switches.
            self.on_aligned_barrier(channel, barrier, now_ns, signals);
            if self.aligning.is_some_and(|(b, _)| b.id == barrier.id)
                && self.timed_out(&barrier, now_ns)
            {
                self.switch_to_unaligned(now_ns, signals);
            }
            return;
        }
        if barrier.id > self.current {
            self.on_first_barrier(barrier, now_ns, signals);
        }
        if self.pending.is_some_and(|p| p.id == barrier.id) {
            self.end_channel_state(channel, signals);
        }
    }

    /// Rule 15 (and 18: an ended channel counts as aligned).
    fn on_end_of_partition(
        &mut self,
        channel: usize,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        if self.closed.insert(channel) {
            self.num_closed += 1;
        }
        self.end_channel_state(channel, signals);
        self.check_aligned(now_ns, signals);
        // Rule 19: an alignment that this end did not complete switches
        // once its timeout has passed.
        if self
            .aligning
            .is_some_and(|(b, _)| self.timed_out(&b, now_ns))
        {
            self.switch_to_unaligned(now_ns, signals);
        }
    }

    /// Rule 19: true when a first barrier on `channel` completes its
    /// alignment at once (every other channel has ended).
    fn completes_alignment(&self, channel: usize) -> bool {
        (0..self.num_channels).all(|ch| ch == channel || self.closed.contains(ch))
    }

    /// Rule 16 (and 18 for an alignment).
    fn on_cancel(&mut self, id: CheckpointId, signals: &mut Vec<BarrierSignal>) {
        if let Some((running, _)) = self.aligning {
            if id < running.id {
                return;
            }
            self.end_alignment();
            if id > running.id {
                signals.push(BarrierSignal::Abort {
                    id: running.id,
                    reason: AbortReason::Subsumed,
                });
            }
            self.current = id;
            signals.push(BarrierSignal::Abort {
                id,
                reason: AbortReason::Canceled,
            });
            return;
        }
        match self.pending {
            Some(p) if id == p.id => self.end_pending(),
            Some(p) if id > p.id => {
                self.end_pending();
                signals.push(BarrierSignal::Abort {
                    id: p.id,
                    reason: AbortReason::Subsumed,
                });
            }
            Some(_) => return, // older than the pending one
            None if id > self.current => {}
            None => return, // already done, aborted or older
        }
        self.current = id;
        signals.push(BarrierSignal::Abort {
            id,
            reason: AbortReason::Canceled,
        });
    }

    /// The time the pending checkpoint's first barrier arrived (ns on the
    /// caller's clock), for its statistics.
    pub fn pending_since_ns(&self) -> Option<u64> {
        self.pending.map(|p| p.first_ns)
    }
}

/// The trigger of an alignment by blocking (rules 18, 19) that began at
/// `start_ns`: taken `unaligned` when its timeout switched it.
fn blocking_trigger(
    barrier: CheckpointBarrier,
    start_ns: u64,
    now_ns: u64,
    unaligned: bool,
) -> BarrierSignal {
    BarrierSignal::Trigger {
        barrier,
        alignment: AlignmentStats {
            duration_ns: now_ns.saturating_sub(start_ns),
            first_barrier_ns: start_ns,
            blocking: true,
            buffered_bytes: 0,
            unaligned,
        },
    }
}

impl<T> BarrierHandler<T> for Unaligned {
    /// An element read from `channel`'s data lane. Records, watermarks, idle
    /// markers and ends of partition pass at once; barriers and cancel
    /// markers are consumed.
    #[inline]
    fn on_element(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>> {
        match element {
            StreamElement::Records(_) | StreamElement::Watermark(_) | StreamElement::Idle(_) => {
                Some(element)
            }
            StreamElement::Barrier(barrier) => {
                self.on_in_band_barrier(channel, barrier, now_ns, signals);
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

    fn next_replay(&mut self) -> Option<(usize, StreamElement<T>)> {
        None
    }

    fn has_replay(&self) -> bool {
        false
    }

    #[inline]
    fn is_blocked(&self, channel: usize) -> bool {
        self.num_blocked != 0 && self.blocked.contains(channel)
    }

    fn blocked(&self) -> &ChannelSet {
        &self.blocked
    }

    fn blocker_full(&self) -> bool {
        false
    }

    fn num_channels(&self) -> usize {
        self.num_channels
    }

    fn num_closed(&self) -> usize {
        self.num_closed
    }

    /// See "End of input" in the module docs.
    fn end_of_input(&mut self) {
        self.end_pending();
        self.end_alignment();
    }

    fn held_bytes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn barrier(id: u64) -> CheckpointBarrier {
        CheckpointBarrier::new(CheckpointId(id), 0)
    }

    fn feed(h: &mut Unaligned, ch: usize, el: StreamElement<u64>) -> Vec<BarrierSignal> {
        let mut s = Vec::new();
        h.on_element(ch, el, 0, &mut s);
        s
    }

    #[test]
    fn a_priority_barrier_after_its_in_band_twin_opens_no_state() {
        let mut h = Unaligned::new(2);
        let s = feed(&mut h, 0, StreamElement::Barrier(barrier(1)));
        assert!(matches!(s[0], BarrierSignal::Trigger { .. }));
        assert!(!h.channel_state_open(0), "its in-band barrier ended it");
        assert!(h.channel_state_open(1));
        let mut s = Vec::new();
        h.on_priority(0, barrier(1), 0, &mut s);
        assert!(s.is_empty());
        assert!(!h.channel_state_open(0), "rule 14: still ended");
    }

    #[test]
    fn a_newer_barrier_subsumes_the_pending_checkpoint_once() {
        let mut h = Unaligned::new(2);
        let mut s = Vec::new();
        h.on_priority(0, barrier(1), 0, &mut s);
        h.on_priority(1, barrier(2), 0, &mut s);
        assert_eq!(
            s[1],
            BarrierSignal::Abort {
                id: CheckpointId(1),
                reason: AbortReason::Subsumed
            }
        );
        assert!(
            matches!(s[2], BarrierSignal::Trigger { barrier, .. } if barrier.id == CheckpointId(2))
        );
        // Late in-band barriers of 1 are ignored; those of 2 finish it.
        assert!(feed(&mut h, 0, StreamElement::Barrier(barrier(1))).is_empty());
        assert!(feed(&mut h, 0, StreamElement::Barrier(barrier(2))).is_empty());
        assert_eq!(
            feed(&mut h, 1, StreamElement::Barrier(barrier(2))),
            vec![BarrierSignal::ChannelStateDone {
                id: CheckpointId(2)
            }]
        );
    }

    #[test]
    fn a_final_barrier_aligns_by_blocking_and_has_no_channel_state() {
        let mut h = Unaligned::new(3);
        let mut last = barrier(4);
        last.options.is_final = true;
        let mut s = Vec::new();
        // Never on a priority lane: ignored there.
        h.on_priority(0, last, 0, &mut s);
        assert!(s.is_empty());
        assert!(feed(&mut h, 0, StreamElement::Barrier(last)).is_empty());
        assert!(BarrierHandler::<u64>::is_blocked(&h, 0));
        assert!(!h.channel_state_open(1), "aligned: no channel state");
        assert!(feed(&mut h, 2, StreamElement::EndOfPartition).is_empty());
        let s = feed(&mut h, 1, StreamElement::Barrier(last));
        assert!(
            matches!(s[0], BarrierSignal::Trigger { barrier, .. } if barrier.id == CheckpointId(4))
        );
        assert_eq!(
            s[1],
            BarrierSignal::ChannelStateDone {
                id: CheckpointId(4)
            }
        );
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
        // A cancel during such an alignment aborts it and unblocks.
        let mut save = barrier(5);
        save.options.kind = crate::types::element::SnapshotKind::Savepoint;
        feed(&mut h, 0, StreamElement::Barrier(save));
        let s = feed(&mut h, 1, StreamElement::CancelCheckpoint(CheckpointId(5)));
        assert_eq!(
            s,
            vec![BarrierSignal::Abort {
                id: CheckpointId(5),
                reason: AbortReason::Canceled
            }]
        );
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
    }

    #[test]
    fn a_task_abort_stops_recording_without_a_signal() {
        let mut h = Unaligned::new(2);
        let mut s = Vec::new();
        h.on_priority(0, barrier(3), 0, &mut s);
        h.abort(CheckpointId(3));
        assert!(!h.channel_state_open(0) && !h.channel_state_open(1));
        assert!(feed(&mut h, 0, StreamElement::Barrier(barrier(3))).is_empty());
        assert!(feed(&mut h, 1, StreamElement::CancelCheckpoint(CheckpointId(3))).is_empty());
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn ended_channels_take_no_part_and_can_finish_the_state() {
        let mut h = Unaligned::new(3);
        assert!(feed(&mut h, 2, StreamElement::EndOfPartition).is_empty());
        let mut s = Vec::new();
        h.on_priority(0, barrier(1), 0, &mut s);
        assert!(!h.channel_state_open(2));
        assert!(feed(&mut h, 0, StreamElement::Barrier(barrier(1))).is_empty());
        assert_eq!(
            feed(&mut h, 1, StreamElement::EndOfPartition),
            vec![BarrierSignal::ChannelStateDone {
                id: CheckpointId(1)
            }]
        );
        // Every channel ended: a new barrier triggers and is done at once
        // (no channel has state to record).
        assert!(feed(&mut h, 0, StreamElement::EndOfPartition).is_empty());
        let mut s = Vec::new();
        h.on_priority(0, barrier(2), 0, &mut s);
        assert!(matches!(s[0], BarrierSignal::Trigger { .. }));
        assert_eq!(
            s[1],
            BarrierSignal::ChannelStateDone {
                id: CheckpointId(2)
            }
        );
    }

    fn at(id: u64, ts: u64) -> CheckpointBarrier {
        CheckpointBarrier::new(CheckpointId(id), ts)
    }

    fn feed_at(
        h: &mut Unaligned,
        ch: usize,
        el: StreamElement<u64>,
        now: u64,
    ) -> Vec<BarrierSignal> {
        let mut s = Vec::new();
        h.on_element(ch, el, now, &mut s);
        s
    }

    #[test]
    fn rule_19_an_alignment_done_before_its_timeout_is_aligned() {
        let mut h = Unaligned::with_aligned_timeout(2, 100);
        assert!(feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 10).is_empty());
        assert!(BarrierHandler::<u64>::is_blocked(&h, 0));
        assert!(!h.channel_state_open(1), "aligned: no channel state");
        let s = feed_at(&mut h, 1, StreamElement::Barrier(at(1, 0)), 99);
        assert!(
            matches!(s[0], BarrierSignal::Trigger { alignment, .. } if !alignment.unaligned && alignment.duration_ns == 89)
        );
        assert_eq!(
            s[1],
            BarrierSignal::ChannelStateDone {
                id: CheckpointId(1)
            }
        );
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
    }

    #[test]
    fn rule_19_a_barrier_after_its_timeout_starts_unaligned() {
        let mut h = Unaligned::with_aligned_timeout(3, 100);
        // Triggered at 50: the deadline is 150.
        let s = feed_at(&mut h, 1, StreamElement::Barrier(at(1, 50)), 150);
        assert!(matches!(s[0], BarrierSignal::Trigger { alignment, .. } if alignment.unaligned));
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 1));
        assert!(!h.channel_state_open(1), "its in-band barrier ended it");
        assert!(h.channel_state_open(0) && h.channel_state_open(2));
    }

    #[test]
    fn rule_19_a_late_in_band_barrier_switches_the_alignment() {
        let mut h = Unaligned::with_aligned_timeout(3, 100);
        assert!(feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 5).is_empty());
        // Ch 1's barrier comes after the deadline and completes nothing.
        let s = feed_at(&mut h, 1, StreamElement::Barrier(at(1, 0)), 120);
        assert!(
            matches!(s[0], BarrierSignal::Trigger { alignment, .. } if alignment.unaligned && alignment.blocking && alignment.first_barrier_ns == 5)
        );
        assert_eq!(h.pending(), Some(CheckpointId(1)));
        // Both channels that delivered the barrier are unblocked, and only
        // ch 2 (which did not) records.
        for ch in 0..2 {
            assert!(!BarrierHandler::<u64>::is_blocked(&h, ch));
            assert!(!h.channel_state_open(ch));
        }
        assert!(h.channel_state_open(2));
        let s = feed_at(&mut h, 2, StreamElement::Barrier(at(1, 0)), 130);
        assert_eq!(
            s,
            vec![BarrierSignal::ChannelStateDone {
                id: CheckpointId(1)
            }]
        );
    }

    #[test]
    fn rule_19_a_priority_barrier_switches_or_starts_unaligned() {
        let mut h = Unaligned::with_aligned_timeout(2, 1_000);
        assert!(feed_at(&mut h, 1, StreamElement::Barrier(at(1, 0)), 5).is_empty());
        let mut s = Vec::new();
        h.on_priority(0, at(1, 0), 6, &mut s);
        assert!(matches!(s[0], BarrierSignal::Trigger { alignment, .. } if alignment.unaligned));
        assert!(h.channel_state_open(0) && !h.channel_state_open(1));
        // Nothing of 2 seen: its priority copy starts it unaligned, and
        // subsumes the pending 1.
        s.clear();
        h.on_priority(1, at(2, 10), 20, &mut s);
        assert_eq!(
            s[0],
            BarrierSignal::Abort {
                id: CheckpointId(1),
                reason: AbortReason::Subsumed
            }
        );
        assert!(
            matches!(s[1], BarrierSignal::Trigger { barrier, alignment } if barrier.id == CheckpointId(2) && alignment.unaligned)
        );
        assert!(h.channel_state_open(0) && h.channel_state_open(1));
    }

    #[test]
    fn rule_19_an_end_of_partition_after_the_timeout_switches() {
        let mut h = Unaligned::with_aligned_timeout(3, 100);
        assert!(feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 5).is_empty());
        // Before the deadline an end of partition only counts as aligned.
        assert!(feed_at(&mut h, 1, StreamElement::EndOfPartition, 50).is_empty());
        assert_eq!(h.aligning(), Some(CheckpointId(1)));
        let mut h = Unaligned::with_aligned_timeout(3, 100);
        feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 5);
        // After it, one that completes nothing switches at once.
        let s = feed_at(&mut h, 1, StreamElement::EndOfPartition, 100);
        assert!(
            matches!(s[0], BarrierSignal::Trigger { alignment, .. } if alignment.unaligned && alignment.first_barrier_ns == 5)
        );
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
        assert!(h.channel_state_open(2) && !h.channel_state_open(0));
        assert_eq!(
            feed_at(&mut h, 2, StreamElement::EndOfPartition, 110),
            vec![BarrierSignal::ChannelStateDone {
                id: CheckpointId(1)
            }]
        );
    }

    #[test]
    fn rule_19_a_late_first_barrier_that_completes_the_alignment_is_aligned() {
        // A single channel.
        let mut h = Unaligned::with_aligned_timeout(1, 100);
        let s = feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 500);
        assert!(matches!(s[0], BarrierSignal::Trigger { alignment, .. } if !alignment.unaligned));
        assert_eq!(
            s[1],
            BarrierSignal::ChannelStateDone {
                id: CheckpointId(1)
            }
        );
        assert_eq!(h.pending(), None);
        // Every other channel ended.
        let mut h = Unaligned::with_aligned_timeout(2, 100);
        feed_at(&mut h, 1, StreamElement::EndOfPartition, 1);
        let s = feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 500);
        assert!(matches!(s[0], BarrierSignal::Trigger { alignment, .. } if !alignment.unaligned));
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
    }

    #[test]
    fn rule_19_barriers_that_must_align_never_time_out() {
        let mut h = Unaligned::with_aligned_timeout(2, 10);
        let mut save = at(3, 0);
        save.options.kind = crate::types::element::SnapshotKind::Savepoint;
        assert!(feed_at(&mut h, 0, StreamElement::Barrier(save), 1_000).is_empty());
        let mut s = Vec::new();
        h.on_priority(1, save, 2_000, &mut s);
        assert!(s.is_empty(), "no priority copy of a savepoint is honoured");
        assert!(BarrierHandler::<u64>::is_blocked(&h, 0));
        let s = feed_at(&mut h, 1, StreamElement::Barrier(save), 3_000);
        assert!(matches!(s[0], BarrierSignal::Trigger { alignment, .. } if !alignment.unaligned));
    }

    #[test]
    fn rule_19_a_cancel_ends_a_timeoutable_alignment() {
        let mut h = Unaligned::with_aligned_timeout(2, 100);
        feed_at(&mut h, 0, StreamElement::Barrier(at(1, 0)), 1);
        let s = feed_at(
            &mut h,
            1,
            StreamElement::CancelCheckpoint(CheckpointId(1)),
            2,
        );
        assert_eq!(
            s,
            vec![BarrierSignal::Abort {
                id: CheckpointId(1),
                reason: AbortReason::Canceled
            }]
        );
        assert!(!BarrierHandler::<u64>::is_blocked(&h, 0));
        // Its late priority copy is ignored.
        let mut s = Vec::new();
        h.on_priority(1, at(1, 0), 200, &mut s);
        assert!(s.is_empty());
        assert_eq!(h.pending(), None);
    }
}
