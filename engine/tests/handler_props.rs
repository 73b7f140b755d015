//! Property test: random well-formed input sequences (records, watermarks,
//! idle markers, barriers, cancel markers, ends of partition over 1..=130
//! channels) driven through both handlers as an input gate drives them,
//! checked against a reference model of what exactly-once and at-least-once
//! mean (see `testdata/scenarios/README.md`, rules 1-10, and
//! `EXTENSIONS.md` there for watermarks: they are elements like records).
//!
//! Well-formed: on each channel the ids of barriers and cancel markers
//! strictly increase, watermarks never decrease, idle markers alternate
//! (idle, active, idle, ...), and nothing follows an end of partition.

use lockgate::{
    barrier::Aligner, barrier::BarrierHandler, barrier::BarrierSignal, barrier::CheckpointBarrier,
    barrier::HandlerConfig, barrier::StreamElement, barrier::Tracker, CheckpointId, Watermark,
};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

/// One input item; records are `u64` ids, unique over the whole input and
/// increasing in arrival order.
#[derive(Clone, Debug, PartialEq)]
enum Item {
    Records(Vec<u64>),
    Watermark(i64),
    Idle(bool),
    Barrier(u64),
    Cancel(u64),
    End,
}

/// Builds a well-formed input over `channels` channels from random words
/// (one item per word). Watermarks advance by 0 to 2 ms per channel (equal
/// ones are allowed, as in Flink), idle markers toggle per channel.
/// Checkpoint ids advance in rounds: each channel
/// delivers the next id after its last one, so that alignments complete;
/// now and then a channel skips an id (a newer checkpoint overtakes) or
/// sends a cancel marker instead of a barrier. The rates are scaled by the
/// channel count so that a round (one id over all channels) is skipped or
/// canceled about as often with 130 channels as with 2.
fn build(channels: usize, words: &[u64]) -> Vec<(usize, Item)> {
    let mut next_id = vec![1u64; channels];
    let mut ended = vec![false; channels];
    let mut watermark = vec![0i64; channels];
    let mut idle = vec![false; channels];
    let mut next_record = 0u64;
    let mut items = Vec::with_capacity(words.len());
    for &w in words {
        let Some(ch) = (0..channels)
            .map(|k| (w as usize + k) % channels)
            .find(|&c| !ended[c])
        else {
            break; // every channel ended
        };
        let kind = (w >> 16) % 100; // percent
        let rare = |shift: u32, per_round: u64| (w >> shift) % (per_round * channels as u64) == 0;
        let item = if kind < 50 {
            // 1 to 3 records per batch
            let n = 1 + (w >> 24) % 3;
            let batch = (next_record..next_record + n).collect();
            next_record += n;
            Item::Records(batch)
        } else if kind < 57 {
            // 7% watermarks
            watermark[ch] += ((w >> 24) % 3) as i64;
            Item::Watermark(watermark[ch])
        } else if kind < 60 {
            // 3% idle markers
            idle[ch] = !idle[ch];
            Item::Idle(idle[ch])
        } else if kind < 98 {
            // a skip about once in 16 rounds, a cancel about once in 8
            let id = next_id[ch] + u64::from(rare(32, 16));
            next_id[ch] = id + 1;
            if rare(40, 8) {
                Item::Cancel(id)
            } else {
                Item::Barrier(id)
            }
        } else if rare(48, 8) {
            // an end of partition about once per 400 items per channel
            ended[ch] = true;
            Item::End
        } else {
            let batch = vec![next_record];
            next_record += 1;
            Item::Records(batch)
        };
        items.push((ch, item));
    }
    items
}

fn element(item: &Item) -> StreamElement<u64> {
    match item {
        Item::Records(r) => StreamElement::Records(r.clone()),
        Item::Watermark(t) => StreamElement::Watermark(Watermark(*t)),
        Item::Idle(i) => StreamElement::Idle(*i),
        Item::Barrier(id) => StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(*id), 0)),
        Item::Cancel(id) => StreamElement::CancelCheckpoint(CheckpointId(*id)),
        Item::End => StreamElement::EndOfPartition,
    }
}

/// One element handed on, as the model compares them: a record by its id,
/// a watermark by its value, an idle marker by its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Passed {
    Record(u64),
    Watermark(i64),
    Idle(bool),
}

/// The elements of `item` that a handler must hand on, in order.
fn passed_of(item: &Item) -> Vec<Passed> {
    match item {
        Item::Records(r) => r.iter().map(|&id| Passed::Record(id)).collect(),
        Item::Watermark(t) => vec![Passed::Watermark(*t)],
        Item::Idle(i) => vec![Passed::Idle(*i)],
        _ => Vec::new(),
    }
}

/// What a handler did: records handed on `(channel, id)` in order; every
/// record, watermark and idle marker handed on `(channel, what)` in order;
/// and `(checkpoint, triggered?, records before it, items before it)` per
/// notification.
#[derive(Default, Debug)]
struct Outcome {
    output: Vec<(usize, u64)>,
    items: Vec<(usize, Passed)>,
    notes: Vec<(u64, bool, usize, usize)>,
}

