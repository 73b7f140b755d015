//! Property test of the unaligned handler (rules 11-17 of
//! `testdata/scenarios/EXTENSIONS.md`): random well-formed unaligned inputs
//! over 1..=8 channels (buffers, in-band and priority barriers, cancel
//! markers, ends of partition, priority barriers racing their in-band
//! twins), run as `lockgate scenario` runs them, checked against what an
//! unaligned checkpoint must be:
//!
//! - **Consistency**: for every checkpoint whose channel state is complete,
//!   on every channel, the buffers handed on before its trigger followed by
//!   its channel state are exactly the buffers before the channel's in-band
//!   barrier (all of them on a channel that ended without one). A restore
//!   from the snapshot plus the replayed state then loses and duplicates
//!   nothing.
//! - **Nothing held**: the output is the input's buffers in input order.
//! - **One in flight**: a trigger never comes while another checkpoint is
//!   pending; every trigger ends exactly once (state done or aborted) unless
//!   the input ends first; no checkpoint older than a triggered one is
//!   triggered.

use lockgate_scenario::{
    CheckKind, InputItem, NotificationKind, OutputItem, Scenario, ScenarioMode,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};

/// A well-formed unaligned input from random words: on each channel the
/// in-band barrier and cancel ids strictly increase and nothing follows an
/// end of partition; priority barriers name the channel's next in-band id
/// (the usual case) or its last one (the race of rule 14).
fn build(channels: usize, words: &[u64]) -> Vec<InputItem> {
    let mut next_id = vec![1u64; channels];
    let mut ended = vec![false; channels];
    let mut next_buffer = 0u64;
    let mut items = Vec::new();
    for &w in words {
        let Some(ch) = (0..channels)
            .map(|k| (w as usize + k) % channels)
            .find(|&c| !ended[c])
        else {
            break;
        };
        let kind = (w >> 16) % 100;
        let item = if kind < 55 {
            next_buffer += 1;
            InputItem::Buffer {
                ch,
                id: next_buffer,
                size: 8,
            }
        } else if kind < 75 {
            let id = next_id[ch];
            // Now and then a channel skips an id (a newer checkpoint).
            next_id[ch] += 1 + (w >> 32) % 4 / 3;
            InputItem::Barrier { ch, id }
        } else if kind < 95 {
            let id = if (w >> 40) % 4 == 0 {
                next_id[ch].saturating_sub(1).max(1)
            } else {
                next_id[ch]
            };
            InputItem::Priority { ch, id }
        } else if kind < 98 {
            let id = next_id[ch];
            next_id[ch] += 1;
            InputItem::Cancel { ch, id }
        } else {
            ended[ch] = true;
            InputItem::EndOfPartition { ch }
        };
        items.push(item);
    }
    items
}

