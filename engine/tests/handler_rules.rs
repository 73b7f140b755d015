//! One test (or a few) per rule of the barrier handler contract
//! (`testdata/scenarios/README.md`, rules 1-10), with the edge cases the
//! scenario files do not reach, and the rules for watermarks and idle
//! markers (`testdata/scenarios/EXTENSIONS.md`: elements like records).

use lockgate::{
    barrier::AbortReason, barrier::Aligner, barrier::BarrierHandler, barrier::BarrierSignal,
    barrier::CheckpointBarrier, barrier::HandlerConfig, barrier::StreamElement, barrier::Tracker,
    CheckpointId, RecordSize, Watermark,
};

/// A record of the rule tests: a buffer's id and its size in bytes, which
/// is what it counts for in the alignment limit (rule 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Buffer {
    id: u64,
    size: usize,
}

impl RecordSize for Buffer {
    const FIXED_SIZE: bool = false;
    fn size_bytes(&self) -> usize {
        self.size
    }
}

type El = StreamElement<Buffer>;

/// A record of `size` bytes with id `id`.
fn r(id: u64, size: usize) -> El {
    StreamElement::Records(vec![Buffer { id, size }])
}
/// A barrier for checkpoint `id`.
fn b(id: u64) -> El {
    StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(id), 0))
}
/// A cancel marker for checkpoint `id`.
fn c(id: u64) -> El {
    StreamElement::CancelCheckpoint(CheckpointId(id))
}
/// End of partition.
fn e() -> El {
    StreamElement::EndOfPartition
}
/// A watermark of `t` ms.
fn w(t: i64) -> El {
    StreamElement::Watermark(Watermark(t))
}
/// A watermark status change (`true`: idle).
fn idle(i: bool) -> El {
    StreamElement::Idle(i)
}

/// A notification, with how many records had been handed on before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Note {
    Trigger(u64, usize),
    Abort(u64, AbortReason, usize),
}
use Note::{Abort, Trigger};

/// Drives a handler like an input gate: `feed` feeds one element and then
/// drains the replay; `feed_only` does not drain.
struct Gate<H> {
    h: H,
    /// Records handed on: (channel, id).
    out: Vec<(usize, u64)>,
    /// Every element handed on (records, watermarks, idle markers, ends of
    /// partition), with its channel, in order.
    handed: Vec<(usize, El)>,
    notes: Vec<Note>,
    ends: Vec<usize>,
    signals: Vec<BarrierSignal>,
}

impl<H: BarrierHandler<Buffer>> Gate<H> {
    fn new(h: H) -> Self {
        Gate {
            h,
            out: Vec::new(),
            handed: Vec::new(),
            notes: Vec::new(),
            ends: Vec::new(),
            signals: Vec::new(),
        }
    }

