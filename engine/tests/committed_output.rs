//! Exactly-once output to the application (`Stream::collect_committed`):
//! every record handed over once, when its checkpoint completes, through
//! in-process restarts and a restore in a new job told what it already
//! has.

mod common;

use common::*;
use lockgate::testing::{FailurePlan, FailurePoint};
use lockgate::*;
use std::path::Path;
use std::time::Duration;

/// source(2) → collect_committed; the sources emit `per_poll` numbers a
/// millisecond each, up to `n`.
fn job(
    n: u64,
    per_poll: usize,
    dir: Option<&Path>,
    restore: bool,
    after: Option<CheckpointId>,
) -> (JobBuilder, Output<Committed<u64>>) {
    let mut config = JobConfig::default();
    config.checkpoint =
        CheckpointConfig::exactly_once(Duration::from_millis(5), dir.map(Path::to_path_buf));
    config.checkpoint.restore_mode = restore.into();
    config.restart.delay = Duration::ZERO;
    config.restart.max_attempts = 5;
    let job = JobBuilder::new("committed", config);
    let out = job
        .source("numbers", 2, move |i| {
            Counter::paced(i.index, i.parallelism, n, per_poll, 1_000_000)
        })
        .collect_committed(after);
    (job, out)
}

/// Every batch, checking that a subtask's checkpoints only grow.
fn drain(out: &Output<Committed<u64>>, got: &mut Vec<u64>, newest: &mut Option<CheckpointId>) {
    let mut last: std::collections::HashMap<usize, CheckpointId> = Default::default();
    for batch in out.iter() {
        if let Some(prev) = last.insert(batch.subtask, batch.checkpoint) {
            assert!(prev < batch.checkpoint, "{prev} then {}", batch.checkpoint);
        }
        *newest = (*newest).max(Some(batch.checkpoint));
        got.extend(batch.records);
    }
}

#[test]
fn restarts_hand_over_every_record_once() {
    let n = 40_000;
    let (job, out) = job(n, 20, None, false, None);
    // The source of subtask 1 (task 1) fails twice, mid-run.
    let job = job.with_failures(
        FailurePlan::none()
            .with(1, FailurePoint::AfterRecords(3_000))
            .with(1, FailurePoint::AfterRecords(5_000)),
    );
    let handle = job.start().unwrap();
    let mut got = Vec::new();
    let mut newest = None;
    drain(&out, &mut got, &mut newest);
    let m = handle.wait().unwrap();
    assert_eq!(m.restarts, 2);
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>(), "each record once");
}

#[test]
fn a_new_job_told_what_it_has_hands_over_only_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("chk");
    let n = 1_000_000;
    // The first job runs a while, then stops (its final checkpoint hands
    // over everything it took).
    let (job1, out1) = job(n, 20, Some(&dir), false, None);
    let h = job1.start().unwrap();
    assert!(wait_for(30, || h.metrics().completed_checkpoints() >= 5));
    h.stop();
    let mut got = Vec::new();
    let mut newest = None;
    drain(&out1, &mut got, &mut newest);
    h.wait().unwrap();
    assert!(!got.is_empty() && (got.len() as u64) < n);
    // A new job restores the folder, told the newest checkpoint handed
    // over: the restored checkpoint's batches are not handed over again.
    let (job2, out2) = job(n, 100_000, Some(&dir), true, newest);
    let h = job2.start().unwrap();
    drain(&out2, &mut got, &mut newest);
    h.wait().unwrap();
    got.sort_unstable();
    assert_eq!(got.len() as u64, n, "each record once");
    assert_eq!(got, (0..n).collect::<Vec<_>>());
}
