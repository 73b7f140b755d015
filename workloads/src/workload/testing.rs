//! Helpers of the unit tests of several files: the specification's
//! generator written out independently, and the whole pipeline
//! simulated in plain Rust.

use super::{key_to_subtask, Event, Generator, KeySpace, KeyedSum, SinkCheck, SumRecord};

/// The spec's generator written out independently: the outputs of the
/// first `count` steps.
pub(super) fn spec_outputs(count: usize) -> Vec<u64> {
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut out = Vec::new();
    for _ in 0..count {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.push(x.wrapping_mul(0x2545F4914F6CDD1D));
    }
    out
}

/// The whole pipeline in plain Rust: P sources (generate + map), route
/// to Q keyed sums, a sink merging the keyed sums' outputs in an
/// arbitrary interleaving.
pub(super) fn simulate(
    total: u64,
    keys: &KeySpace,
    p: usize,
    q: usize,
) -> (SinkCheck, Vec<SumRecord>) {
    let mut queues: Vec<Vec<Event>> = vec![Vec::new(); q];
    let mut gens: Vec<Generator> = (0..p)
        .map(|i| Generator::new(keys, i, p, total).unwrap())
        .collect();
    // Interleave sources unevenly: source i emits i + 1 records a turn.
    loop {
        let mut any = false;
        for (i, g) in gens.iter_mut().enumerate() {
            for _ in 0..=i {
                if let Some(e) = g.next_event(0) {
                    let e = e.mapped();
                    queues[key_to_subtask(e.key, q)].push(e);
                    any = true;
                }
            }
        }
        if !any {
            break;
        }
    }
    let mut outs: Vec<std::collections::VecDeque<SumRecord>> = queues
        .iter()
        .map(|events| {
            let mut state = KeyedSum::new();
            events.iter().map(|e| state.apply(e)).collect()
        })
        .collect();
    let mut sink = SinkCheck::new(total, keys.keys()).unwrap();
    let mut all = Vec::new();
    let mut turn = 0usize;
    while outs.iter().any(|o| !o.is_empty()) {
        // Take 1, 2, 3, ... records from each queue in turn.
        let j = turn % q;
        for _ in 0..(turn % 3 + 1) {
            if let Some(r) = outs[j].pop_front() {
                sink.observe(&r);
                all.push(r);
            }
        }
        turn += 1;
    }
    (sink, all)
}
