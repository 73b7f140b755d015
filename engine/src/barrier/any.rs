//! [`AnyHandler`]: the aligned, tracking or unaligned handler, chosen at
//! run time.

use super::{
    Aligner, BarrierHandler, BarrierSignal, ChannelSet, CheckpointMode, HandlerConfig, Tracker,
    Unaligned,
};
use crate::types::element::{RecordSize, StreamElement};

/// Either handler, chosen by the checkpointing mode at run time, so that a
/// task's loop is not generic over the mode.
#[derive(Debug)]
pub enum AnyHandler<T> {
    /// Exactly-once.
    Aligner(Aligner<T>),
    /// At-least-once (also used with no checkpoints, where it sees no
    /// barriers and only passes elements on).
    Tracker(Tracker),
    /// Unaligned checkpoints.
    Unaligned(Unaligned),
}

impl<T: RecordSize> AnyHandler<T> {
    /// The handler for `mode` over `channels` inputs. `aligned_timeout_ns`
    /// (exactly-once only, rule 19): aligned checkpoints switch to
    /// unaligned this long after their trigger, with the
    /// [`Unaligned`] handler.
    pub fn new(
        mode: CheckpointMode,
        channels: usize,
        config: HandlerConfig,
        aligned_timeout_ns: Option<u64>,
    ) -> Self {
        match (mode, aligned_timeout_ns) {
            (CheckpointMode::ExactlyOnce, Some(t)) if t > 0 => {
                AnyHandler::Unaligned(Unaligned::with_aligned_timeout(channels, t))
            }
            (CheckpointMode::ExactlyOnce, Some(_)) | (CheckpointMode::Unaligned, _) => {
                AnyHandler::Unaligned(Unaligned::new(channels))
            }
            (CheckpointMode::ExactlyOnce, None) => {
                AnyHandler::Aligner(Aligner::new(channels, config))
            }
            (CheckpointMode::AtLeastOnce | CheckpointMode::None, _) => {
                AnyHandler::Tracker(Tracker::new(channels))
            }
        }
    }

    /// The unaligned handler, if this is one.
    pub fn as_unaligned(&self) -> Option<&Unaligned> {
        match self {
            AnyHandler::Unaligned(h) => Some(h),
            _ => None,
        }
    }

    /// The unaligned handler, if this is one.
    pub fn as_unaligned_mut(&mut self) -> Option<&mut Unaligned> {
        match self {
            AnyHandler::Unaligned(h) => Some(h),
            _ => None,
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $h:ident => $e:expr) => {
        match $self {
            AnyHandler::Aligner($h) => $e,
            AnyHandler::Tracker($h) => $e,
            AnyHandler::Unaligned($h) => $e,
        }
    };
}

impl<T: RecordSize> BarrierHandler<T> for AnyHandler<T> {
    #[inline]
    fn on_element(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>> {
        dispatch!(self, h => h.on_element(channel, element, now_ns, signals))
    }
    #[inline]
    fn next_replay(&mut self) -> Option<(usize, StreamElement<T>)> {
        dispatch!(self, h => BarrierHandler::<T>::next_replay(h))
    }
    #[inline]
    fn has_replay(&self) -> bool {
        dispatch!(self, h => BarrierHandler::<T>::has_replay(h))
    }
    #[inline]
    fn is_blocked(&self, channel: usize) -> bool {
        dispatch!(self, h => BarrierHandler::<T>::is_blocked(h, channel))
    }
    fn blocked(&self) -> &ChannelSet {
        dispatch!(self, h => BarrierHandler::<T>::blocked(h))
    }
    #[inline]
    fn blocker_full(&self) -> bool {
        dispatch!(self, h => BarrierHandler::<T>::blocker_full(h))
    }
    fn num_channels(&self) -> usize {
        dispatch!(self, h => BarrierHandler::<T>::num_channels(h))
    }
    fn num_closed(&self) -> usize {
        dispatch!(self, h => BarrierHandler::<T>::num_closed(h))
    }
    fn end_of_input(&mut self) {
        dispatch!(self, h => BarrierHandler::<T>::end_of_input(h))
    }
    fn held_bytes(&self) -> u64 {
        dispatch!(self, h => BarrierHandler::<T>::held_bytes(h))
    }
}
