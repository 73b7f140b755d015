//! The reference job end to end: exact results against the closed form,
//! with and without checkpoints and injected failures.

use lockgate::{
    testing::FailurePlan, testing::FailurePoint, CheckpointMode, JobConfig, RestartStrategy,
};
use lockgate_workloads::refjob::{
    run_reference_job, seeded_failures, task_names, RefEvent, RefJobConfig, RefSum, JOB_NAME,
};

/// The overdraft a channel may owe in unaligned mode, in batches (the
/// engine's `channel::OVERDRAFT_LIMIT`, private to it).
const OVERDRAFT_BATCHES: usize = 2;
use lockgate_workloads::workload::{ExpectedResult, KeySpace, Workload};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Held by every W4 test: W4's sink spins a core, so two W4 jobs side by
/// side on a 2-core machine leave the rest of both jobs no core, and the
/// checkpoints these tests wait for come too late in the runs.
fn one_w4_at_a_time() -> MutexGuard<'static, ()> {
    static W4: Mutex<()> = Mutex::new(());
    W4.lock().unwrap_or_else(PoisonError::into_inner)
}

fn checkpointed(mode: CheckpointMode, restarts: u32) -> JobConfig {
    let mut c = JobConfig::default();
    c.checkpoint.mode = mode;
    c.checkpoint.interval = Some(Duration::from_millis(10));
    c.restart = RestartStrategy {
        max_attempts: restarts,
        delay: Duration::ZERO,
    };
    c
}

#[test]
fn w1_without_checkpoints_matches_the_closed_form() {
    let cfg = RefJobConfig::w1(200_000);
    let report = run_reference_job(&cfg, JobConfig::default(), FailurePlan::none()).unwrap();
    assert!(report.ok(), "{:?}", report.failure());
    let expected = ExpectedResult::compute(200_000, &KeySpace::uniform(cfg.keys).unwrap());
    assert_eq!(report.check.fingerprint, expected.fingerprint());
    assert_eq!(report.delivered, 200_000);
    assert_eq!((report.lost, report.duplicated), (0, 0));
    // W1 records every delivery (closed loop, no warm-up).
    assert_eq!(report.latency.len(), 200_000);
    assert_eq!(report.sources.emitted, 200_000);
    assert_eq!(report.metrics.restarts, 0);
    let names: Vec<_> = report
        .metrics
        .tasks
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, task_names(2));
}

#[test]
fn w1_exactly_once_survives_two_failures_exactly() {
    let cfg = RefJobConfig::w1(200_000);
    let plan = seeded_failures(&cfg, 7, 2);
    assert_eq!(plan.failures.len(), 2);
    let report =
        run_reference_job(&cfg, checkpointed(CheckpointMode::ExactlyOnce, 2), plan).unwrap();
    assert_eq!(report.metrics.restarts, 2, "{:?}", report.metrics.failures);
    assert_eq!(report.failures_struck, 2);
    assert!(report.ok(), "{:?}", report.failure());
    assert!(report.check.is_exact(), "{}", report.check);
    assert_eq!((report.lost, report.duplicated), (0, 0));
    // Replays reach the sink again: it received at least every record.
    assert!(report.delivered >= 200_000);
    assert!(report.metrics.completed_checkpoints() >= 1);
    // ... and its latency once, at its last delivery: the recordings are
    // rolled back with the sink's state.
    assert_eq!(report.latency.len(), 200_000);
}

