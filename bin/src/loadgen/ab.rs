//! `loadgen --ab SECONDS`: what checkpointing costs the record path,
//! measured inside one run.
//!
//! The run is cut into segments of SECONDS, in three groups: `on`
//! (periodic checkpoints on), `off` and `off-control` (both off: the A/A
//! control). The order is random, one segment of each group per block of
//! three, shuffled (seeded by `--seed`), so that a drift of the machine
//! over the run falls on every group alike. After a switch, records count
//! for no group until 200 ms have passed *and* the switch took effect: the
//! first checkpoint after it completed (off to on), or the last one
//! pending completed (on to off). A record counts in the segment of its
//! intended send time, through the report's intervals (10 ms with `--ab`;
//! those wholly inside a segment's counted part).
//!
//! A group's percentiles are those of the histogram pooled over its
//! segments, not medians over segments: a segment holds a few thousand
//! records, whose p99.9 alone is a handful of values, and the random order
//! already spreads the machine's drift over the groups. With committed
//! output, the committed latency is the on segments' (at a switch to off
//! one checkpoint more is asked for, once the sink has every record the
//! sources were to send before the switch, so that the segment's last
//! records are committed then). A ratio (on / off)
//! is reported as measured only when the control's (off / off-control)
//! is within 1 +- 0.1: otherwise the run cannot tell an effect of that
//! size from the machine's noise.

use hdrhistogram::Histogram;
use lockgate::JobHandle;
use lockgate_workloads::latency::{new_interval_histogram, Percentiles};
use lockgate_workloads::refjob::RefJobResults;
use serde::{Deserialize, Serialize};

/// Records count only this long after a switch, at least.
const SETTLE_NS: u64 = 200_000_000;

/// The groups, in the order the JSON lists them.
pub(crate) const GROUPS: [&str; 3] = ["on", "off", "off-control"];

/// One segment as it ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Segment {
    /// Index into [`GROUPS`].
    pub group: usize,
    /// When the switch was asked for, ns on the engine's clock.
    pub switch_ns: u64,
    /// From when its records count (0: never, the run ended first).
    pub counted_from_ns: u64,
    /// Its end.
    pub end_ns: u64,
    /// Records delivered at `counted_from_ns` and at `end_ns` (W1's
    /// records/s).
    pub delivered_from: u64,
    pub delivered_end: u64,
}

/// Switches checkpointing on and off along the schedule while the job
/// runs.
#[derive(Debug)]
pub(crate) struct AbDriver {
    segment_ns: u64,
    begin_ns: u64,
    schedule: Vec<usize>,
    next: usize,
    current: Option<(Segment, u64)>,
    pub(crate) done: Vec<Segment>,
    /// Timed workloads: the sources' total rate, records/s (0: W1, a
    /// closed loop).
    rate: u64,
    /// After a switch to off: the checkpoint that commits the on
    /// segment's last records waits until the sink has this many (see
    /// `step`).
    commit_after: Option<u64>,
}

