//! A small exactly-once job used by the crash test binary
//! (`lockgate-txn-demo`) and the file sink's tests: numbers → running sum
//! per key → transactional file sink.
//!
//! Source `i` of 2 emits the numbers `x < records` with `x % 2 == i`;
//! `keyed_sum` keeps the running sum per key `x % 2` (each key's numbers
//! come from one source, in order, so the sums are the same in every run)
//! and emits `x,sum` lines through a [`TransactionalFileSink`]. The
//! committed output is [`expected_lines`] whatever failures happened.

use lockgate::state::KeyedFold;
use lockgate::TwoPhaseCommitSink;
use lockgate::{JobBuilder, JobConfig, Managed};
use lockgate_operators::file_sink::{Formatter, TransactionalFileSink};
use lockgate_operators::sources::Sequence;
use std::path::PathBuf;
use std::time::Duration;

/// How fast the demo's sources emit.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// As fast as the job takes them, in polls of at most this many.
    Fast(usize),
    /// 64 numbers per source every millisecond (~128,000 numbers/s).
    Paced,
}

/// Adds the demo job to `job`, writing committed parts into `out`.
pub fn build(job: &JobBuilder, out: PathBuf, records: u64, pace: Pace) {
    job.source("numbers", 2, move |i| match pace {
        Pace::Fast(n) => Sequence::part(i.index, i.parallelism, records).per_poll(n),
        Pace::Paced => {
            Sequence::part(i.index, i.parallelism, records).paced(64, Duration::from_millis(1))
        }
    })
    // Routing key 2 * (x % 2): keys 0 and 1 hash into key groups 0 and
    // 57, both subtask 0's at parallelism 2; routing keys 0 and 2 fall in
    // groups 0 and 114, one per subtask.
    .key_by(|x| (x % 2) * 2)
    .task("keyed_sum", 2)
    // The running sum per key `x % 2`, emitting `(x, sum)`, in managed
    // keyed state.
    .process("keyed_sum", |_| {
        Managed::new(KeyedFold::new(
            |x: &u64| x % 2,
            |sum: &mut u64, x: u64| {
                *sum += x;
                (x, *sum)
            },
        ))
    })
    .rebalance()
    .task("files", 2)
    .sink("files", move |i| {
        let fmt: Formatter<(u64, u64)> =
            Box::new(|r, b| b.extend_from_slice(format!("{},{}\n", r.0, r.1).as_bytes()));
        TwoPhaseCommitSink::new(
            TransactionalFileSink::new(out.clone(), i.index, fmt)
                .expect("the output folder can be created"),
        )
    });
}

/// A job builder with the demo job, named `txn-demo`, its configuration
/// recorded for restore checks.
pub fn job(config: JobConfig, out: PathBuf, records: u64, pace: Pace) -> JobBuilder {
    let job = JobBuilder::new("txn-demo", config)
        .with_app_config(serde_json::json!({ "records": records }));
    build(&job, out, records, pace);
    job
}

/// The committed lines of a complete run over `records` numbers, sorted.
pub fn expected_lines(records: u64) -> Vec<String> {
    let mut sums = [0u64; 2];
    let mut lines: Vec<String> = (0..records)
        .map(|x| {
            sums[(x % 2) as usize] += x;
            format!("{x},{}", sums[(x % 2) as usize])
        })
        .collect();
    lines.sort();
    lines
}
