//! Property test: random well-formed input sequences (records, barriers,
//! cancel markers, ends of partition over 1..=130 channels) driven through
//! both handlers as an input gate drives them, checked against a reference
//! model of what exactly-once and at-least-once mean (see
//! `testdata/scenarios/README.md`, rules 1-10).
//!
//! Well-formed: on each channel the ids of barriers and cancel markers
//! strictly increase, and nothing follows an end of partition.

use lockgate::{
    Aligner, BarrierHandler, BarrierSignal, CheckpointBarrier, CheckpointId, HandlerConfig,
    StreamElement, Tracker,
};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

/// One input item; records are `u64` ids, unique over the whole input and
/// increasing in arrival order.
#[derive(Clone, Debug, PartialEq)]
enum Item {
    Records(Vec<u64>),
    Barrier(u64),
    Cancel(u64),
    End,
}

/// Builds a well-formed input over `channels` channels from random words
/// (one item per word). Checkpoint ids advance in rounds: each channel
/// delivers the next id after its last one, so that alignments complete;
/// now and then a channel skips an id (a newer checkpoint overtakes) or
/// sends a cancel marker instead of a barrier. The rates are scaled by the
/// channel count so that a round (one id over all channels) is skipped or
/// canceled about as often with 130 channels as with 2.
fn build(channels: usize, words: &[u64]) -> Vec<(usize, Item)> {
    let mut next_id = vec![1u64; channels];
    let mut ended = vec![false; channels];
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
        let item = if kind < 60 {
            // 1 to 3 records per batch
            let n = 1 + (w >> 24) % 3;
            let batch = (next_record..next_record + n).collect();
            next_record += n;
            Item::Records(batch)
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
        Item::Barrier(id) => StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(*id), 0)),
        Item::Cancel(id) => StreamElement::CancelCheckpoint(CheckpointId(*id)),
        Item::End => StreamElement::EndOfPartition,
    }
}

/// What a handler did: records handed on `(channel, id)` in order, and
/// `(checkpoint, triggered?, outputs before it)` per notification.
#[derive(Default, Debug)]
struct Outcome {
    output: Vec<(usize, u64)>,
    notes: Vec<(u64, bool, usize)>,
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
            out.notes.push(match s {
                BarrierSignal::Trigger { barrier, .. } => {
                    (barrier.id.get(), true, out.output.len())
                }
                BarrierSignal::Abort { id, .. } => (id.get(), false, out.output.len()),
            });
        }
        if let Some(StreamElement::Records(batch)) = passed {
            out.output.extend(batch.iter().map(|&id| (ch, id)));
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
/// trigger).
fn check_model(
    channels: usize,
    input: &[(usize, Item)],
    out: &Outcome,
    exact: bool,
) -> Result<(), TestCaseError> {
    // Records per channel in arrival order.
    let mut per_channel: Vec<Vec<u64>> = vec![Vec::new(); channels];
    for (ch, item) in input {
        if let Item::Records(r) = item {
            per_channel[*ch].extend(r);
        }
    }
    // No record lost or duplicated, per-channel order kept.
    let mut handed: Vec<Vec<u64>> = vec![Vec::new(); channels];
    for &(ch, id) in &out.output {
        handed[ch].push(id);
    }
    for ch in 0..channels {
        prop_assert_eq!(
            &handed[ch],
            &per_channel[ch],
            "channel {} lost, duplicated or reordered records",
            ch
        );
    }
    // No checkpoint notified twice; triggers only ever newer.
    let mut notified = HashSet::new();
    let mut last_trigger = 0;
    for &(id, triggered, _) in &out.notes {
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
    for &(n, triggered, after) in &out.notes {
        if !triggered {
            continue;
        }
        for (c, items) in by_channel.iter().enumerate() {
            // The records before barrier n on this channel (all of them when
            // it has no barrier n: it must have ended for n to trigger).
            let mut before = true;
            for item in items {
                match item {
                    Item::Barrier(id) if *id == n => before = false,
                    Item::Records(r) => {
                        for id in r {
                            let handed_before = position[id] < after;
                            if before {
                                prop_assert!(handed_before, "record {} of ch {} precedes barrier {} but was handed on after its trigger", id, c, n);
                            } else if exact {
                                prop_assert!(!handed_before, "record {} of ch {} follows barrier {} but was handed on before its trigger", id, c, n);
                            }
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
        let out = drive(&mut aligner, &input, |h, _, _| {
            // Rule 7: whatever is held stays within the limit (a release
            // empties the blocker before the next element is read).
            if let Some(limit) = limit {
                let held = BarrierHandler::<u64>::held_bytes(h);
                prop_assert!(held == 0 || held + h.replay_bytes() <= limit,
                    "held {} + replay {} > limit {}", held, h.replay_bytes(), limit);
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
            // Rule 8: every record comes back at once, nothing waits.
            if let StreamElement::Records(_) = fed {
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
/// it still completes checkpoints, and it produces aborts of every kind.
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
        let out = drive(&mut aligner, &input, |_, _, _| Ok(())).unwrap();
        let triggers = out.notes.iter().filter(|n| n.1).count();
        let aborts = out.notes.len() - triggers;
        assert!(
            triggers >= 3 && aborts >= 1,
            "{channels} channels: {triggers} triggers, {aborts} aborts"
        );
        check_model(channels, &input, &out, true).unwrap();
    }
}