    /// Feeds one element without draining the replay; returns whether the
    /// handler handed it on.
    fn feed_only(&mut self, ch: usize, el: El) -> bool {
        let passed = self.h.on_element(ch, el, 0, &mut self.signals);
        for s in self.signals.drain(..) {
            self.notes.push(match s {
                BarrierSignal::Trigger { barrier, .. } => Trigger(barrier.id.get(), self.out.len()),
                BarrierSignal::Abort { id, reason } => Abort(id.get(), reason, self.out.len()),
                BarrierSignal::ChannelStateDone { .. } => {
                    panic!("the aligner and the tracker never report channel state")
                }
            });
        }
        if let Some(el) = &passed {
            self.handed.push((ch, el.clone()));
        }
        match passed {
            Some(StreamElement::Records(batch)) => {
                self.out.extend(batch.iter().map(|x| (ch, x.id)));
                true
            }
            Some(StreamElement::EndOfPartition) => {
                self.ends.push(ch);
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Replays one released element; false when none waits.
    fn replay_one(&mut self) -> bool {
        match self.h.next_replay() {
            Some((ch, el)) => {
                self.feed_only(ch, el);
                true
            }
            None => false,
        }
    }

    fn drain(&mut self) {
        while self.replay_one() {}
    }

    /// Feeds one element, then drains the replay; returns whether the
    /// element itself was handed on.
    fn feed(&mut self, ch: usize, el: El) -> bool {
        let passed = self.feed_only(ch, el);
        self.drain();
        passed
    }

    fn ids(&self) -> Vec<u64> {
        self.out.iter().map(|&(_, id)| id).collect()
    }
}

fn aligner(channels: usize) -> Gate<Aligner<Buffer>> {
    Gate::new(Aligner::new(
        channels,
        HandlerConfig {
            max_alignment_bytes: None,
            blocker_capacity_bytes: u64::MAX,
        },
    ))
}

fn aligner_with_limit(channels: usize, limit: u64) -> Gate<Aligner<Buffer>> {
    Gate::new(Aligner::new(
        channels,
        HandlerConfig {
            max_alignment_bytes: Some(limit),
            blocker_capacity_bytes: u64::MAX,
        },
    ))
}

fn tracker(channels: usize) -> Gate<Tracker> {
    Gate::new(Tracker::new(channels))
}

// ---- Rule 1: block ----

#[test]
fn rule1_a_blocked_channel_holds_records_and_events_until_replayed() {
    let mut g = aligner(3);
    g.feed(0, b(1));
    assert!(g.h.is_blocked(0) && !g.h.is_blocked(1));
    assert!(
        !g.feed(0, r(10, 7)),
        "a record of a blocked channel is held"
    );
    assert!(!g.feed(0, c(1)), "a cancel of a blocked channel is held");
    assert!(
        !g.feed(0, e()),
        "an end of partition of a blocked channel is held"
    );
    assert_eq!(g.h.held_bytes(), 7);
    assert_eq!(
        g.h.num_closed(),
        0,
        "the held end of partition has not acted"
    );
    assert!(g.notes.is_empty(), "the held cancel has not acted");
    assert!(g.feed(1, r(11, 7)), "an unblocked channel passes");
    g.feed(1, b(1));
    g.feed(2, b(1));
    // Triggered before the held record; the replayed cancel(1) is for a
    // triggered checkpoint and is ignored; the replayed end acts now.
    assert_eq!(g.notes, vec![Trigger(1, 1)]);
    assert_eq!(g.ids(), vec![11, 10]);
    assert_eq!(g.ends, vec![0]);
    assert_eq!(g.h.num_closed(), 1);
    assert_eq!(g.h.held_bytes(), 0);
}

#[test]
fn rule1_a_watermark_on_a_blocked_channel_is_held_and_replayed_in_order_with_records() {
    let mut g = aligner(2);
    assert!(g.feed(0, w(5)), "a watermark before the barrier passes");
    g.feed(0, b(1));
    assert!(!g.feed(0, r(1, 4)));
    assert!(
        !g.feed(0, w(10)),
        "a watermark of a blocked channel is held"
    );
    assert!(
        !g.feed(0, idle(true)),
        "an idle marker of a blocked channel is held"
    );
    assert!(!g.feed(0, r(2, 4)));
    assert_eq!(
        g.h.held_bytes(),
        8,
        "watermarks and idle markers count 0 bytes"
    );
    assert!(
        g.feed(1, w(7)),
        "a watermark of an unblocked channel passes"
    );
    assert!(!g.feed_only(1, b(1)));
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    // The replay hands back the held elements in arrival order; fed again,
    // each passes (the alignment is over).
    let mut replayed = Vec::new();
    while let Some((ch, el)) = g.h.next_replay() {
        replayed.push((ch, el.clone()));
        assert!(g.feed_only(ch, el), "replayed after the trigger, it passes");
    }
    assert_eq!(
        replayed,
        vec![(0, r(1, 4)), (0, w(10)), (0, idle(true)), (0, r(2, 4))]
    );
    assert_eq!(
        g.handed,
        vec![
            (0, w(5)),
            (1, w(7)),
            (0, r(1, 4)),
            (0, w(10)),
            (0, idle(true)),
            (0, r(2, 4))
        ]
    );
    assert_eq!(g.h.held_bytes(), 0);
}

#[test]
fn rule2_a_held_watermark_behind_a_newer_barrier_is_held_again_until_its_trigger() {
    let mut g = aligner(2);
    g.feed(0, b(1));
    g.feed(0, w(1));
    g.feed(0, b(2));
    g.feed(0, w(2));
    // Barrier 2 on ch 1 subsumes 1 and releases ch 0's held w1, B2, w2.
    g.feed_only(1, b(2));
    assert_eq!(g.notes, vec![Abort(1, AbortReason::Subsumed, 0)]);
    assert!(g.handed.is_empty());
    assert!(g.replay_one()); // w1: before B2 on ch 0, so before trigger 2
    assert_eq!(g.handed, vec![(0, w(1))]);
    assert_eq!(g.notes.len(), 1);
    assert!(g.replay_one()); // B2 of ch 0 completes checkpoint 2
    assert_eq!(g.notes[1], Trigger(2, 0));
    assert_eq!(g.handed.len(), 1, "w2 follows B2: not yet handed on");
    assert!(g.replay_one());
    assert!(!g.replay_one());
    assert_eq!(g.handed, vec![(0, w(1)), (0, w(2))]);
}

// ---- Rule 2: replay ----

#[test]
fn rule2_held_elements_replay_in_arrival_order_before_new_input() {
    let mut g = aligner(3);
    g.feed(0, b(1));
    g.feed(1, b(1));
    for (ch, id) in [(0, 1), (1, 2), (0, 3), (1, 4)] {
        g.feed(ch, r(id, 1));
    }
    assert!(g.out.is_empty());
    assert!(!g.feed_only(2, b(1)));
    assert!(g.h.has_replay());
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    g.drain();
    assert_eq!(g.out, vec![(0, 1), (1, 2), (0, 3), (1, 4)]);
}

#[test]
fn rule2_a_newer_release_replays_before_the_rest_of_an_older_replay() {
    let mut g = aligner(3);
    g.feed(0, b(1));
    g.feed(1, b(1));
    // Held for checkpoint 1, in this arrival order:
    // a@0, B2@0, b@0, c@1, B3@1, d@1, e@0.
    g.feed(0, r(0xa, 1));
    g.feed(0, b(2));
    g.feed(0, r(0xb, 1));
    g.feed(1, r(0xc, 1));
    g.feed(1, b(3));
    g.feed(1, r(0xd, 1));
    g.feed(0, r(0xe, 1));
    g.feed_only(2, b(1)); // triggers 1; the older replay starts
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    // Replay: a passes; B2@0 starts aligning 2 (blocks ch0); b is held again.
    for _ in 0..3 {
        assert!(g.replay_one());
    }
    assert_eq!(g.ids(), vec![0xa]);
    assert_eq!(g.h.held_bytes(), 1, "b is held for checkpoint 2");
    // c passes; B3@1 subsumes 2 while the older replay (d, e) is still
    // queued: b (just released) must come before d and e.
    g.drain();
    assert_eq!(
        g.notes,
        vec![Trigger(1, 0), Abort(2, AbortReason::Subsumed, 2)]
    );
    assert_eq!(
        g.ids(),
        vec![0xa, 0xc, 0xb, 0xe],
        "d is held for checkpoint 3"
    );
    assert!(g.h.is_blocked(1) && !g.h.is_blocked(0));
    assert_eq!(g.h.held_bytes(), 1);
}

// ---- Rule 3: trigger ----

#[test]
fn rule3_trigger_comes_before_any_held_record_and_only_when_all_aligned() {
    let mut g = aligner(3);
    g.feed(0, r(1, 1));
    g.feed(0, b(1));
    g.feed(0, r(2, 1));
    g.feed(1, b(1));
    g.feed(1, r(3, 1));
    g.feed(2, r(4, 1));
    assert!(g.notes.is_empty(), "channel 2 has not delivered barrier 1");
    g.feed(2, b(1));
    assert_eq!(g.notes, vec![Trigger(1, 2)]);
    assert_eq!(g.ids(), vec![1, 4, 2, 3]);
}

#[test]
fn rule3_a_single_channel_triggers_a_newer_barrier_at_once() {
    let mut g = aligner(1);
    g.feed(0, r(1, 1));
    g.feed(0, b(3));
    assert!(!g.h.is_blocked(0));
    g.feed(0, r(2, 1));
    g.feed(0, b(3)); // equal to the current one: ignored
    g.feed(0, b(2)); // older: ignored
    g.feed(0, b(4));
    assert_eq!(g.notes, vec![Trigger(3, 1), Trigger(4, 2)]);
    assert_eq!(g.ids(), vec![1, 2]);
}

// ---- Rule 4: subsume ----

#[test]
fn rule4_a_newer_barrier_mid_alignment_subsumes_and_starts_the_new_one() {
    let mut g = aligner(3);
    g.feed(0, b(1));
    g.feed(2, b(1));
    g.feed(0, r(1, 1)); // held for 1
    g.feed(1, b(2)); // subsumes 1
    assert_eq!(g.notes, vec![Abort(1, AbortReason::Subsumed, 0)]);
    assert_eq!(g.ids(), vec![1], "released at the abort");
    assert!(g.h.is_blocked(1) && !g.h.is_blocked(0) && !g.h.is_blocked(2));
    // A late barrier 1 is older than the aligning checkpoint: ignored,
    // its channel stays unblocked.
    g.feed(0, b(1));
    assert!(!g.h.is_blocked(0));
    g.feed(0, r(2, 1));
    g.feed(0, b(2));
    g.feed(2, b(2));
    assert_eq!(
        g.notes,
        vec![Abort(1, AbortReason::Subsumed, 0), Trigger(2, 2)]
    );
    // Equal to the current checkpoint with no alignment running: ignored.
    g.feed(1, b(2));
    assert!(!g.h.is_blocked(1));
    assert_eq!(g.notes.len(), 2);
}

// ---- Rule 5: cancel ----

#[test]
fn rule5_cancel_of_the_aligning_checkpoint_releases_and_aborts_it() {
    let mut g = aligner(3);
    g.feed(0, b(2));
    g.feed(0, r(1, 1));
    g.feed(1, c(2));
    assert_eq!(g.notes, vec![Abort(2, AbortReason::Canceled, 0)]);
    assert_eq!(g.ids(), vec![1]);
    assert!(g.h.blocked().is_empty());
    // Its later barriers are ignored.
    g.feed(2, b(2));
    assert!(!g.h.is_blocked(2));
    assert_eq!(g.notes.len(), 1);
}

#[test]
fn rule5_cancel_of_an_older_checkpoint_is_ignored() {
    let mut g = aligner(3);
    g.feed(0, b(3));
    g.feed(1, c(2));
    assert!(g.notes.is_empty());
    assert!(g.h.is_blocked(0), "the alignment of 3 goes on");
    g.feed(1, b(3));
    g.feed(2, b(3));
    assert_eq!(g.notes, vec![Trigger(3, 0)]);
    // With no alignment running, a cancel at or below the current one is
    // ignored too.
    g.feed(1, c(3));
    g.feed(1, c(1));
    assert_eq!(g.notes.len(), 1);
}

#[test]
fn rule5_cancel_of_a_newer_checkpoint_drops_the_running_one_silently() {
    let mut g = aligner(3);
    g.feed(0, b(3));
    g.feed(0, r(1, 1));
    g.feed(1, c(5));
    assert_eq!(
        g.notes,
        vec![Abort(5, AbortReason::Canceled, 0)],
        "3 is not notified"
    );
    assert_eq!(g.ids(), vec![1]);
    assert!(g.h.blocked().is_empty());
    // Barriers 5 (canceled) and 4 (older) are ignored; 6 aligns.
    g.feed(1, b(5));
    g.feed(2, b(4));
    assert!(g.h.blocked().is_empty());
    g.feed(0, b(6));
    g.feed(1, b(6));
    g.feed(2, b(6));
    assert_eq!(
        g.notes,
        vec![Abort(5, AbortReason::Canceled, 0), Trigger(6, 1)]
    );
    // A newer cancel with no alignment running aborts it.
    g.feed(2, c(7));
    assert_eq!(g.notes[2], Abort(7, AbortReason::Canceled, 1));
}

// ---- Rule 6: end of partition ----

#[test]
fn rule6_end_on_an_unblocked_channel_counts_as_aligned_and_never_aborts() {
    let mut g = aligner(3);
    g.feed(0, b(1));
    g.feed(1, b(1));
    g.feed(0, r(1, 1));
    assert!(g.feed(2, e()), "an end of partition is handed on");
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    assert_eq!(g.ids(), vec![1]);
    // And for all later checkpoints.
    g.feed(0, b(2));
    g.feed(1, b(2));
    assert_eq!(g.notes, vec![Trigger(1, 0), Trigger(2, 1)]);
    assert_eq!(g.h.num_closed(), 1);
}

#[test]
fn rule6_end_before_any_barrier_and_end_on_the_last_open_channel() {
    let mut g = aligner(3);
    g.feed(1, e());
    g.feed(0, b(1));
    assert!(g.notes.is_empty());
    g.feed(2, e()); // the last channel missing: triggers
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    g.feed(0, b(2)); // the only open channel: triggers at once
    assert_eq!(g.notes, vec![Trigger(1, 0), Trigger(2, 0)]);
}

#[test]
fn rule6_end_on_a_blocked_channel_acts_only_when_replayed() {
    let mut g = aligner(2);
    g.feed(0, b(1));
    assert!(!g.feed(0, e()));
    assert_eq!(g.h.num_closed(), 0);
    g.feed(1, b(1));
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    assert_eq!(g.ends, vec![0], "handed on when replayed");
    assert_eq!(g.h.num_closed(), 1);
    g.feed(1, b(2));
    assert_eq!(g.notes, vec![Trigger(1, 0), Trigger(2, 0)]);
}

// ---- Rule 7: alignment limit ----

#[test]
fn rule7_holding_exactly_the_limit_does_not_abort() {
    let mut g = aligner_with_limit(2, 100);
    g.feed(0, b(1));
    g.feed(0, r(1, 60));
    g.feed(0, r(2, 40));
    assert_eq!(g.h.held_bytes(), 100);
    g.feed(1, b(1));
    assert_eq!(g.notes, vec![Trigger(1, 0)]);
    assert_eq!(g.ids(), vec![1, 2]);
}

#[test]
fn rule7_one_byte_over_the_limit_aborts_and_ignores_the_rest_of_it() {
    let mut g = aligner_with_limit(2, 100);
    g.feed(0, b(1));
    g.feed(0, r(1, 60));
    g.feed(0, b(2)); // events count 0 bytes
    g.feed(0, r(2, 41));
    // Released at the abort: 1 passes, B2 starts aligning 2, 2 is held.
    assert_eq!(g.notes, vec![Abort(1, AbortReason::AlignmentLimit, 0)]);
    assert_eq!(g.ids(), vec![1]);
    assert!(g.h.is_blocked(0));
    g.feed(1, b(1)); // the rest of checkpoint 1: ignored
    assert!(!g.h.is_blocked(1));
    g.feed(1, b(2));
    assert_eq!(
        g.notes,
        vec![Abort(1, AbortReason::AlignmentLimit, 0), Trigger(2, 1)]
    );
    assert_eq!(g.ids(), vec![1, 2]);
}

#[test]
fn rule7_the_release_being_replayed_does_not_count() {
    // Checkpoint 1 holds [B2@0, y(50)@0, x(60)@1] = 110 bytes. When its
    // alignment ends, B2@0 starts aligning 2 during the replay and y is held
    // again while x's 60 bytes still wait in the release being replayed:
    // that release does not count (Flink 1.8 counts only numQueuedBytes
    // plus the blocked bytes), so 50 bytes never abort checkpoint 2.
    for (limit, want) in [
        // 110 > 100 aborts 1 when x is held; 2 goes on.
        (100, vec![Abort(1, AbortReason::AlignmentLimit, 0)]),
        // 110 is not strictly greater than 110: no abort.
        (110, vec![Trigger(1, 0)]),
    ] {
        let mut g = aligner_with_limit(3, limit);
        g.feed(0, b(1));
        g.feed(1, b(1));
        g.feed(0, b(2));
        g.feed(0, r(0xe, 50));
        g.feed(1, r(0xf, 60));
        g.feed(2, b(1));
        assert_eq!(g.notes, want, "limit {limit}");
        assert_eq!(g.ids(), vec![0xf], "y is held for checkpoint 2");
        assert_eq!(g.h.held_bytes(), 50);
        assert_eq!(g.h.aligning(), Some(CheckpointId(2)));
    }
}

#[test]
fn rule7_an_earlier_release_queued_behind_a_newer_one_counts_its_full_size() {
    // Release R1 = [r0(25), B2, r1(40), r2(30)] (95 bytes) is replayed up
    // to B2, which starts checkpoint 2; checkpoint 2 triggers while R1 is
    // still open, so its release R2 = [r3(20)] goes in front and R1 is
    // queued with its full 95 bytes (not the 70 left). While R2 replays,
    // checkpoint 3 holds r4: 95 + 5 = 100 is within a limit of 100, 95 + 6
    // is over it.
    for (r4, want_abort) in [(5, false), (6, true)] {
        let mut g = aligner_with_limit(3, 100);
        g.feed_only(0, b(1));
        g.feed_only(0, r(0, 25));
        g.feed_only(0, b(2));
        g.feed_only(0, r(1, 40));
        g.feed_only(0, r(2, 30));
        g.feed_only(1, b(1));
        g.feed_only(2, b(1)); // triggers 1: R1 opens
        assert!(g.replay_one()); // r0 passes
        assert!(g.replay_one()); // B2 starts aligning 2, blocking channel 0
        assert_eq!(g.h.aligning(), Some(CheckpointId(2)));
        assert_eq!(g.h.queued_bytes(), 0, "the open release does not count");
        g.feed_only(1, b(2));
        g.feed_only(1, r(3, 20));
        g.feed_only(2, b(2)); // triggers 2: R2 in front of R1
        assert_eq!(g.h.queued_bytes(), 95, "R1 counts as released");
        assert!(g.replay_one()); // r3 passes (R2 empty, still open)
        g.feed_only(2, b(3)); // aligns 3, blocking channel 2
        g.feed_only(2, r(4, r4));
        let aborted = g.notes.contains(&Abort(3, AbortReason::AlignmentLimit, 2));
        assert_eq!(aborted, want_abort, "r4 of {r4} bytes: {:?}", g.notes);
        g.drain();
        // R2 finishes, R1 resumes (no longer counted), then finishes too;
        // an abort of 3 first replays its own release, [r4]
        assert_eq!(g.h.queued_bytes(), 0);
        let want: &[u64] = if want_abort {
            &[0, 3, 4, 1, 2]
        } else {
            &[0, 3, 1, 2]
        };
        assert_eq!(g.ids(), want);
    }
}

#[test]
fn rule7_a_held_watermark_counts_zero_bytes() {
    let mut g = aligner_with_limit(2, 0);
    g.feed(0, b(1));
    assert!(!g.feed(0, w(3)));
    assert!(!g.feed(0, idle(true)));
    assert!(g.notes.is_empty(), "0 bytes held is not over a limit of 0");
    assert!(g.h.is_blocked(0));
    // One record byte is over the limit: abort and replay in arrival order.
    g.feed(0, r(1, 1));
    assert_eq!(g.notes, vec![Abort(1, AbortReason::AlignmentLimit, 0)]);
    assert_eq!(g.handed, vec![(0, w(3)), (0, idle(true)), (0, r(1, 1))]);
}

// ---- Blocker capacity (advice to the input gate) ----

#[test]
fn blocker_full_with_capacity_zero_is_pure_blocking() {
    let mut g = Gate::new(Aligner::new(
        2,
        HandlerConfig {
            max_alignment_bytes: None,
            blocker_capacity_bytes: 0,
        },
    ));
    g.feed(0, b(1));
    assert!(g.h.blocker_full(), "nothing may be buffered at all");
    // Advice only: the handler still accepts what it is fed.
    assert!(!g.feed(0, r(1, 5)));
    assert!(g.h.blocker_full());
    g.feed(1, b(1));
    assert_eq!(g.ids(), vec![1]);
}

#[test]
fn blocker_full_with_a_capacity_turns_on_at_the_capacity() {
    let mut g = Gate::new(Aligner::new(
        2,
        HandlerConfig {
            max_alignment_bytes: None,
            blocker_capacity_bytes: 100,
        },
    ));
    g.feed(0, b(1));
    assert!(!g.h.blocker_full());
    g.feed(0, r(1, 99));
    assert!(!g.h.blocker_full());
    g.feed(0, r(2, 1));
    assert!(g.h.blocker_full());
    g.feed(1, b(1));
    assert!(!g.h.blocker_full(), "the release empties the blocker");
    assert!(!BarrierHandler::<Buffer>::blocker_full(&Tracker::new(2)));
}

// ---- Many channels ----

#[test]
fn more_than_64_channels_align_and_track() {
    const N: usize = 130; // past the inline bitset (128) and two words
    let mut g = aligner(N);
    for ch in 0..N - 1 {
        g.feed(ch, b(1));
    }
    assert!(g.h.is_blocked(64) && g.h.is_blocked(128) && !g.h.is_blocked(129));
    assert!(!g.feed(100, r(1, 1)), "channel 100 is blocked");
    assert!(g.feed(129, r(2, 1)), "channel 129 is not");
    assert!(g.notes.is_empty());
    g.feed(129, b(1));
    assert_eq!(g.notes, vec![Trigger(1, 1)]);
    assert_eq!(g.ids(), vec![2, 1]);

    let mut t = tracker(N);
    for ch in (0..N).rev() {
        assert!(t.notes.is_empty(), "triggered before channel {ch}");
        t.feed(ch, b(1));
        t.feed(ch, r(ch as u64, 1));
    }
    assert_eq!(t.notes, vec![Trigger(1, N - 1)]);
}

// ---- End of input ----

#[test]
fn end_of_input_hands_on_everything_held_even_behind_a_newer_barrier() {
    let mut g = aligner(2);
    g.feed(0, b(1));
    g.feed(0, r(1, 1));
    g.feed(0, b(2));
    g.feed(0, r(2, 1));
    g.feed(0, c(3));
    g.feed(0, r(3, 1));
    g.h.end_of_input();
    g.drain();
    assert_eq!(g.ids(), vec![1, 2, 3]);
    assert!(g.notes.is_empty(), "ends without a notification");
    assert!(g.h.blocked().is_empty());
    assert_eq!(g.h.held_bytes(), 0);
}

#[test]
fn end_of_input_hands_on_a_held_watermark_without_a_notification() {
    let mut g = aligner(2);
    g.feed(0, b(1));
    g.feed(0, w(9));
    g.feed(0, idle(false));
    assert!(g.handed.is_empty());
    g.h.end_of_input();
    g.drain();
    assert_eq!(g.handed, vec![(0, w(9)), (0, idle(false))]);
    assert!(g.notes.is_empty());
}

// ---- Rule 8: tracker ----

#[test]
fn rule8_the_tracker_hands_on_watermarks_and_idle_markers_at_once() {
    let mut t = tracker(2);
    t.feed(0, b(1));
    assert!(t.feed(0, w(4)), "no blocking after a barrier");
    assert!(t.feed(0, idle(true)));
    assert!(t.feed(1, w(2)));
    t.feed(1, b(1));
    assert!(t.feed(1, idle(false)));
    assert_eq!(t.notes, vec![Trigger(1, 0)]);
    assert_eq!(
        t.handed,
        vec![(0, w(4)), (0, idle(true)), (1, w(2)), (1, idle(false))]
    );
    assert!(!BarrierHandler::<Buffer>::has_replay(&t.h));
}

#[test]
fn rule8_tracker_never_holds_and_tracks_several_checkpoints() {
    let mut t = tracker(3);
    assert!(t.feed(0, r(1, 1)));
    t.feed(0, b(1));
    assert!(t.feed(0, r(2, 1)), "no blocking after a barrier");
    t.feed(0, b(2));
    t.feed(1, b(1));
    t.feed(1, b(2));
    assert!(t.feed(1, r(3, 1)));
    assert_eq!(t.h.pending_ids(), vec![CheckpointId(1), CheckpointId(2)]);
    t.feed(2, b(1));
    assert_eq!(t.notes, vec![Trigger(1, 3)]);
    t.feed(2, b(2));
    assert_eq!(t.notes, vec![Trigger(1, 3), Trigger(2, 3)]);
    assert!(t.h.pending_ids().is_empty());
    assert!(!BarrierHandler::<Buffer>::has_replay(&t.h));
    assert_eq!(BarrierHandler::<Buffer>::held_bytes(&t.h), 0);
}

#[test]
fn rule8_completing_a_newer_checkpoint_drops_older_ones_silently() {
    let mut t = tracker(3);
    t.feed(0, b(1));
    t.feed(0, b(2));
    t.feed(1, b(2));
    t.feed(2, b(2));
    assert_eq!(t.notes, vec![Trigger(2, 0)]);
    // Checkpoint 1 is no longer pending and older than the newest seen.
    t.feed(1, b(1));
    t.feed(2, b(1));
    assert_eq!(t.notes, vec![Trigger(2, 0)]);
    assert!(t.h.pending_ids().is_empty());
}

#[test]
fn rule8_each_channel_counts_once() {
    let mut t = tracker(2);
    t.feed(0, b(1));
    t.feed(0, b(1)); // a duplicate: still 1 of 2
    assert!(t.notes.is_empty());
    t.feed(1, b(1));
    assert_eq!(t.notes, vec![Trigger(1, 0)]);
}

#[test]
fn rule8_a_51st_pending_checkpoint_drops_the_oldest_silently() {
    let cap = lockgate::barrier::MAX_PENDING_CHECKPOINTS as u64;
    assert_eq!(cap, 50, "Flink's MAX_CHECKPOINTS_TO_TRACK");
    let mut t = tracker(2);
    for id in 1..=cap {
        t.feed(0, b(id));
    }
    assert_eq!(t.h.pending_ids().len(), 50);
    assert_eq!(t.h.pending_ids()[0], CheckpointId(1));
    t.feed(0, b(cap + 1));
    let pending = t.h.pending_ids();
    assert_eq!(pending.len(), 50);
    assert_eq!(pending[0], CheckpointId(2), "1 was dropped");
    assert!(t.notes.is_empty(), "silently");
    t.feed(1, b(1)); // no longer pending: ignored
    assert!(t.notes.is_empty());
    t.feed(1, b(2));
    assert_eq!(t.notes, vec![Trigger(2, 0)]);
}

#[test]
fn rule8_the_target_is_the_channels_open_at_the_first_barrier() {
    let mut t = tracker(3);
    t.feed(2, e());
    t.feed(0, b(1)); // target: channels 0 and 1
    t.feed(1, b(1));
    assert_eq!(t.notes, vec![Trigger(1, 0)]);
}

// ---- Rule 9: tracker cancel and end of partition ----

#[test]
fn rule9_cancel_aborts_every_older_pending_checkpoint_and_itself_once() {
    let mut t = tracker(3);
    t.feed(0, b(1));
    t.feed(0, b(2));
    t.feed(0, b(3));
    t.feed(1, c(3));
    assert_eq!(
        t.notes,
        vec![
            Abort(1, AbortReason::Canceled, 0),
            Abort(2, AbortReason::Canceled, 0),
            Abort(3, AbortReason::Canceled, 0)
        ]
    );
    // Further barriers and cancels of 3 are absorbed without a notification.
    t.feed(2, c(3));
    t.feed(1, b(4));
    t.feed(0, b(4));
    t.feed(2, b(4));
    assert_eq!(t.notes.len(), 4);
    assert_eq!(t.notes[3], Trigger(4, 0));
}

#[test]
fn rule9_a_cancel_for_a_new_checkpoint_aborts_it_and_its_barriers_are_absorbed() {
    let mut t = tracker(2);
    t.feed(0, c(5));
    assert_eq!(t.notes, vec![Abort(5, AbortReason::Canceled, 0)]);
    t.feed(1, b(5));
    assert_eq!(t.notes.len(), 1, "no trigger for a canceled checkpoint");
    t.feed(0, c(5));
    assert_eq!(t.notes.len(), 1, "no second abort");
}

#[test]
fn rule9_end_of_partition_triggers_the_newest_complete_checkpoint_first() {
    // The newest completes: the older one is dropped silently.
    let mut t = tracker(3);
    t.feed(0, b(1));
    t.feed(0, b(2));
    t.feed(1, b(2));
    assert!(t.feed(2, e()));
    assert_eq!(t.notes, vec![Trigger(2, 0)]);
    assert!(t.h.pending_ids().is_empty());

    // Only the older one completes: it triggers, the newer stays pending.
    let mut t = tracker(3);
    t.feed(0, b(1));
    t.feed(1, b(1));
    t.feed(0, b(2));
    t.feed(2, e());
    assert_eq!(t.notes, vec![Trigger(1, 0)]);
    assert_eq!(t.h.pending_ids(), vec![CheckpointId(2)]);
    t.feed(1, b(2));
    assert_eq!(t.notes, vec![Trigger(1, 0), Trigger(2, 0)]);
}

// ---- Rule 10: both handlers ----

#[test]
fn rule10_no_checkpoint_is_notified_twice_or_triggered_after_a_newer_one() {
    // The same well-formed input through both handlers.
    let input: Vec<(usize, El)> = vec![
        (0, b(1)),
        (1, c(1)),
        (0, b(2)),
        (1, b(3)),
        (0, c(3)),
        (1, b(4)),
        (0, b(4)),
        (0, b(5)),
        (1, e()),
        (0, b(6)),
    ];
    let check = |notes: &[Note]| {
        let ids: Vec<u64> = notes
            .iter()
            .map(|n| match *n {
                Trigger(id, _) | Abort(id, _, _) => id,
            })
            .collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "{notes:?}");
        let triggers: Vec<u64> = notes
            .iter()
            .filter_map(|n| match *n {
                Trigger(id, _) => Some(id),
                _ => None,
            })
            .collect();
        assert!(triggers.windows(2).all(|w| w[0] < w[1]), "{notes:?}");
        triggers
    };
    let mut a = aligner(2);
    let mut t = tracker(2);
    for (ch, el) in input {
        a.feed(ch, el.clone());
        t.feed(ch, el);
    }
    assert_eq!(check(&a.notes), vec![4, 5, 6]);
    assert_eq!(check(&t.notes), vec![4, 5, 6]);
}
