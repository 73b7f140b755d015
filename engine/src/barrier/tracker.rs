//! The at-least-once barrier handler: barrier tracking without blocking.
//!
//! # The rules, each in one place
//! Semantics of Flink 1.20's `CheckpointBarrierTracker`; the numbers are
//! those of `testdata/scenarios/README.md`.
//!
//! 8. **Count, never block** ([`Tracker::on_barrier`]): nothing is held. At
//!    most [`MAX_PENDING_CHECKPOINTS`] checkpoints are pending; one more
//!    drops the oldest silently. Checkpoint N triggers when every channel
//!    that was open at its first barrier has delivered it or ended, each
//!    channel counted once. Completing N drops the older pending checkpoints
//!    silently. A barrier for an id at or below the newest seen that is not
//!    pending is ignored.
//! 9. **Cancel and end of partition** ([`Tracker::on_cancel`],
//!    [`Tracker::on_end_of_partition`]): cancel N aborts every older pending
//!    checkpoint (each once) and N (once); N stays pending, marked aborted,
//!    so that its later barriers are absorbed. An end of partition counts for
//!    the pending checkpoints, newest first, and triggers the first that
//!    becomes complete, dropping the older ones.
//! 10. No checkpoint is notified twice, and none older than a triggered one
//!     is ever triggered (older pending ones are dropped on a trigger).

use super::{AbortReason, AlignmentStats, BarrierHandler, BarrierSignal, ChannelSet};
use crate::types::element::{CheckpointBarrier, CheckpointId, StreamElement};
use std::collections::VecDeque;

/// Flink's `CheckpointBarrierTracker.MAX_CHECKPOINTS_TO_TRACK`: at most this
/// many checkpoints are pending at once; a newer one drops the oldest.
pub const MAX_PENDING_CHECKPOINTS: usize = 50;

#[derive(Debug)]
struct Pending {
    barrier: CheckpointBarrier,
    /// Channels that delivered the barrier (or a cancel, or ended) for it.
    seen: ChannelSet,
    seen_count: usize,
    /// Open channels when its first barrier arrived.
    target: usize,
    aborted: bool,
    first_ns: u64,
}

impl Pending {
    /// Counts `channel` once; true when the checkpoint is now complete.
    fn mark(&mut self, channel: usize) -> bool {
        if self.seen.insert(channel) {
            self.seen_count += 1;
        }
        self.seen_count >= self.target
    }
}

/// At-least-once barrier handler (Flink 1.20 `CheckpointBarrierTracker`
/// semantics, see the module docs). It never holds an element, so it is
/// also the pass-through handler of a job without checkpoints.
///
/// Memory: one pending entry per checkpoint in flight (at most
/// [`MAX_PENDING_CHECKPOINTS`]), each with a [`ChannelSet`].
#[derive(Debug)]
pub struct Tracker {
    num_channels: usize,
    closed: ChannelSet,
    num_closed: usize,
    /// Pending checkpoints, oldest first (ids increase).
    pending: VecDeque<Pending>,
    /// The newest id seen by barrier or cancel (Flink's
    /// `latestPendingCheckpointID`).
    latest: CheckpointId,
    /// Never set: the tracker blocks nothing.
    blocked: ChannelSet,
}

impl Tracker {
    /// A tracker over `num_channels` input channels.
    ///
    /// # Panics
    /// When `num_channels` is 0.
    pub fn new(num_channels: usize) -> Self {
        assert!(num_channels > 0, "an input gate has at least one channel");
        Tracker {
            num_channels,
            closed: ChannelSet::new(num_channels),
            num_closed: 0,
            pending: VecDeque::new(),
            latest: CheckpointId::NONE,
            blocked: ChannelSet::new(num_channels),
        }
    }

    /// The ids of the pending checkpoints, oldest first.
    pub fn pending_ids(&self) -> Vec<CheckpointId> {
        self.pending.iter().map(|p| p.barrier.id).collect()
    }

    fn open_channels(&self) -> usize {
        self.num_channels - self.num_closed
    }