#[test]
fn w2_failures_count_each_latency_once_and_show_each_recovery() {
    // Checkpoints every 10 ms, and without any (a restart from the start).
    for mode in [CheckpointMode::ExactlyOnce, CheckpointMode::None] {
        let cfg = RefJobConfig::paced(Workload::W2, 50_000, Duration::from_secs(1), Duration::ZERO);
        let plan = seeded_failures(&cfg, 5, 2);
        let mut job = checkpointed(mode, 2);
        if mode == CheckpointMode::None {
            job.checkpoint.interval = None;
        }
        let report = run_reference_job(&cfg, job, plan).unwrap();
        assert_eq!(report.metrics.restarts, 2, "{:?}", report.metrics.failures);
        assert!(report.ok(), "{mode:?}: {:?}", report.failure());
        assert!(
            report.delivered > 50_000,
            "{mode:?}: replays reach the sink"
        );
        assert_eq!(report.latency.len(), 50_000, "{mode:?}");
        assert_eq!(report.latency_uncorrected.len(), 50_000, "{mode:?}");
        let per_second: u64 = report.intervals.iter().map(|h| h.len()).sum();
        assert_eq!(per_second, 50_000, "{mode:?}");
        assert_eq!(report.recoveries.len(), 2);
        let mut longest = 0;
        for r in &report.recoveries {
            let ns = r.recovery_ns.expect("records were delivered after it");
            assert!(ns > 0);
            assert!(r.failure.cause.contains("injected failure"), "{r:?}");
            longest = longest.max(ns);
            if mode == CheckpointMode::None {
                assert_eq!(r.failure.restored_from, None);
            }
        }
        // The schedule belongs to the run: a record the recovery delayed
        // keeps its intended time, so the recovery shows in the latency.
        assert!(
            report.latency.max() >= longest,
            "{mode:?}: max {} < recovery {longest}",
            report.latency.max()
        );
    }
}

#[test]
fn w1_at_least_once_with_failures_loses_nothing() {
    let cfg = RefJobConfig::w1(200_000);
    let plan = seeded_failures(&cfg, 11, 2);
    let report =
        run_reference_job(&cfg, checkpointed(CheckpointMode::AtLeastOnce, 2), plan).unwrap();
    assert_eq!(report.metrics.restarts, 2, "{:?}", report.metrics.failures);
    assert_eq!(report.lost, 0, "{}", report.check);
    assert!(report.ok(), "{:?}", report.failure());
}

/// W4: closed-loop sources for a time behind a sink of 5 µs a record; the
/// expected records are those the sources emitted. Short: its sink spins a
/// core.
#[test]
fn w4_backpressure_runs_are_exact_with_and_without_failures() {
    let _w4 = one_w4_at_a_time();
    let cfg = RefJobConfig {
        workload: Workload::W4,
        duration: Duration::from_millis(400),
        warmup: Duration::from_millis(100),
        ..Default::default()
    };
    for (mode, failures) in [(CheckpointMode::None, 0), (CheckpointMode::ExactlyOnce, 1)] {
        let plan = seeded_failures(&cfg, 3, failures);
        let mut job = checkpointed(mode, 1);
        if mode == CheckpointMode::None {
            job.checkpoint.interval = None;
        }
        let report = run_reference_job(&cfg, job, plan).unwrap();
        assert!(report.ok(), "{mode:?}: {:?}", report.failure());
        assert_eq!(report.metrics.restarts as usize, failures, "{mode:?}");
        // The sources ran for their time, not to the bound of the check.
        assert!(report.total_records > 0);
        assert!(report.total_records < cfg.total_records(), "{mode:?}");
        assert_eq!((report.lost, report.duplicated), (0, 0), "{mode:?}");
        // At most one record every 5 µs left the sink.
        let seconds = report.recorded_seconds.max(1e-3);
        assert!(report.records_per_s() <= 1.05 * 200_000.0, "{seconds}");
        // The warm-up is a time: records sent in it are checked, not
        // recorded (a restart from the start sends them again after it).
        assert!(report.recorded_records <= report.total_records, "{mode:?}");
        if failures == 0 {
            assert!(report.recorded_records < report.total_records, "{mode:?}");
        }
    }
}

/// Unaligned checkpoints under W4's backpressure: channels stay full, so
/// each checkpoint persists records in flight, and a restart from such a
/// checkpoint must replay them, losing and duplicating nothing. The sink
/// and then a keyed sum fail after some 10,000s of records, well after the
/// first checkpoints (every 20 ms); retried with later failures until a
/// restart restored the second of two back-to-back checkpoints with
/// channel state.
#[test]
fn w4_unaligned_restores_channel_state_exactly() {
    w4_failures_restore_channel_state(checkpointed(CheckpointMode::Unaligned, 2), true, |_, m| {
        // Every checkpoint is unaligned but the final one (FLIP-147: it
        // follows every record, rule 18), which holds no channel state.
        for c in m.checkpoints.iter().filter(|c| c.is_completed()) {
            assert_eq!(c.unaligned, !c.is_final, "checkpoint {}", c.id);
            if c.is_final {
                assert_eq!(c.persisted_bytes, 0, "the final checkpoint");
            }
        }
    });
}

