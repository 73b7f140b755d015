//! The transactional file sink gives exactly-once output across failures.

use lockgate::two_phase::TwoPhaseCommitSink;
use lockgate::*;
use lockgate_operators::file_sink::{read_committed, TransactionalFileSink};
use std::collections::HashMap;
use std::time::Duration;

/// Emits 0..end, step `step`, from `next`; replayable.
struct Numbers {
    next: u64,
    end: u64,
    step: u64,
}

impl Source<u64> for Numbers {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
        while out.len() < max.min(16) && self.next < self.end {
            out.push(self.next);
            self.next += self.step;
        }
        Ok(if self.next >= self.end {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(self.next.to_le_bytes().to_vec()))
    }
    fn restore_state(&mut self, s: &[u8]) -> Result<(), BoxError> {
        self.next = u64::from_le_bytes(s.try_into()?);
        Ok(())
    }
}

/// Running sum per key (x % 2, so each key's records come from one source
/// in order, and the sums are the same in every run): emits (x, sum).
#[derive(Default)]
struct RunningSum(HashMap<u64, u64>);

impl Operator<u64, (u64, u64)> for RunningSum {
    fn process(&mut self, input: &mut Vec<u64>, out: &mut Vec<(u64, u64)>) -> Result<(), BoxError> {
        for x in input.drain(..) {
            let s = self.0.entry(x % 2).or_default();
            *s += x;
            out.push((x, *s));
        }
        Ok(())
    }
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

fn run(dir: &std::path::Path, mode: CheckpointMode, failures: FailurePlan, n: u64) -> JobMetrics {
    let mut config = JobConfig::default();
    config.batch_size = 32;
    config.checkpoint.mode = mode;
    config.checkpoint.interval = Some(Duration::from_millis(3));
    config.restart = RestartStrategy {
        max_attempts: 10,
        delay: Duration::ZERO,
    };
    let job = JobBuilder::new("file-sink-test", config).with_failures(failures);
    let out = dir.to_path_buf();
    job.source("numbers", 2, move |i| Numbers {
        next: i as u64,
        end: n,
        step: 2,
    })
    .key_by(|x| x % 2)
    .process("sum", 2, |_| RunningSum::default())
    .rebalance()
    .sink("files", 2, move |i| {
        let fmt: lockgate_operators::file_sink::Formatter<(u64, u64)> =
            Box::new(|r: &(u64, u64), b: &mut Vec<u8>| {
                b.extend_from_slice(format!("{},{}\n", r.0, r.1).as_bytes())
            });
        TwoPhaseCommitSink::new(TransactionalFileSink::new(out.clone(), i, fmt).unwrap())
    });
    job.start().unwrap().wait().unwrap()
}

fn sorted_lines(dir: &std::path::Path) -> Vec<String> {
    let text = String::from_utf8(read_committed(dir).unwrap()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn exactly_once_output_survives_failures_unchanged() {
    let n = 20_000;
    let clean = tempfile::tempdir().unwrap();
    let m = run(
        clean.path(),
        CheckpointMode::ExactlyOnce,
        FailurePlan::none(),
        n,
    );
    assert_eq!(m.restarts, 0);
    let expected = sorted_lines(clean.path());
    assert_eq!(expected.len() as u64, n);

    let failing = tempfile::tempdir().unwrap();
    // sum[0] is task 2, sum[1] task 3, files[0] task 4 (sources are 0, 1).
    let plan = FailurePlan::none()
        .with(3, FailurePoint::AfterRecords(3_000))
        .with(4, FailurePoint::AfterRecords(4_000))
        .with(2, FailurePoint::DuringSnapshot);
    let m = run(failing.path(), CheckpointMode::ExactlyOnce, plan, n);
    assert_eq!(m.restarts, 3, "{:?}", m.failures);
    let got = sorted_lines(failing.path());
    assert_eq!(got.len(), expected.len(), "no record lost or duplicated");
    let first_diff = got.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(
        first_diff, None,
        "committed output differs from the failure-free run"
    );
}

#[test]
fn without_checkpoints_the_output_is_committed_at_the_end() {
    let n = 5_000;
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), CheckpointMode::None, FailurePlan::none(), n);
    assert_eq!(sorted_lines(dir.path()).len() as u64, n);
    // nothing left in progress or pending
    let hidden = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count();
    assert_eq!(hidden, 0);
}
