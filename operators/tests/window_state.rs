//! The window operator's state is managed keyed state written
//! incrementally: with 100,000 open windows and 100 changed between two
//! checkpoints, the delta part is a small fraction of the full part (the
//! figure is printed); a chain of parts restores the windows and their
//! timers, also at another parallelism.

use lockgate::{
    keys::Rescale, state::SnapshotRequest, CheckpointId, Checkpointed, Context, Operator, Watermark,
};
use lockgate_operators::window::{Count, WindowAssigner, WindowOperator, WindowOutput};

/// (key, timestamp ms)
type Rec = (u64, i64);
type Op = WindowOperator<Rec, u64, Count>;

fn op() -> Op {
    WindowOperator::new(
        WindowAssigner::tumbling(1000).unwrap(),
        Count,
        |r: &Rec| r.0,
        |r: &Rec| r.1,
    )
    .with_routing_key(|k: &u64| *k)
}

fn feed(op: &mut Op, records: impl IntoIterator<Item = Rec>) {
    let mut out = Vec::new();
    op.process(
        &mut records.into_iter().collect(),
        &mut Context::new(&mut out, None, &mut None),
    )
    .unwrap();
    assert!(out.is_empty());
}

/// Every window fired at watermark `w`: (key, window start, count), sorted.
fn fire(op: &mut Op, w: i64) -> Vec<(u64, i64, u64)> {
    let mut out = Vec::new();
    op.on_watermark(Watermark(w), &mut Context::new(&mut out, None, &mut None))
        .unwrap();
    let mut fired: Vec<_> = out
        .into_iter()
        .filter_map(WindowOutput::fired)
        .map(|r| (r.key, r.window.start, r.value))
        .collect();
    fired.sort_unstable();
    fired
}

fn part(op: &mut Op, id: u64, base: Option<u64>) -> lockgate::state::EncodedState {
    op.snapshot_state_async(CheckpointId(id))
        .unwrap()
        .unwrap()
        .run(&SnapshotRequest {
            id: CheckpointId(id),
            base: base.map(CheckpointId),
            spread: SnapshotRequest::DEFAULT_SPREAD,
        })
        .unwrap()
}

#[test]
fn a_delta_holds_the_changed_windows_only_and_a_chain_restores_them() {
    let mut a = op();
    feed(&mut a, (0..100_000u64).map(|k| (k, 10)));
    let full = part(&mut a, 1, None);
    assert!(!full.delta);
    feed(&mut a, (0..100u64).map(|k| (k * 1000, 20)));
    let delta = part(&mut a, 2, Some(1));
    assert!(delta.delta, "an incremental part");
    let (f, d) = (full.bytes.len(), delta.bytes.len());
    println!(
        "window state, 100,000 windows, 100 changed: full part {f} bytes, delta part {d} bytes ({:.3} %)",
        100.0 * d as f64 / f as f64
    );
    assert!(
        d * 50 < f,
        "the delta ({d} B) is not under 2 % of the full part ({f} B)"
    );
    // The chain restores the windows and their timers.
    let mut b = op();
    b.restore_state_chain(&[&full.bytes, &delta.bytes]).unwrap();
    assert_eq!(b.open_windows(), 100_000);
    let expected = fire(&mut a, 999);
    assert_eq!(expected.len(), 100_000);
    assert_eq!(expected[1000], (1000, 0, 2));
    assert_eq!(fire(&mut b, 999), expected);
    assert_eq!(b.open_windows(), 0, "cleaned up as the original");
}

#[test]
fn managed_window_state_restores_at_another_parallelism() {
    let mut a = op();
    feed(&mut a, (0..1000u64).map(|k| (k, (k % 3) as i64 * 1000)));
    // A window already fired stays out of the next firing.
    let early = fire(&mut a, 999);
    assert_eq!(early.len(), 334);
    let full = part(&mut a, 1, None);
    let expected = fire(&mut a, i64::MAX - 1);
    let mut union = Vec::new();
    for subtask in 0..2 {
        let rescale = Rescale {
            subtask,
            parallelism: 2,
            old_parallelism: 1,
            max_parallelism: 128,
        };
        let mut b = op();
        b.restore_rescaled(&[vec![&full.bytes]], &rescale).unwrap();
        assert!(b.open_windows() < 666);
        union.extend(fire(&mut b, i64::MAX - 1));
    }
    union.sort_unstable();
    assert_eq!(union, expected);
}