    /// Completes the pending checkpoint at `index`: it and every older one
    /// leave the queue; it triggers unless it was aborted.
    fn complete(&mut self, index: usize, now_ns: u64, signals: &mut Vec<BarrierSignal>) {
        let done = self
            .pending
            .drain(..=index)
            .next_back()
            .expect("index is valid");
        if !done.aborted {
            signals.push(BarrierSignal::Trigger {
                barrier: done.barrier,
                alignment: AlignmentStats {
                    duration_ns: now_ns.saturating_sub(done.first_ns),
                    first_barrier_ns: done.first_ns,
                    blocking: false,
                    buffered_bytes: 0,
                    unaligned: false,
                },
            });
        }
    }

    /// Rule 8.
    fn on_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        if let Some(i) = self.pending.iter().position(|p| p.barrier.id == barrier.id) {
            if self.pending[i].mark(channel) {
                self.complete(i, now_ns, signals);
            }
        } else if barrier.id > self.latest {
            self.latest = barrier.id;
            let mut entry = Pending {
                barrier,
                seen: ChannelSet::new(self.num_channels),
                seen_count: 0,
                target: self.open_channels(),
                aborted: false,
                first_ns: now_ns,
            };
            let complete = entry.mark(channel);
            self.pending.push_back(entry);
            if complete {
                self.complete(self.pending.len() - 1, now_ns, signals);
            } else if self.pending.len() > MAX_PENDING_CHECKPOINTS {
                self.pending.pop_front();
            }
        }
    }

    /// Rule 9, cancel markers.
    fn on_cancel(
        &mut self,
        channel: usize,
        id: CheckpointId,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        while self.pending.front().is_some_and(|p| p.barrier.id < id) {
            let older = self.pending.pop_front().expect("front exists");
            if !older.aborted {
                signals.push(BarrierSignal::Abort {
                    id: older.barrier.id,
                    reason: AbortReason::Canceled,
                });
            }
        }
        if let Some(front) = self.pending.front_mut().filter(|p| p.barrier.id == id) {
            if !front.aborted {
                front.aborted = true;
                signals.push(BarrierSignal::Abort {
                    id,
                    reason: AbortReason::Canceled,
                });
            }
            if front.mark(channel) {
                self.pending.pop_front();
            }
        } else if id > self.latest {
            self.latest = id;
            signals.push(BarrierSignal::Abort {
                id,
                reason: AbortReason::Canceled,
            });
            let mut marker = Pending {
                barrier: CheckpointBarrier::new(id, now_ns),
                seen: ChannelSet::new(self.num_channels),
                seen_count: 0,
                target: self.open_channels(),
                aborted: true,
                first_ns: now_ns,
            };
            if !marker.mark(channel) {
                // Every older entry was removed above, so the queue is empty.
                self.pending.push_front(marker);
            }
        }
    }

    /// Rule 9, end of partition.
    fn on_end_of_partition(
        &mut self,
        channel: usize,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) {
        if !self.closed.insert(channel) {
            return;
        }
        self.num_closed += 1;
        for i in (0..self.pending.len()).rev() {
            if self.pending[i].mark(channel) {
                self.complete(i, now_ns, signals);
                return;
            }
        }
    }
}

impl<T> BarrierHandler<T> for Tracker {
    #[inline]
    fn on_element(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>> {
        assert!(
            channel < self.num_channels,
            "channel {channel} out of range"
        );
        match element {
            StreamElement::Records(_) | StreamElement::Watermark(_) | StreamElement::Idle(_) => {
                Some(element)
            }
            StreamElement::Barrier(barrier) => {
                self.on_barrier(channel, barrier, now_ns, signals);
                None
            }
            StreamElement::CancelCheckpoint(id) => {
                self.on_cancel(channel, id, now_ns, signals);
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

    fn is_blocked(&self, _channel: usize) -> bool {
        false
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

    fn end_of_input(&mut self) {}

    fn held_bytes(&self) -> u64 {
        0
    }
}