/// Drives `input` through `handler` as an input gate does; `after_call` sees
/// the handler, the element fed and what it returned after each call.
fn drive<H: BarrierHandler<u64>>(
    handler: &mut H,
    input: &[(usize, Item)],
    mut after_call: impl FnMut(
        &H,
        &StreamElement<u64>,
        &Option<StreamElement<u64>>,
    ) -> Result<(), TestCaseError>,
) -> Result<Outcome, TestCaseError> {
    let mut out = Outcome::default();
    let mut signals = Vec::new();
    let mut feed = |h: &mut H, ch: usize, el: StreamElement<u64>, out: &mut Outcome| {
        let copy = el.clone();
        let passed = h.on_element(ch, el, 0, &mut signals);
        after_call(h, &copy, &passed)?;
        for s in signals.drain(..) {
            let (records, items) = (out.output.len(), out.items.len());
            out.notes.push(match s {
                BarrierSignal::Trigger { barrier, .. } => (barrier.id.get(), true, records, items),
                BarrierSignal::Abort { id, .. } => (id.get(), false, records, items),
                BarrierSignal::ChannelStateDone { .. } => {
                    return Err(TestCaseError::fail("channel state from an aligned handler"))
                }
            });
        }
        match passed {
            Some(StreamElement::Records(batch)) => {
                out.output.extend(batch.iter().map(|&id| (ch, id)));
                out.items
                    .extend(batch.iter().map(|&id| (ch, Passed::Record(id))));
            }
            Some(StreamElement::Watermark(Watermark(t))) => {
                out.items.push((ch, Passed::Watermark(t)))
            }
            Some(StreamElement::Idle(i)) => out.items.push((ch, Passed::Idle(i))),
            _ => {}
        }
        Ok::<(), TestCaseError>(())
    };
    for (ch, item) in input {
        feed(handler, *ch, element(item), &mut out)?;
        while let Some((ch, el)) = handler.next_replay() {
            feed(handler, ch, el, &mut out)?;
        }
    }
    handler.end_of_input();
    while let Some((ch, el)) = handler.next_replay() {
        feed(handler, ch, el, &mut out)?;
    }
    Ok(out)
}

