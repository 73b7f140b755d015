//! The trade aggregator (`lockgate_examples::trades`, README's Embedding
//! walkthrough): windows fire while the feed runs, and the bars are exact
//! (against `expected_bars`, computed without lockgate) after injected
//! failures and after kill -9 and a restart with restore mode if-present.

use lockgate::{testing::FailurePlan, testing::FailurePoint, JobConfig};
use lockgate_examples::trades::{self, Bar};
use std::process::Command;
use std::time::{Duration, Instant};

fn sorted(mut bars: Vec<Bar>) -> Vec<Bar> {
    bars.sort_by_key(|b| (b.symbol, b.start_ms));
    bars
}

#[test]
fn bars_are_exact_after_injected_failures_and_fire_while_the_feed_runs() {
    let n = 40_000; // 10 s of event time
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::default();
    config.restart.delay = Duration::ZERO;
    config.restart.max_attempts = 3;
    let (job, feed, bars) = trades::job(config, dir.path().to_path_buf(), 2, None);
    // Failures by task name: a window subtask, and the feed's source.
    let plan = FailurePlan::none()
        .with_task("vwap[1]", FailurePoint::AfterRecords(9_000))
        .with_task("feed", FailurePoint::AfterRecords(5_000));
    let handle = job.with_failures(plan).start().unwrap();
    let monitor = handle.monitor();
    let mut got = Vec::new();
    for seq in 0..n {
        feed.push(trades::trade(seq)).unwrap();
        got.extend(bars.try_iter().flat_map(|b| b.records));
    }
    // Windows fired on watermarks before the end of the feed.
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.is_empty() {
        assert!(
            Instant::now() < deadline,
            "no window fired while the feed ran"
        );
        got.extend(bars.try_iter().flat_map(|b| b.records));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!monitor.is_finished());
    drop(feed);
    let metrics = handle.wait().unwrap();
    let failed: Vec<&str> = metrics.failures.iter().map(|f| f.task.as_str()).collect();
    // Counts are per attempt: the feed fails after 5,000 records, the
    // window subtask in a later attempt after its 9,000.
    assert!(failed.contains(&"feed[0]"), "{failed:?}");
    assert!(failed.contains(&"vwap[1]"), "{failed:?}");
    got.extend(bars.try_iter().flat_map(|b| b.records));
    assert_eq!(sorted(got), trades::expected_bars(n));
}

fn read_bars(path: &std::path::Path) -> Vec<Bar> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let bars = text
        .lines()
        .filter(|l| !l.starts_with("end "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Bar {
                symbol: f[0].parse().unwrap(),
                start_ms: f[1].parse().unwrap(),
                volume: f[2].parse().unwrap(),
                notional: f[3].parse().unwrap(),
            }
        })
        .collect();
    sorted(bars)
}

#[test]
fn a_killed_service_restarts_with_if_present_and_its_bars_are_exact() {
    let n = 60_000;
    let tmp = tempfile::tempdir().unwrap();
    let (chk, out) = (tmp.path().join("chk"), tmp.path().join("bars.txt"));
    let service = |pace_us: u64| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockgate-trades"));
        c.arg("--checkpoint-dir").arg(&chk).arg("--out").arg(&out);
        c.args([
            "--trades",
            &n.to_string(),
            "--pace-us",
            &pace_us.to_string(),
        ]);
        c
    };
    // First start: an empty folder, so it starts fresh; killed once some
    // bars were committed.
    let mut child = service(20).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_bars(&out).len() < 8 {
        assert!(Instant::now() < deadline, "no bars were committed");
        assert!(
            child.try_wait().unwrap().is_none(),
            "it ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    assert!(read_bars(&out).len() < trades::expected_bars(n).len());
    // The same command again: the folder holds checkpoints, it resumes.
    let status = service(0).status().unwrap();
    assert!(status.success());
    assert_eq!(read_bars(&out), trades::expected_bars(n));
}

/// README's Embedding walkthrough is this example's code, verbatim.
#[test]
fn the_readme_walkthrough_is_the_example() {
    let readme = include_str!("../../README.md");
    let code = include_str!("../src/trades.rs");
    let start = readme
        .find("```rust,ignore\n//! A trade aggregator")
        .expect("README's Embedding section shows examples/src/trades.rs")
        + "```rust,ignore\n".len();
    let len = readme[start..].find("```\n").expect("the block ends");
    assert!(
        readme[start..start + len] == *code,
        "README's trade aggregator differs from examples/src/trades.rs: copy the file into the block"
    );
}