fn scenario(channels: usize, input: Vec<InputItem>) -> Scenario {
    Scenario {
        file: "generated".into(),
        name: "generated".into(),
        source: String::new(),
        mode: ScenarioMode::Unaligned,
        check: CheckKind::Semantic,
        channels,
        max_alignment_bytes: None,
        buffer_size: 8,
        input,
        expect_output: Vec::new(),
        expect_notifications: Vec::new(),
        expect_channel_state: BTreeMap::new(),
        aligned_checkpoint_timeout: None,
        trigger_times: BTreeMap::new(),
        notes: String::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn unaligned_checkpoints_are_consistent(
        channels in 1usize..=8,
        words in proptest::collection::vec(any::<u64>(), 0..200),
    ) {
        let s = scenario(channels, build(channels, &words));
        let run = s.run();
        // Nothing held: the output is the input's buffers in input order.
        let inputs: Vec<OutputItem> = s.input.iter().filter_map(InputItem::as_output).collect();
        prop_assert_eq!(&run.output, &inputs);
        check_checkpoints(&s, &run)?;
    }

    /// Rule 19: exactly-once with an aligned-checkpoint timeout. Priority
    /// items are the job's copies at a checkpoint's deadline; barriers
    /// carry random trigger times.
    #[test]
    fn aligned_checkpoints_with_a_timeout_are_consistent(
        channels in 1usize..=8,
        words in proptest::collection::vec(any::<u64>(), 0..200),
        timeout in 1u64..40,
        triggers in proptest::collection::vec(0u64..200, 8),
    ) {
        let mut s = scenario(channels, build(channels, &words));
        s.mode = ScenarioMode::ExactlyOnce;
        s.aligned_checkpoint_timeout = Some(timeout);
        s.trigger_times = (1..=triggers.len() as u64).zip(triggers.iter().copied()).collect();
        let run = s.run();
        // Blocking defers a channel's items, never reorders or drops them:
        // per channel the output is the input's order.
        for ch in 0..channels {
            let of = |items: Vec<OutputItem>| -> Vec<OutputItem> {
                items.into_iter().filter(|o| o.channel() == ch).collect()
            };
            let inputs = of(s.input.iter().filter_map(InputItem::as_output).collect());
            prop_assert_eq!(of(run.output.clone()), inputs, "ch {}", ch);
        }
        check_checkpoints(&s, &run)?;
    }
}

/// One in flight, each trigger ended once, consistency of every complete
/// checkpoint, and agreement with `lockgate scenario`'s semantic check.
fn check_checkpoints(s: &Scenario, run: &lockgate_scenario::Run) -> Result<(), TestCaseError> {
    let channels = s.channels;
    // One in flight, each ended once, never an older trigger.
    let mut pending: Option<u64> = None;
    let mut ended = HashSet::new();
    let mut newest_trigger = 0u64;
    for n in &run.notifications {
        match n.kind {
            NotificationKind::Triggered => {
                prop_assert!(
                    pending.is_none(),
                    "trigger {} while {:?} pending",
                    n.checkpoint,
                    pending
                );
                prop_assert!(
                    n.checkpoint > newest_trigger,
                    "trigger {} after {}",
                    n.checkpoint,
                    newest_trigger
                );
                newest_trigger = n.checkpoint;
                pending = Some(n.checkpoint);
            }
            NotificationKind::ChannelStateDone => {
                prop_assert_eq!(pending.take(), Some(n.checkpoint));
                prop_assert!(ended.insert(n.checkpoint));
            }
            NotificationKind::Aborted => {
                if pending == Some(n.checkpoint) {
                    pending = None;
                }
                prop_assert!(ended.insert(n.checkpoint), "{} ended twice", n.checkpoint);
            }
        }
    }
    // Consistency of every complete checkpoint, computed here from the
    // input alone.
    let states = run.channel_state.clone().unwrap_or_default();
    for (&id, state) in &states {
        let trigger = run
            .notifications
            .iter()
            .find(|n| n.kind == NotificationKind::Triggered && n.checkpoint == id)
            .expect("a complete checkpoint was triggered");
        for ch in 0..channels {
            let mut before_barrier = Vec::new();
            let mut saw_barrier = false;
            let mut saw_end = false;
            for item in &s.input {
                match *item {
                    InputItem::Buffer { ch: c, id: b, .. } if c == ch && !saw_barrier => {
                        before_barrier.push(b)
                    }
                    InputItem::Barrier { ch: c, id: b } if c == ch && b == id => saw_barrier = true,
                    InputItem::EndOfPartition { ch: c } if c == ch => saw_end = true,
                    _ => {}
                }
            }
            prop_assert!(
                saw_barrier || saw_end,
                "state of {} complete without ch {}'s barrier",
                id,
                ch
            );
            // This channel's buffers among the first `after_output`
            // buffers handed on (the output holds only buffers here).
            let mut got: Vec<u64> = run.output[..trigger.after_output]
                .iter()
                .filter(|o| o.channel() == ch)
                .filter_map(OutputItem::buffer_id)
                .collect();
            got.extend(state.get(&ch).into_iter().flatten());
            prop_assert_eq!(&got, &before_barrier, "checkpoint {}, ch {}", id, ch);
        }
    }
    // The semantic check of `lockgate scenario` agrees.
    let mut expected = s.clone();
    expected.expect_notifications = run.notifications.clone();
    prop_assert_eq!(expected.check_run(run).difference, None);
    Ok(())
}
