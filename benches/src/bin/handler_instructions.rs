//! A deterministic driver of the barrier handlers for instruction counts
//! (issue 12: the aligner's cost per element on unblocked channels at
//! most 1.2× the tracker's), run under callgrind by
//! `perf-scripts/handler-instructions.sh`: `PASSES` passes of 10,000
//! record batches (64 `u64` each, from a pool, so nothing is allocated in
//! the loop), round-robin over `CHANNELS` channels, through `HANDLER`
//! (`aligner`, `tracker`, or `none`: the loop alone). The script counts
//! the instructions of a run with `PASSES` and one with 0 and divides the
//! difference by the elements, so set-up costs cancel out.
//!
//! With `--one-blocked`, channel 0 delivers a barrier before the records
//! (blocked by the aligner, a pending checkpoint of the tracker) and the
//! records arrive on the other channels.
//!
//! Usage: `handler_instructions HANDLER PASSES CHANNELS [--one-blocked]`. Prints the
//! elements handled and a checksum (so the loop is not optimised away).

use lockgate::{
    barrier::Aligner, barrier::BarrierHandler, barrier::BarrierSignal, barrier::CheckpointBarrier,
    barrier::HandlerConfig, barrier::StreamElement, barrier::Tracker, CheckpointId,
};

/// Records per batch (as `benches/barrier_handlers.rs`).
const BATCH: usize = 64;
/// Record batches per pass (as `benches/barrier_handlers.rs`).
const ELEMENTS: usize = 10_000;

/// `passes` passes through `handler`; returns (elements, checksum). With
/// `one_blocked`, channel 0 delivers a barrier first (the aligner blocks
/// it, the tracker has a pending checkpoint) and the records go round
/// robin over the other channels.
fn drive<H: BarrierHandler<u64>>(
    handler: &mut H,
    passes: u64,
    channels: usize,
    one_blocked: bool,
) -> (u64, u64) {
    let mut pool: Vec<Vec<u64>> = (0..8).map(|i| vec![i; BATCH]).collect();
    let mut signals: Vec<BarrierSignal> = Vec::with_capacity(4);
    let (mut n, mut sum) = (0u64, 0u64);
    let first = usize::from(one_blocked);
    if one_blocked {
        let b = StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(1), 0));
        assert!(handler.on_element(0, b, 0, &mut signals).is_none());
    }
    for _ in 0..passes {
        for i in 0..ELEMENTS {
            let batch = pool.pop().unwrap_or_else(|| vec![0; BATCH]);
            let ch = first + i % (channels - first);
            let passed = handler.on_element(ch, StreamElement::Records(batch), 0, &mut signals);
            if let Some(StreamElement::Records(b)) = passed {
                sum = sum.wrapping_add(b[0]);
                pool.push(b);
            }
            n += 1;
        }
    }
    (n, sum)
}

/// The loop with no handler.
fn drive_none(passes: u64, channels: usize) -> (u64, u64) {
    let mut pool: Vec<Vec<u64>> = (0..8).map(|i| vec![i; BATCH]).collect();
    let (mut n, mut sum) = (0u64, 0u64);
    for _ in 0..passes {
        for i in 0..ELEMENTS {
            let batch = pool.pop().unwrap_or_else(|| vec![0; BATCH]);
            let _channel = i % channels;
            if let StreamElement::Records(b) = StreamElement::Records(batch) {
                sum = sum.wrapping_add(b[0]);
                pool.push(b);
            }
            n += 1;
        }
    }
    (n, sum)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!(
            "usage: handler_instructions aligner|tracker|none PASSES CHANNELS [--one-blocked]"
        );
        std::process::exit(2);
    };
    let (args, one_blocked) = match args.split_last() {
        Some((last, rest)) if last == "--one-blocked" => (rest.to_vec(), true),
        _ => (args, false),
    };
    let [handler, passes, channels] = args.as_slice() else {
        usage()
    };
    let (Ok(passes), Ok(channels)) = (passes.parse::<u64>(), channels.parse::<usize>()) else {
        usage()
    };
    if channels < 1 + usize::from(one_blocked) {
        usage();
    }
    let (n, sum) = match handler.as_str() {
        "aligner" => drive(
            &mut Aligner::<u64>::new(channels, HandlerConfig::default()),
            passes,
            channels,
            one_blocked,
        ),
        "tracker" => drive(&mut Tracker::new(channels), passes, channels, one_blocked),
        "none" => drive_none(passes, channels),
        _ => usage(),
    };
    println!("{handler}: {n} elements, checksum {sum}");
}