impl AbDriver {
    /// Segments of `segment_ns` from `begin_ns` on (engine clock), `blocks`
    /// blocks of one segment per group, shuffled by `seed`.
    pub(crate) fn new(segment_ns: u64, begin_ns: u64, blocks: usize, seed: u64, rate: u64) -> Self {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next_u64 = move || {
            // xorshift64*: a fixed, seeded order.
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut schedule = Vec::with_capacity(blocks * 3);
        for _ in 0..blocks {
            let mut block = [0usize, 1, 2];
            for i in (1..3).rev() {
                let j = (next_u64() % (i as u64 + 1)) as usize;
                block.swap(i, j);
            }
            schedule.extend(block);
        }
        AbDriver {
            segment_ns,
            begin_ns,
            schedule,
            next: 0,
            current: None,
            done: Vec::new(),
            rate,
            commit_after: None,
        }
    }

    /// Records the sources of a timed workload were to send before `at_ns`
    /// (they pace from their first record on, `started_ns`); `None` for a
    /// closed loop or before the first record.
    fn intended_before(&self, at_ns: u64, started_ns: u64) -> Option<u64> {
        (self.rate > 0 && started_ns > 0).then(|| {
            (u128::from(at_ns.saturating_sub(started_ns)) * u128::from(self.rate) / 1_000_000_000)
                as u64
        })
    }

    /// Moves the schedule on: called often (every few ms) while the job
    /// runs.
    pub(crate) fn step(&mut self, handle: &JobHandle, results: &RefJobResults) {
        let now = lockgate::tuning::now_ns();
        if now < self.begin_ns {
            return;
        }
        if let Some(target) = self.commit_after {
            // The on segment's last records, sent late when the sources
            // run behind their schedule, must be before this checkpoint's
            // barrier: else they wait in the open transaction through the
            // off segments (0.5-2 s, W2 with 1,000,000 keys), a harness
            // artefact. Bounded: a sink that never gets them (a failure,
            // the end of the run) does not hold the schedule.
            let waited = self
                .current
                .as_ref()
                .is_some_and(|(s, _)| now >= s.switch_ns + SETTLE_NS / 2);
            if results.progress().delivered >= target || waited {
                self.commit_after = None;
                let _ = handle.trigger_checkpoint();
            }
        }
        if let Some((seg, completed_at_switch)) = &mut self.current {
            if seg.counted_from_ns == 0 && now >= seg.switch_ns + SETTLE_NS {
                let c = handle.checkpoint_counts();
                let settled = if seg.group == 0 {
                    c.completed > *completed_at_switch
                } else {
                    c.in_progress == 0 && self.commit_after.is_none()
                };
                if settled {
                    seg.counted_from_ns = now;
                    seg.delivered_from = results.progress().delivered;
                }
            }
            if now < seg.switch_ns + self.segment_ns {
                return;
            }
            let (mut seg, _) = self.current.take().expect("a segment runs");
            seg.end_ns = now;
            seg.delivered_end = results.progress().delivered;
            self.done.push(seg);
        }
        let Some(&group) = self.schedule.get(self.next) else {
            // The schedule is over: checkpoints on, as the run began.
            handle.set_periodic_checkpoints(true);
            return;
        };
        self.next += 1;
        let was_on = self.done.last().is_some_and(|s| s.group == 0);
        handle.set_periodic_checkpoints(group == 0);
        if was_on && group != 0 {
            // One more checkpoint, asked for: the records of the segment
            // that ended are committed by it, not left waiting for the next
            // segment with checkpoints (committed output); once the sink
            // has them all, for a timed workload (above).
            let progress = results.progress();
            match self.intended_before(now, progress.started_ns) {
                Some(n) if progress.delivered < n => self.commit_after = Some(n),
                _ => {
                    let _ = handle.trigger_checkpoint();
                }
            }
        }
        self.current = Some((
            Segment {
                group,
                switch_ns: now,
                ..Segment::default()
            },
            handle.checkpoint_counts().completed,
        ));
    }
}

/// One group's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct AbGroup {
    /// `on`, `off` or `off-control`.
    pub name: String,
    /// Segments whose records counted.
    pub segments: usize,
    /// Latency (processing), pooled over the group's segments, ns.
    pub latency_ns: Percentiles,
    /// `--output committed`: committed latency, pooled, ns.
    #[serde(default)]
    pub committed_latency_ns: Option<Percentiles>,
    /// Records delivered per second over the counted parts (W1).
    pub records_per_s: f64,
}

/// The comparison of one percentile: on / off, and the control's off /
/// off-control.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct AbRatio {
    /// `p50`, `p99`, `p99.9` or `records/s`.
    pub what: String,
    /// on / off.
    pub ratio: f64,
    /// off / off-control.
    pub control: f64,
    /// The control is within 1 +- 0.1.
    pub measured: bool,
}

/// `--ab`'s report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct AbReport {
    /// A segment's length, s.
    pub segment_s: f64,
    /// How a group's percentiles are computed.
    pub method: String,
    pub groups: Vec<AbGroup>,
    pub ratios: Vec<AbRatio>,
    /// Every segment, in run order.
    pub segments: Vec<Segment>,
}

/// The histogram pooled over the 100 ms intervals (of intended send time,
/// from `start_ns`) wholly inside the counted parts of `segments`.
fn pooled(
    intervals: &[Histogram<u64>],
    start_ns: u64,
    interval_ns: u64,
    segments: &[&Segment],
) -> Option<Histogram<u64>> {
    let mut h = new_interval_histogram();
    for s in segments {
        if s.counted_from_ns == 0 || start_ns == 0 {
            continue;
        }
        let first = s
            .counted_from_ns
            .saturating_sub(start_ns)
            .div_ceil(interval_ns);
        let end = s.end_ns.saturating_sub(start_ns) / interval_ns;
        for i in first..end {
            if let Some(x) = intervals.get(i as usize) {
                let _ = h.add(x);
            }
        }
    }
    (!h.is_empty()).then_some(h)
}