/// W4 with aligned checkpoints and a 2 ms aligned-checkpoint timeout
/// (rule 19): under sustained backpressure the alignments time out and
/// switch to unaligned, persisting channel state; a restart restores one
/// of them exactly. The final checkpoint stays aligned.
#[test]
fn w4_aligned_checkpoints_that_time_out_restore_exactly() {
    let mut job = checkpointed(CheckpointMode::ExactlyOnce, 2);
    job.checkpoint.aligned_checkpoint_timeout = Some(Duration::from_millis(2));
    w4_failures_restore_channel_state(job, false, |round, m| {
        let completed: Vec<_> = m.checkpoints.iter().filter(|c| c.is_completed()).collect();
        assert!(
            completed
                .iter()
                .any(|c| c.unaligned && c.persisted_bytes > 0),
            "round {round}: no checkpoint switched to unaligned under W4"
        );
        for c in &completed {
            if c.is_final {
                assert!(!c.unaligned, "the final checkpoint stays aligned");
            }
            if !c.unaligned {
                assert_eq!(c.persisted_bytes, 0, "checkpoint {} is aligned", c.id);
            }
        }
    });
}

/// Runs W4 (800 ms) with `job`'s checkpoints every 20 ms while the sink
/// and then a keyed sum fail, up to 8 rounds with later failures, until a
/// restart restored a checkpoint with channel state (with `back_to_back`,
/// the second of two back-to-back checkpoints with channel state). Each
/// round must be exact, its persisted bytes within the in-flight bound,
/// and pass `check` (given the round and the job's metrics).
fn w4_failures_restore_channel_state(
    mut job: JobConfig,
    back_to_back: bool,
    check: impl Fn(u64, &lockgate::JobMetrics),
) {
    let _w4 = one_w4_at_a_time();
    job.checkpoint.interval = Some(Duration::from_millis(20));
    let cfg = RefJobConfig {
        workload: Workload::W4,
        duration: Duration::from_millis(800),
        warmup: Duration::from_millis(100),
        ..Default::default()
    };
    let names = task_names(cfg.parallelism);
    let task = |prefix: &str| names.iter().position(|n| n.starts_with(prefix)).unwrap();
    // In flight stays bounded (credits): per checkpoint at most every
    // channel's capacity plus its overdraft, in batches, whatever the
    // number of checkpoints. W4 at parallelism 2 has 6 channels;
    // postcard encodes a record in at most twice its in-memory size.
    let record = std::mem::size_of::<RefEvent>().max(std::mem::size_of::<RefSum>());
    let bound = 6 * (job.channel_capacity + OVERDRAFT_BATCHES) * job.batch_size * record * 2;
    // Up to 8 rounds, the failure points cycling through 4 (later ones
    // would fall after the run's ~150,000 records): on a loaded machine
    // checkpoints are slower and a round may restore none with channel
    // state (seen once under a load average of 14).
    for round in 1..=8u64 {
        let step = (round - 1) % 4 + 1;
        // Back to back needs two completed checkpoints in the sink's
        // attempt before it fails: later.
        let sink_after = if back_to_back {
            40_000 + 20_000 * step
        } else {
            20_000 * step
        };
        let plan = FailurePlan::none()
            .with(task("sink"), FailurePoint::AfterRecords(sink_after))
            .with(task("keyed_sum"), FailurePoint::AfterRecords(10_000 * step));
        let report = run_reference_job(&cfg, job.clone(), plan).unwrap();
        assert!(report.ok(), "round {round}: {:?}", report.failure());
        assert_eq!((report.lost, report.duplicated), (0, 0), "round {round}");
        let m = &report.metrics;
        assert!(m.completed_checkpoints() > 0);
        for c in m.checkpoints.iter().filter(|c| c.is_completed()) {
            assert!(
                c.persisted_bytes as usize <= bound,
                "checkpoint {} persisted {} B, over the in-flight bound {bound} B",
                c.id,
                c.persisted_bytes
            );
        }
        check(round, m);
        // Done once a restart restored a checkpoint with channel state;
        // with `back_to_back`, the second of two taken back to back (ids
        // n - 1 and n, both completed): only n's channel state may be
        // replayed.
        let with_channel_state = |id: u64| {
            m.checkpoints
                .iter()
                .any(|c| c.id.get() == id && c.is_completed() && c.persisted_bytes > 0)
        };
        let restored_second = m.failures.iter().any(|f| {
            f.restored_from.is_some_and(|id| {
                let id = id.get();
                with_channel_state(id) && (!back_to_back || id > 1 && with_channel_state(id - 1))
            })
        });
        if restored_second {
            return;
        }
    }
    panic!("no restart restored a checkpoint with channel state (back to back: {back_to_back}) in 8 runs");
}

