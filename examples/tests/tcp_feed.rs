//! A TCP feed read through the replayable-source contract: with failures
//! injected by name, every trade comes once (the reconnect seeks to the
//! checkpointed sequence number), and the windows over it are exact.

use lockgate::source::Replayable;
use lockgate::{
    testing::FailurePlan, testing::FailurePoint, CheckpointConfig, JobBuilder, JobConfig,
};
use lockgate_examples::tcp_feed::{serve, TcpFeed};
use lockgate_examples::trades::trade;
use std::net::TcpListener;
use std::time::Duration;

#[test]
fn a_tcp_feed_resumes_from_its_sequence_number_after_failures() {
    let n = 20_000;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    serve(listener, n);
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(10), None);
    config.restart.delay = Duration::ZERO;
    config.restart.max_attempts = 5;
    let job = JobBuilder::new("tcp-feed", config);
    let out = job
        .source("feed", 1, move |_| Replayable::new(TcpFeed { addr }))
        .rebalance()
        .task("check", 2)
        .map(|t| t)
        .collect_committed(None);
    let plan = FailurePlan::none()
        .with_task("feed", FailurePoint::AfterRecords(5_000))
        .with_task("check[1]", FailurePoint::AfterRecords(4_000));
    let metrics = job.with_failures(plan).start().unwrap().wait().unwrap();
    assert_eq!(metrics.restarts, 2);
    let mut got: Vec<_> = out.try_iter().flat_map(|b| b.records).collect();
    got.sort_by_key(|t| t.seq);
    assert_eq!(got.len() as u64, n, "every trade once");
    assert!(got.iter().zip(0..).all(|(t, seq)| *t == trade(seq)));
}
