//! The transactional file sink gives exactly-once output across failures.

use lockgate::testing::{FailurePlan, FailurePoint};
use lockgate::*;
use lockgate_examples::demo::{self, expected_lines, Pace};
use lockgate_operators::file_sink::read_committed;
use std::time::Duration;

fn run(dir: &std::path::Path, mode: CheckpointMode, failures: FailurePlan, n: u64) -> JobMetrics {
    let mut config = JobConfig::default();
    config.batch_size = 32;
    config.checkpoint.mode = mode;
    if mode != CheckpointMode::None {
        config.checkpoint.interval = Some(Duration::from_millis(3));
    }
    config.restart = RestartStrategy {
        max_attempts: 10,
        delay: Duration::ZERO,
    };
    demo::job(config, dir.to_path_buf(), n, Pace::Fast(16))
        .with_failures(failures)
        .start()
        .unwrap()
        .wait()
        .unwrap()
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
    let expected = expected_lines(n);
    let failing = tempfile::tempdir().unwrap();
    // keyed_sum[0] is task 2, keyed_sum[1] task 3, files[0] task 4
    // (the sources are 0 and 1).
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
        "committed output differs from the failure-free output"
    );
}

#[test]
fn without_checkpoints_the_output_is_committed_at_the_end() {
    let n = 5_000;
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), CheckpointMode::None, FailurePlan::none(), n);
    assert_eq!(sorted_lines(dir.path()), expected_lines(n));
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