/// The reference model's checks, common to both modes; `exact` adds the
/// exactly-once half (nothing after barrier n is handed on before n's
/// trigger). Watermarks and idle markers follow the same rules as records,
/// checked at their exact place in the output.
fn check_model(
    channels: usize,
    input: &[(usize, Item)],
    out: &Outcome,
    exact: bool,
) -> Result<(), TestCaseError> {
    // Records, watermarks and idle markers per channel in arrival order.
    let mut per_channel: Vec<Vec<Passed>> = vec![Vec::new(); channels];
    for (ch, item) in input {
        per_channel[*ch].extend(passed_of(item));
    }
    // Nothing lost or duplicated, per-channel order kept; `index[ch][k]`:
    // where the k-th element of channel ch is in the output.
    let mut handed: Vec<Vec<Passed>> = vec![Vec::new(); channels];
    let mut index: Vec<Vec<usize>> = vec![Vec::new(); channels];
    for (i, &(ch, p)) in out.items.iter().enumerate() {
        handed[ch].push(p);
        index[ch].push(i);
    }
    for ch in 0..channels {
        prop_assert_eq!(
            &handed[ch],
            &per_channel[ch],
            "channel {} lost, duplicated or reordered elements",
            ch
        );
    }
    // The records alone, as the notifications count them.
    let records: Vec<(usize, u64)> = out
        .items
        .iter()
        .filter_map(|&(ch, p)| match p {
            Passed::Record(id) => Some((ch, id)),
            _ => None,
        })
        .collect();
    prop_assert_eq!(&records, &out.output);
    // No checkpoint notified twice; triggers only ever newer.
    let mut notified = HashSet::new();
    let mut last_trigger = 0;
    for &(id, triggered, _, _) in &out.notes {
        prop_assert!(
            notified.insert(id),
            "checkpoint {} notified twice: {:?}",
            id,
            out.notes
        );
        if triggered {
            prop_assert!(
                id > last_trigger,
                "checkpoint {} triggered after {}",
                id,
                last_trigger
            );
            last_trigger = id;
        }
    }
    // Trigger positions.
    let mut by_channel: Vec<Vec<&Item>> = vec![Vec::new(); channels];
    for (ch, item) in input {
        by_channel[*ch].push(item);
    }
    let position: HashMap<u64, usize> = out
        .output
        .iter()
        .enumerate()
        .map(|(i, &(_, id))| (id, i))
        .collect();
    for &(n, triggered, after, after_items) in &out.notes {
        if !triggered {
            continue;
        }
        for (c, items) in by_channel.iter().enumerate() {
            // The elements before barrier n on this channel (all of them
            // when it has no barrier n: it must have ended for n to
            // trigger) are handed on before the trigger; in exactly-once
            // mode the ones after it are handed on after the trigger.
            let mut before = true;
            let mut k = 0; // the channel's elements seen so far
            for item in items {
                match item {
                    Item::Barrier(id) if *id == n => before = false,
                    Item::Records(r) => {
                        for id in r {
                            k += 1;
                            let handed_before = position[id] < after;
                            if before {
                                prop_assert!(handed_before, "record {} of ch {} precedes barrier {} but was handed on after its trigger", id, c, n);
                            } else if exact {
                                prop_assert!(!handed_before, "record {} of ch {} follows barrier {} but was handed on before its trigger", id, c, n);
                            }
                        }
                    }
                    Item::Watermark(_) | Item::Idle(_) => {
                        let handed_before = index[c][k] < after_items;
                        k += 1;
                        if before {
                            prop_assert!(handed_before, "{:?} of ch {} precedes barrier {} but was handed on after its trigger", item, c, n);
                        } else if exact {
                            prop_assert!(!handed_before, "{:?} of ch {} follows barrier {} but was handed on before its trigger", item, c, n);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

fn channel_counts() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..=3, 4usize..=16, 17usize..=130, Just(130usize)]
}

fn limits() -> impl Strategy<Value = Option<u64>> {
    // Records are 8-byte u64s: up to ~500 held records.
    prop_oneof![3 => Just(None), 1 => (0u64..4000).prop_map(Some)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn aligner_is_exactly_once(
        channels in channel_counts(),
        words in prop::collection::vec(any::<u64>(), 0..2500),
        limit in limits(),
    ) {
        let input = build(channels, &words);
        let config = HandlerConfig { max_alignment_bytes: limit, blocker_capacity_bytes: u64::MAX };
        let mut aligner = Aligner::<u64>::new(channels, config);
        let out = drive(&mut aligner, &input, |h, fed, passed| {
            // A watermark or idle marker is handed on unchanged or held.
            if matches!(fed, StreamElement::Watermark(_) | StreamElement::Idle(_)) {
                prop_assert!(passed.is_none() || passed.as_ref() == Some(fed));
            }
            // Rule 7: what is held plus the queued earlier releases stays
            // within the limit (a release empties the blocker before the
            // next element is read); the release being replayed does not
            // count.
            if let Some(limit) = limit {
                let held = BarrierHandler::<u64>::held_bytes(h);
                prop_assert!(held == 0 || held + h.queued_bytes() <= limit,
                    "held {} + queued {} > limit {}", held, h.queued_bytes(), limit);
            }
            Ok(())
        })?;
        prop_assert_eq!(BarrierHandler::<u64>::held_bytes(&aligner), 0);
        prop_assert!(BarrierHandler::<u64>::blocked(&aligner).is_empty());
        check_model(channels, &input, &out, true)?;
    }

    #[test]
    fn tracker_is_at_least_once_and_never_holds(
        channels in channel_counts(),
        words in prop::collection::vec(any::<u64>(), 0..2500),
    ) {
        let input = build(channels, &words);
        let mut tracker = Tracker::new(channels);
        let out = drive(&mut tracker, &input, |h, fed, passed| {
            // Rule 8: every record, watermark and idle marker comes back at
            // once, nothing waits.
            if matches!(
                fed,
                StreamElement::Records(_) | StreamElement::Watermark(_) | StreamElement::Idle(_)
            ) {
                prop_assert_eq!(passed.as_ref(), Some(fed));
            }
            prop_assert!(!BarrierHandler::<u64>::has_replay(h));
            prop_assert!(tracker_pending_bounded(h));
            Ok(())
        })?;
        check_model(channels, &input, &out, false)?;
    }
}

fn tracker_pending_bounded(t: &Tracker) -> bool {
    t.pending_ids().len() <= lockgate::barrier::MAX_PENDING_CHECKPOINTS
        && t.pending_ids().windows(2).all(|w| w[0] < w[1])
}

/// The generator reaches what the properties are about: with 130 channels
/// it still completes checkpoints, it produces aborts, and the aligner holds
/// watermarks and idle markers (so their rule is exercised).
#[test]
fn the_generator_triggers_and_aborts_with_many_channels() {
    // A fixed pseudo-random word stream (splitmix64), so this test is
    // deterministic.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let words: Vec<u64> = (0..20_000)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect();
    for channels in [2, 130] {
        let input = build(channels, &words);
        let mut aligner = Aligner::<u64>::new(channels, HandlerConfig::default());
        // Watermarks and idle markers the aligner held (fed, not handed on).
        let (mut held_watermarks, mut held_idle) = (0, 0);
        let out = drive(&mut aligner, &input, |_, fed, passed| {
            match (fed, passed) {
                (StreamElement::Watermark(_), None) => held_watermarks += 1,
                (StreamElement::Idle(_), None) => held_idle += 1,
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        let triggers = out.notes.iter().filter(|n| n.1).count();
        let aborts = out.notes.len() - triggers;
        assert!(
            triggers >= 3 && aborts >= 1,
            "{channels} channels: {triggers} triggers, {aborts} aborts"
        );
        assert!(
            held_watermarks >= 1 && held_idle >= 1,
            "{channels} channels: {held_watermarks} watermarks and {held_idle} idle markers held"
        );
        check_model(channels, &input, &out, true).unwrap();
    }
}