/// W3 with aligned checkpoints through the timeout path: a timeout far
/// beyond every alignment keeps every checkpoint aligned, with no channel
/// state; a tiny one switches some; both survive failures exactly.
#[test]
fn w3_with_an_aligned_checkpoint_timeout_survives_failures_exactly() {
    let cfg = RefJobConfig {
        workload: Workload::W3,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(100),
        ..Default::default()
    };
    for timeout_ms in [60_000u64, 1] {
        let mut job = checkpointed(CheckpointMode::ExactlyOnce, 2);
        job.checkpoint.aligned_checkpoint_timeout = Some(Duration::from_millis(timeout_ms));
        let plan = seeded_failures(&cfg, 7, 2);
        let report = run_reference_job(&cfg, job, plan).unwrap();
        assert_eq!(report.metrics.restarts, 2, "{:?}", report.metrics.failures);
        assert!(report.ok(), "{:?}", report.failure());
        assert!(report.check.is_exact(), "{}", report.check);
        assert_eq!((report.lost, report.duplicated), (0, 0));
        if timeout_ms == 60_000 {
            for c in report
                .metrics
                .checkpoints
                .iter()
                .filter(|c| c.is_completed())
            {
                assert!(
                    !c.unaligned && c.persisted_bytes == 0,
                    "checkpoint {}",
                    c.id
                );
            }
        }
    }
}

/// W3 (skewed sources) and W1 with unaligned checkpoints and injected
/// failures: exactly-once like the aligned mode.
#[test]
fn w1_and_w3_unaligned_survive_failures_exactly() {
    for cfg in [
        RefJobConfig::w1(200_000),
        RefJobConfig {
            workload: Workload::W3,
            duration: Duration::from_millis(500),
            warmup: Duration::from_millis(100),
            ..Default::default()
        },
    ] {
        let plan = seeded_failures(&cfg, 5, 2);
        let report =
            run_reference_job(&cfg, checkpointed(CheckpointMode::Unaligned, 2), plan).unwrap();
        assert_eq!(report.metrics.restarts, 2, "{:?}", report.metrics.failures);
        assert!(report.ok(), "{:?}", report.failure());
        assert!(report.check.is_exact(), "{}", report.check);
        assert_eq!((report.lost, report.duplicated), (0, 0));
    }
}

#[test]
fn w2_short_run_is_exact_and_records_every_latency() {
    let cfg = RefJobConfig::paced(Workload::W2, 50_000, Duration::from_secs(1), Duration::ZERO);
    assert_eq!(cfg.total_records(), 50_000);
    let report = run_reference_job(&cfg, JobConfig::default(), FailurePlan::none()).unwrap();
    assert!(report.ok(), "{:?}", report.failure());
    assert_eq!(report.latency.len(), 50_000);
    assert_eq!(report.latency_uncorrected.len(), 50_000);
    assert_eq!(report.recorded_records, 50_000);
    let interval_total: u64 = report.intervals.iter().map(|h| h.len()).sum();
    assert_eq!(interval_total, 50_000);
}

#[test]
fn w3_with_warmup_records_only_after_it_and_checkpoints_exactly() {
    let cfg = RefJobConfig::paced(
        Workload::W3,
        20_000,
        Duration::from_millis(500),
        Duration::from_millis(250),
    );
    assert_eq!(cfg.total_records(), 15_000);
    assert_eq!(cfg.first_recorded_n(), 5_000);
    let report = run_reference_job(
        &cfg,
        checkpointed(CheckpointMode::ExactlyOnce, 0),
        FailurePlan::none(),
    )
    .unwrap();
    assert!(report.ok(), "{:?}", report.failure());
    assert_eq!(report.latency.len(), 10_000);
}

