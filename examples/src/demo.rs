//! A small exactly-once job used by the crash test binary
//! (`lockgate-txn-demo`) and the file sink's tests: numbers → running sum
//! per key → transactional file sink.
//!
//! Source `i` of 2 emits the numbers `x < records` with `x % 2 == i`;
//! `keyed_sum` keeps the running sum per key `x % 2` (each key's numbers
//! come from one source, in order, so the sums are the same in every run)
//! and emits `x,sum` lines through a [`TransactionalFileSink`]. The
//! committed output is [`expected_lines`] whatever failures happened.

use lockgate::Checkpointed;
use lockgate::Context;
use lockgate::TwoPhaseCommitSink;
use lockgate::{BoxError, CheckpointId, JobBuilder, JobConfig, Operator};
use lockgate_operators::file_sink::{Formatter, TransactionalFileSink};
use lockgate_operators::sources::Sequence;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// The running sum per key `x % 2`; emits `(x, sum)`.
#[derive(Debug, Default)]
pub struct RunningSum(HashMap<u64, u64>);

impl Operator<u64, (u64, u64)> for RunningSum {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        for x in input.drain(..) {
            let s = self.0.entry(x % 2).or_default();
            *s += x;
            ctx.emit((x, *s));
        }
        Ok(())
    }
}

impl Checkpointed for RunningSum {
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(serde_json::to_vec(
            &self.0.iter().collect::<Vec<_>>(),
        )?))
    }

    fn restore_state(&mut self, s: &[u8]) -> Result<(), BoxError> {
        let v: Vec<(u64, u64)> = serde_json::from_slice(s)?;
        self.0 = v.into_iter().collect();
        Ok(())
    }
}

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
    .process("keyed_sum", |_| RunningSum::default())
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
