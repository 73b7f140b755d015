//! KeyedState's incremental snapshots against a model: every snapshot's
//! chain restores exactly the state at that snapshot, and its reported
//! full size is exact.

use lockgate::{state::SnapshotRequest, CheckpointId, KeyedState};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

#[derive(Clone, Debug)]
enum Op {
    Put(u64, u64),
    Bump(u64),
    Remove(u64),
    /// A snapshot; `true`: its checkpoint completes (a base for later
    /// deltas).
    Snapshot(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..40u64, any::<u64>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (0..40u64).prop_map(Op::Bump),
        1 => (0..40u64).prop_map(Op::Remove),
        1 => any::<bool>().prop_map(Op::Snapshot),
    ]
}

/// A chain, oldest part first, each part with its checkpoint.
type Chain = Vec<(CheckpointId, Vec<u8>)>;

fn restore(chain: &Chain) -> BTreeMap<u64, u64> {
    let parts: Vec<&[u8]> = chain.iter().map(|(_, b)| b.as_slice()).collect();
    let back = KeyedState::<u64, u64>::restore_chain(&parts).unwrap();
    back.iter().map(|(k, v)| (*k, *v)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Every snapshot's chain restores exactly the state at that snapshot:
    /// trimmed to the parts its delta says it needs (`chain_from`, the
    /// rolling rewrite of key groups), and whole back to the full part (a
    /// task whose other operator needs the longer chain); a rolling chain
    /// stays within about twice the spread.
    #[test]
    fn every_snapshot_chain_restores_its_state(
        ops in proptest::collection::vec(op(), 1..200),
        spread in 1..6u32,
    ) {
        run_ops(ops, spread)?;
    }
}

/// Once found by the proptest: groups empty at a part and filled later
/// pulled a delta's chain back to a part already dropped from it.
#[test]
fn a_group_filled_after_the_chain_moved_on_does_not_pull_it_back() {
    use Op::*;
    let ops = vec![
        Put(0, 268_435_455),
        Bump(15),
        Put(1, 1 << 63),
        Snapshot(true),
        Bump(0),
        Bump(2),
        Bump(2),
        Put(0, 0),
        Snapshot(true),
        Snapshot(true),
        Snapshot(true),
        Put(0, 1 << 42),
        Put(0, 0),
        Put(0, 1 << 35),
        Put(3, 1 << 49),
        Put(4, 0),
        Bump(5),
        Snapshot(false),
    ];
    run_ops(ops, 3).unwrap();
}

/// Applies `ops` to a state and a model, checking every snapshot's chains.
fn run_ops(ops: Vec<Op>, spread: u32) -> Result<(), TestCaseError> {
    let mut state: KeyedState<u64, u64> = KeyedState::new();
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    // Per checkpoint: the trimmed chain and the whole one.
    let mut chains: HashMap<CheckpointId, (Chain, Chain)> = HashMap::new();
    let mut completed: Option<CheckpointId> = None;
    let mut next = 1u64;
    for op in ops {
        match op {
            Op::Put(k, v) => {
                prop_assert_eq!(state.insert(k, v), model.insert(k, v));
            }
            Op::Bump(k) => {
                *state.get_or_default(k) += 1;
                *model.entry(k).or_default() += 1;
            }
            Op::Remove(k) => {
                prop_assert_eq!(state.remove(&k), model.remove(&k));
            }
            Op::Snapshot(complete) => {
                let id = CheckpointId(next);
                next += 1;
                let req = SnapshotRequest {
                    id,
                    base: completed,
                    spread,
                };
                let enc = state.snapshot_async().run(&req).unwrap();
                let (trimmed, whole) = if enc.delta {
                    let base = completed.expect("a delta has a base");
                    let (mut t, mut w) = chains[&base].clone();
                    t.push((id, enc.bytes.clone()));
                    w.push((id, enc.bytes.clone()));
                    let from = enc
                        .chain_from
                        .expect("a keyed delta says where its chain starts");
                    prop_assert!(
                        t.iter().any(|(c, _)| *c == from),
                        "{:?} is not in the chain",
                        from
                    );
                    t.retain(|(c, _)| *c >= from);
                    prop_assert!(
                        t.len() as u32 <= 2 * spread + 1,
                        "{} parts at spread {}",
                        t.len(),
                        spread
                    );
                    (t, w)
                } else {
                    prop_assert_eq!(enc.full_bytes, enc.bytes.len() as u64);
                    let c = vec![(id, enc.bytes.clone())];
                    (c.clone(), c)
                };
                // The reported full size is that of a full encoding.
                prop_assert_eq!(enc.full_bytes, state.snapshot().unwrap().len() as u64);
                prop_assert_eq!(&restore(&trimmed), &model);
                prop_assert_eq!(&restore(&whole), &model);
                chains.insert(id, (trimmed, whole));
                if complete {
                    completed = Some(id);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn a_delta_holds_only_the_changed_keys() {
    let mut s: KeyedState<u64, u64> = KeyedState::new();
    for k in 0..10_000 {
        s.insert(k, k);
    }
    let full = s
        .snapshot_async()
        .run(&SnapshotRequest::full(CheckpointId(1)))
        .unwrap();
    assert!(!full.delta);
    *s.get_or_default(7) += 1;
    s.remove(&8);
    let req = SnapshotRequest::delta(CheckpointId(2), CheckpointId(1));
    let delta = s.snapshot_async().run(&req).unwrap();
    assert!(delta.delta);
    assert!(delta.bytes.len() < 40, "{} bytes", delta.bytes.len());
    assert_eq!(delta.full_bytes, s.snapshot().unwrap().len() as u64);
    let back = KeyedState::<u64, u64>::restore_chain(&[&full.bytes, &delta.bytes]).unwrap();
    assert_eq!(back.get(&7), Some(&8));
    assert_eq!(back.get(&8), None);
    assert_eq!(back.len(), 9_999);
    // A delta alone is refused with a clear error, as is garbage.
    let err = KeyedState::<u64, u64>::restore_chain(&[&delta.bytes]).unwrap_err();
    assert!(err.to_string().contains("no full snapshot"), "{err}");
    assert!(KeyedState::<u64, u64>::restore_chain(&[b"\x01\x02\x03"]).is_err());
}

#[test]
fn a_pair_of_managed_states_snapshots_and_restores_both() {
    use lockgate::{state::ManagedState, ValueState};
    let mut s: (KeyedState<u64, u64>, ValueState<u64>) = Default::default();
    for k in 0..1_000 {
        s.0.insert(k, k);
    }
    s.1 = ValueState(7);
    let full = s
        .snapshot_managed()
        .unwrap()
        .run(&SnapshotRequest::full(CheckpointId(1)))
        .unwrap();
    assert!(!full.delta);
    *s.0.get_or_default(3) += 100;
    s.1 = ValueState(8);
    let req = SnapshotRequest::delta(CheckpointId(2), CheckpointId(1));
    let delta = s.snapshot_managed().unwrap().run(&req).unwrap();
    assert!(delta.delta, "the keyed half is a delta");
    assert!(delta.bytes.len() < full.bytes.len() / 10);
    let (k, v) =
        <(KeyedState<u64, u64>, ValueState<u64>)>::restore_managed(&[&full.bytes, &delta.bytes])
            .unwrap();
    assert_eq!((k.get(&3), k.len(), v.0), (Some(&103), 1_000, 8));
    assert!(<(KeyedState<u64, u64>, ValueState<u64>)>::restore_managed(&[b"junk"]).is_err());
}

/// A part written full although it had a base (here a spread of 1 makes
/// its delta rewrite everything) keeps the changes since that base: the
/// next part, while that base is still the newest completed checkpoint,
/// is a delta on it, not full again.
#[test]
fn a_full_part_on_a_base_leaves_the_next_part_a_delta_on_it() {
    let mut s: KeyedState<u64, u64> = KeyedState::new();
    for k in 0..1_000 {
        s.insert(k, k);
    }
    let p1 = s
        .snapshot_async()
        .run(&SnapshotRequest::full(CheckpointId(1)))
        .unwrap();
    for k in 0..10 {
        *s.get_or_default(k) += 1;
    }
    let req = SnapshotRequest {
        id: CheckpointId(2),
        base: Some(CheckpointId(1)),
        spread: 1,
    };
    let p2 = s.snapshot_async().run(&req).unwrap();
    assert!(!p2.delta);
    for k in 500..505 {
        *s.get_or_default(k) += 1;
    }
    let p3 = s
        .snapshot_async()
        .run(&SnapshotRequest::delta(CheckpointId(3), CheckpointId(1)))
        .unwrap();
    assert!(p3.delta, "{} bytes", p3.bytes.len());
    let back = KeyedState::<u64, u64>::restore_chain(&[&p1.bytes, &p3.bytes]).unwrap();
    assert_eq!(back, s);
}