#[test]
fn payload_records_flow_and_check_exactly() {
    let mut cfg = RefJobConfig::w1(20_000);
    cfg.payload_bytes = 100;
    let report = run_reference_job(&cfg, JobConfig::default(), FailurePlan::none()).unwrap();
    assert!(report.ok(), "{:?}", report.failure());
}

#[test]
fn restore_from_another_configuration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut jc = checkpointed(CheckpointMode::ExactlyOnce, 0);
    jc.checkpoint.dir = Some(dir.path().to_path_buf());
    let cfg = RefJobConfig::w1(50_000);
    let report = run_reference_job(&cfg, jc.clone(), FailurePlan::none()).unwrap();
    assert!(report.ok(), "{:?}", report.failure());
    // The same job resumes from its final checkpoint: nothing left to do.
    jc.checkpoint.restore_mode = lockgate::RestoreMode::Required;
    let again = run_reference_job(&cfg, jc.clone(), FailurePlan::none()).unwrap();
    assert!(again.ok(), "{:?}", again.failure());
    let other = RefJobConfig::w1(60_000);
    let err = run_reference_job(&other, jc, FailurePlan::none()).unwrap_err();
    assert!(err.to_string().contains("another configuration"), "{err}");
    // Each difference is named, stored value first.
    assert!(
        err.to_string().contains("total_records: 50000 → 60000"),
        "{err}"
    );
    assert_eq!(JOB_NAME, "lockgate-reference");
}

#[test]
fn invalid_configurations_are_refused_before_starting() {
    let mut cfg = RefJobConfig::paced(Workload::W2, 0, Duration::from_secs(1), Duration::ZERO);
    assert!(run_reference_job(&cfg, JobConfig::default(), FailurePlan::none()).is_err());
    cfg.rate = 10;
    cfg.duration = Duration::ZERO;
    assert!(run_reference_job(&cfg, JobConfig::default(), FailurePlan::none()).is_err());
    let mut w1 = RefJobConfig::w1(10);
    w1.parallelism = 0;
    assert!(run_reference_job(&w1, JobConfig::default(), FailurePlan::none()).is_err());
}

/// W3's skewed source with tiny channels and a checkpoint every 10 ms, in
/// both modes: the job completes, and every checkpoint ends (completed or
/// aborted with a reason); none is left pending.
#[test]
fn w3_skew_with_small_channels_never_deadlocks() {
    use lockgate::stats::CheckpointStatus;
    for mode in [CheckpointMode::ExactlyOnce, CheckpointMode::AtLeastOnce] {
        let cfg = RefJobConfig::paced(
            Workload::W3,
            50_000,
            Duration::from_millis(600),
            Duration::ZERO,
        );
        let mut job = checkpointed(mode, 0);
        job.batch_size = 16;
        job.channel_capacity = 2;
        job.handler.blocker_capacity_bytes = 0; // pure blocking
        let report = run_reference_job(&cfg, job, FailurePlan::none()).unwrap();
        assert!(report.ok(), "{mode:?}: {:?}", report.failure());
        let cps = &report.metrics.checkpoints;
        assert!(report.metrics.completed_checkpoints() >= 1, "{mode:?}");
        assert!(
            cps.iter().all(|c| c.status != CheckpointStatus::Pending),
            "{mode:?}"
        );
    }
}

/// With a tiny alignment limit, W3's checkpoints abort with reason
/// `alignment_limit` and the job goes on to an exact result.
#[test]
fn w3_checkpoints_over_the_alignment_limit_abort_and_the_job_goes_on() {
    use lockgate::{barrier::AbortReason, stats::CheckpointStatus};
    let cfg = RefJobConfig::paced(
        Workload::W3,
        50_000,
        Duration::from_millis(1200),
        Duration::ZERO,
    );
    let mut job = checkpointed(CheckpointMode::ExactlyOnce, 0);
    // Any record held by an alignment passes 1 byte: the first alignment
    // that buffers anything aborts (one in 7 runs held none in 600 ms of
    // a 64-byte limit while other tests loaded the machine).
    job.handler.max_alignment_bytes = Some(1);
    job.checkpoint.tolerable_failures = u32::MAX;
    let report = run_reference_job(&cfg, job, FailurePlan::none()).unwrap();
    assert!(report.ok(), "{:?}", report.failure());
    assert!(
        report
            .metrics
            .checkpoints
            .iter()
            .any(|c| c.status == CheckpointStatus::Aborted(AbortReason::AlignmentLimit)),
        "{:?}",
        report
            .metrics
            .checkpoints
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>()
    );
}

