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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn every_snapshot_chain_restores_its_state(ops in proptest::collection::vec(op(), 1..200)) {
        let mut state: KeyedState<u64, u64> = KeyedState::new();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut chains: HashMap<CheckpointId, Vec<Vec<u8>>> = HashMap::new();
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
                    let req = SnapshotRequest { id, base: completed };
                    let enc = state.snapshot_async().run(&req).unwrap();
                    let chain = if enc.delta {
                        let base = completed.expect("a delta has a base");
                        let mut c = chains[&base].clone();
                        c.push(enc.bytes.clone());
                        c
                    } else {
                        prop_assert_eq!(enc.full_bytes, enc.bytes.len() as u64);
                        vec![enc.bytes.clone()]
                    };
                    // The reported full size is that of a full encoding.
                    prop_assert_eq!(enc.full_bytes, state.snapshot().unwrap().len() as u64);
                    let parts: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
                    let back = KeyedState::<u64, u64>::restore_chain(&parts).unwrap();
                    let got: BTreeMap<u64, u64> = back.iter().map(|(k, v)| (*k, *v)).collect();
                    prop_assert_eq!(&got, &model);
                    chains.insert(id, chain);
                    if complete {
                        completed = Some(id);
                    }
                }
            }
        }
    }
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
    let req = SnapshotRequest {
        id: CheckpointId(2),
        base: Some(CheckpointId(1)),
    };
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
    let req = SnapshotRequest {
        id: CheckpointId(2),
        base: Some(CheckpointId(1)),
    };
    let delta = s.snapshot_managed().unwrap().run(&req).unwrap();
    assert!(delta.delta, "the keyed half is a delta");
    assert!(delta.bytes.len() < full.bytes.len() / 10);
    let (k, v) =
        <(KeyedState<u64, u64>, ValueState<u64>)>::restore_managed(&[&full.bytes, &delta.bytes])
            .unwrap();
    assert_eq!((k.get(&3), k.len(), v.0), (Some(&103), 1_000, 8));
    assert!(<(KeyedState<u64, u64>, ValueState<u64>)>::restore_managed(&[b"junk"]).is_err());
}
