//! Runs the checkpointed embedding example: its counts must be exact after
//! the planned failure and restart.

#[path = "../examples/checkpointed.rs"]
mod checkpointed;

#[test]
fn the_checkpointed_example_counts_exactly_after_a_restart() {
    let n = 30_000;
    let (counts, restarts) = checkpointed::run(n).unwrap();
    assert_eq!(restarts, 1);
    let exact: Vec<(u64, u64)> = (0..10).map(|k| (k, n / 10)).collect();
    assert_eq!(counts, exact);
}