impl AbReport {
    /// The figures of `segments`, from the run's intervals (`committed`:
    /// the committed latency's, with committed output).
    pub(crate) fn new(
        segment_ns: u64,
        segments: Vec<Segment>,
        intervals: &[Histogram<u64>],
        committed: Option<&[Histogram<u64>]>,
        start_ns: u64,
        interval_ns: u64,
    ) -> Self {
        let interval_ns = interval_ns.max(1);
        let mut groups = Vec::new();
        for (g, name) in GROUPS.iter().enumerate() {
            let segs: Vec<&Segment> = segments
                .iter()
                .filter(|s| s.group == g && s.counted_from_ns > 0)
                .collect();
            let (records, ns) = segs.iter().fold((0u64, 0u64), |(r, t), s| {
                (
                    r + s.delivered_end.saturating_sub(s.delivered_from),
                    t + s.end_ns.saturating_sub(s.counted_from_ns),
                )
            });
            groups.push(AbGroup {
                name: name.to_string(),
                segments: segs.len(),
                latency_ns: pooled(intervals, start_ns, interval_ns, &segs)
                    .map(|h| Percentiles::from_histogram(&h))
                    .unwrap_or_default(),
                // Only the on segments commit while they run.
                committed_latency_ns: committed.filter(|_| g == 0).and_then(|c| {
                    pooled(c, start_ns, interval_ns, &segs).map(|h| Percentiles::from_histogram(&h))
                }),
                records_per_s: if ns == 0 {
                    0.0
                } else {
                    records as f64 / (ns as f64 / 1e9)
                },
            });
        }
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut ratios = Vec::new();
        let (on, off, ctl) = (&groups[0], &groups[1], &groups[2]);
        if on.latency_ns.count > 0 && off.latency_ns.count > 0 && ctl.latency_ns.count > 0 {
            for (what, get) in [
                ("p50", (|p: &Percentiles| p.p50) as fn(&Percentiles) -> u64),
                ("p99", |p| p.p99),
                ("p99.9", |p| p.p999),
            ] {
                let control = ratio(get(&off.latency_ns) as f64, get(&ctl.latency_ns) as f64);
                ratios.push(AbRatio {
                    what: what.into(),
                    ratio: ratio(get(&on.latency_ns) as f64, get(&off.latency_ns) as f64),
                    control,
                    measured: (control - 1.0).abs() <= 0.1,
                });
            }
        }
        if off.records_per_s > 0.0 && ctl.records_per_s > 0.0 {
            let control = ratio(off.records_per_s, ctl.records_per_s);
            ratios.push(AbRatio {
                what: "records/s".into(),
                ratio: ratio(on.records_per_s, off.records_per_s),
                control,
                measured: (control - 1.0).abs() <= 0.1,
            });
        }
        AbReport {
            segment_s: segment_ns as f64 / 1e9,
            method:
                "pooled: each group's histogram merged over its segments' counted 10 ms intervals"
                    .into(),
            groups,
            ratios,
            segments,
        }
    }

    /// The report's lines.
    pub(crate) fn human(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "  A/B:         checkpointing on against off inside this run, {:.2} s segments in random order ({}); per group, µs:",
            self.segment_s, self.method
        );
        for g in &self.groups {
            let c = match &g.committed_latency_ns {
                Some(c) => format!(
                    ", committed p50 {:.1} p99 {:.1}",
                    c.p50 as f64 / 1e3,
                    c.p99 as f64 / 1e3
                ),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "    {:<12} {:>3} segments, {:>8} values: p50 {:.1}  p99 {:.1}  p99.9 {:.1}{c}; {:.0} records/s",
                g.name,
                g.segments,
                g.latency_ns.count,
                g.latency_ns.p50 as f64 / 1e3,
                g.latency_ns.p99 as f64 / 1e3,
                g.latency_ns.p999 as f64 / 1e3,
                g.records_per_s
            );
        }
        for r in &self.ratios {
            let _ = writeln!(
                s,
                "    {:<9} on/off {:.3}, control off/off-control {:.3}{}",
                r.what,
                r.ratio,
                r.control,
                if r.measured {
                    ""
                } else {
                    ": not measurable (the control is off 1 by more than 0.1)"
                }
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_holds_each_group_once_in_a_seeded_order() {
        let a = AbDriver::new(1, 0, 20, 7, 0);
        assert_eq!(a.schedule.len(), 60);
        for block in a.schedule.chunks(3) {
            let mut b = block.to_vec();
            b.sort_unstable();
            assert_eq!(b, [0, 1, 2]);
        }
        assert_eq!(a.schedule, AbDriver::new(1, 0, 20, 7, 0).schedule);
        assert_ne!(a.schedule, AbDriver::new(1, 0, 20, 8, 0).schedule);
    }

    #[test]
    fn groups_pool_the_intervals_of_their_counted_parts() {
        // Intervals of 100 ms: latency 1 µs in 0..10, 2 µs in 10..20, 1 µs
        // in 20..30.
        let mut intervals = Vec::new();
        for i in 0..30 {
            let mut h = new_interval_histogram();
            h.record(if (10..20).contains(&i) { 2_000 } else { 1_000 })
                .unwrap();
            intervals.push(h);
        }
        let ms = 1_000_000;
        let seg = |group, from, end| Segment {
            group,
            switch_ns: from,
            counted_from_ns: from,
            end_ns: end,
            ..Segment::default()
        };
        // start at 1 s: interval i spans 1 s + i * 100 ms.
        let start = 1_000 * ms;
        let segments = vec![
            seg(0, start + 1_000 * ms, start + 2_000 * ms),
            seg(1, start, start + 1_000 * ms),
            seg(2, start + 2_000 * ms, start + 3_000 * ms),
        ];
        let r = AbReport::new(1_000 * ms, segments, &intervals, None, start, 100 * ms);
        assert_eq!(r.groups[0].latency_ns.count, 10);
        assert!(r.groups[0].latency_ns.p50.abs_diff(2_000) < 50);
        let p50 = &r.ratios[0];
        assert!((p50.ratio - 2.0).abs() < 0.05 && (p50.control - 1.0).abs() < 0.01 && p50.measured);
    }
}