/// A run that fails (here: the sink, with no restart left) did not send
/// the records its sources never generated: they are `not_sent`, not
/// lost; `lost` is what was sent and never received (in flight at the
/// failure).
#[test]
fn a_failed_run_counts_records_never_generated_as_not_sent() {
    // 10,000 records/s for 2 s: the sink fails at its 2,000th record.
    let cfg = RefJobConfig::paced(Workload::W2, 10_000, Duration::from_secs(2), Duration::ZERO);
    let total = cfg.total_records();
    let sink = task_names(cfg.parallelism)
        .iter()
        .position(|t| t == "sink[0]")
        .unwrap();
    let plan = FailurePlan::none().with(sink, FailurePoint::AfterRecords(2_000));
    let report =
        run_reference_job(&cfg, checkpointed(CheckpointMode::ExactlyOnce, 0), plan).unwrap();
    assert!(report.job_error.is_some(), "the job failed");
    assert_eq!(report.lost + report.not_sent, report.check.lost);
    assert!(
        report.not_sent >= total / 2,
        "{} of {total} not sent, {} lost",
        report.not_sent,
        report.lost
    );
    assert!(
        report.lost < total / 10,
        "{} lost of {total}: only what was in flight",
        report.lost
    );
}

#[test]
fn committed_output_on_workers_with_a_reader_polling_the_sink_finishes_exactly() {
    // On cooperative workers the sink's checkpoint work runs in the
    // worker's slices and keeps a lock across its yield points; a reader
    // of the recordings (loadgen's progress and `--ab` segments) that took
    // the sink's slot first and then that lock stopped the worker for
    // good. Polled the whole run, the job must still end, exactly.
    use lockgate_workloads::refjob::{start_reference_job, wait_reference_job, OutputMode};
    let mut cfg = RefJobConfig::paced(Workload::W2, 40_000, Duration::from_secs(1), Duration::ZERO);
    cfg.output = OutputMode::Committed;
    let mut job = checkpointed(CheckpointMode::ExactlyOnce, 0);
    job.checkpoint.interval = Some(Duration::from_millis(2));
    job.workers = Some(2);
    let (handle, results) =
        start_reference_job(&cfg, job, FailurePlan::none(), serde_json::Value::Null).unwrap();
    let mut polls = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !handle.is_finished() {
        if std::time::Instant::now() > deadline {
            // Dropping the handle would wait for the stuck job.
            std::mem::forget(handle);
            panic!("a 1 s job has not ended after 120 s: a reader and the sink's checkpoint work wait for each other");
        }
        let _ = results.progress();
        polls += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    let report = wait_reference_job(handle, &results, false, 0).unwrap();
    assert!(polls > 0);
    assert!(report.ok(), "{:?}", report.failure());
    assert_eq!(report.latency.len(), 40_000);
}

#[test]
fn w4_committed_output_counts_only_what_its_sources_generated() {
    // W4's sources stop at their time, far below the run's capacity: the
    // committed check must not count the records never generated as lost.
    use lockgate_workloads::refjob::OutputMode;
    let _w4 = one_w4_at_a_time();
    let mut cfg = RefJobConfig {
        workload: Workload::W4,
        duration: Duration::from_millis(400),
        warmup: Duration::from_millis(100),
        ..Default::default()
    };
    cfg.output = OutputMode::Committed;
    let report = run_reference_job(
        &cfg,
        checkpointed(CheckpointMode::ExactlyOnce, 0),
        FailurePlan::none(),
    )
    .unwrap();
    assert!(report.total_records < cfg.total_records());
    let committed = report.committed.as_ref().expect("committed output");
    assert_eq!(
        (committed.lost, committed.duplicated, committed.uncommitted),
        (0, 0, 0)
    );
    assert_eq!(committed.committed, report.total_records);
    assert!(report.ok(), "{:?}", report.failure());
}
