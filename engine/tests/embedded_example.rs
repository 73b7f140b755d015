//! Runs the embedding example and checks what the application received.

#[path = "../examples/embedded.rs"]
mod embedded;

#[test]
fn the_embedded_example_delivers_every_record_once_in_key_order() {
    let n = 20_000;
    let (received, _) = embedded::run(n);
    assert_eq!(received.len() as u64, n);
    let mut prices: Vec<u64> = received.iter().map(|(_, p)| p / 2).collect();
    prices.sort_unstable();
    assert_eq!(prices, (0..n).collect::<Vec<_>>());
    // per instrument, the order of pushes is kept (one ingest source, one
    // channel per key's subtask)
    for inst in 0..4 {
        let seq: Vec<u64> = received
            .iter()
            .filter(|(i, _)| *i == inst)
            .map(|(_, p)| *p)
            .collect();
        assert!(
            seq.windows(2).all(|w| w[0] < w[1]),
            "instrument {inst} out of order"
        );
    }
}
