//! Embedding lockgate in an application: push input from the
//! application's own thread, read output from a channel, stop, wait, read
//! the metrics.
//!
//! Run it with `cargo run -p lockgate --example embedded`.

use lockgate::{ingest::PushError, JobBuilder, JobConfig};
use std::time::Duration;

/// Pushes `n` prices for 4 instruments, doubles them in the job, and
/// returns the outputs the application received, in arrival order, and
/// how often `try_push` reported backpressure.
pub(crate) fn run(n: u64) -> (Vec<(u64, u64)>, u64) {
    let mut config = JobConfig::default();
    // Small batches and a short buffer timeout: latency over throughput.
    config.batch_size = 16;
    config.buffer_timeout = Duration::from_micros(100);
    let job = JobBuilder::new("embedded", config);
    let (prices, ingest) = job.ingest::<(u64, u64)>("prices", 1024);
    let output = prices
        .map(|(instrument, price)| (instrument, price * 2))
        .key_by(|(instrument, _)| *instrument)
        .task("per_instrument", 2)
        .collect();
    let handle = job.start().expect("a valid job");

    let mut backpressured = 0;
    for i in 0..n {
        let mut record = (i % 4, i);
        // Non-blocking push: a full ingest channel is backpressure.
        loop {
            match ingest.try_push(record) {
                Ok(()) => break,
                Err(PushError::Full(r)) => {
                    backpressured += 1;
                    record = r;
                    std::thread::yield_now();
                }
                Err(PushError::Closed(_)) => panic!("the job ended early"),
            }
        }
    }
    ingest.close(); // the end of the input ends the job
    let metrics = handle.wait().expect("the job ends cleanly");
    let received: Vec<(u64, u64)> = output.try_iter().collect();
    let sink = metrics
        .tasks
        .iter()
        .find(|t| t.name.starts_with("per_instrument"))
        .expect("a task per subtask");
    // Keys are hash-partitioned over the 2 subtasks: with 4 instruments,
    // how many each subtask gets depends on where their keys hash.
    println!(
        "received {} records; subtask {} took {} of them (its share of the 4 keys) in {} batches",
        received.len(),
        sink.name,
        sink.records_in,
        sink.batches_in
    );
    (received, backpressured)
}

#[allow(dead_code)]
fn main() {
    let (received, backpressured) = run(100_000);
    println!(
        "{} outputs, {backpressured} pushes met backpressure",
        received.len()
    );
}
