//! Event-time watermarks of a task with several input channels, as a pure
//! state machine (like the barrier handlers): fed what each channel
//! delivers, it answers the task's new watermark and idle status.

use crate::types::element::Watermark;

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
