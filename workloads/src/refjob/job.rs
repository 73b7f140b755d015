//! The reference job's wiring (operators `source`, `keyed_sum`, `sink`)
//! and how the load generator, the tests and the benches run it: build,
//! start, wait, or all three, and a seeded failure plan.

use super::config::{RefJobConfig, RefJobError, W4_IN_FLIGHT};
use super::keyed_sum::RefKeyedSum;
use super::records::{Bytes, Payload, RefEvent};
use super::report::{RefJobReport, RefJobResults};
use super::shared::lock;
use super::sink::RefSink;
use super::sink_state::fresh_replica;
use super::source::RefSource;
use crate::workload::{KeySpace, SinkCheck, Workload};
use lockgate::{testing::FailurePlan, JobBuilder, JobConfig, JobHandle, Managed};
use std::time::Duration;

pub use super::config::JOB_NAME;

/// Adds the reference topology to `job` (operators `source`, `keyed_sum`,
/// `sink`) and returns the handle to its shared results. The job's
/// application config should be [`RefJobConfig::app_config_json`] (see
/// [`start_reference_job`]).
///
/// # Errors
/// [`RefJobError::Config`] / [`RefJobError::Workload`] for an invalid
/// configuration.
pub fn build_reference_job(
    cfg: &RefJobConfig,
    job: &JobBuilder,
) -> Result<RefJobResults, RefJobError> {
    let results = RefJobResults::new(cfg, job.config().checkpoint.mode)?;
    if cfg.payload_bytes > 0 {
        build_typed::<Bytes>(&results, job)?;
    } else {
        build_typed::<()>(&results, job)?;
    }
    Ok(results)
}

fn build_typed<P: Payload>(results: &RefJobResults, job: &JobBuilder) -> Result<(), RefJobError> {
    let shared = results.shared.clone();
    let cfg = &shared.cfg;
    let keys = KeySpace::new(cfg.keys, cfg.key_dist)?;
    let p = cfg.parallelism;
    let (total, nkeys) = (shared.total, cfg.keys);
    let s_src = shared.clone();
    let s_sink = shared.clone();
    job.source("source", p, move |i| {
        RefSource::<P>::new(i.index, s_src.clone(), keys.clone())
            .expect("source index and parallelism were validated")
    })
    .map_in_place(|e: &mut RefEvent<P>| e.value = crate::workload::chained_map(e.value))
    .key_by(|e: &RefEvent<P>| e.key)
    .task("keyed_sum", p)
    .process("keyed_sum", move |_| Managed::new(RefKeyedSum))
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |i| {
        // A new attempt starts from a fresh check unless restore_state
        // gives it the checkpointed one.
        let mut slot = lock(&s_sink.slots[i.index]);
        slot.check = SinkCheck::new(total, nkeys).expect("sizes were validated");
        slot.attempts += 1;
        let (attempt, later) = (slot.attempts, slot.attempts > 1);
        // With checkpoints, the snapshot thread's replica starts here, at
        // the attempt's start, not at its first checkpoint.
        let replica = slot
            .open_interval
            .is_some()
            .then(|| fresh_replica(&mut slot.check));
        drop(slot);
        RefSink {
            slot: i.index,
            shared: s_sink.clone(),
            replica,
            roll_back: later,
            first_write: true,
            attempt,
        }
    });
    Ok(())
}

/// Builds the job named [`JOB_NAME`] with `job_config` and `failures`,
/// starts it, and returns its handle and results. `run` (when not null)
/// is recorded in every checkpoint beside [`RefJobConfig::app_config_json`]
/// as its `run` key (the load generator's flags), so a restore must match
/// it too.
///
/// # Errors
/// An invalid configuration; the engine's refusal to start (bad config,
/// storage, restore: [`RefJobError::Job`]).
pub fn start_reference_job(
    cfg: &RefJobConfig,
    job_config: JobConfig,
    failures: FailurePlan,
    run: serde_json::Value,
) -> Result<(JobHandle, RefJobResults), RefJobError> {
    let mut app = cfg.app_config_json();
    if !run.is_null() {
        app["run"] = run;
    }
    let job = JobBuilder::new(JOB_NAME, job_config)
        .with_app_config(app)
        .with_failures(failures);
    let results = build_reference_job(cfg, &job)?;
    // Compute the closed form before the clock starts mattering.
    results.expected();
    let events = job.checkpoint_events();
    let handle = job.start()?;
    // Every checkpoint becomes a timeline band as it ends (the job's
    // metrics keep only the last few in full), and a completed one lets
    // the sink's settled latency intervals be merged: by a thread of its
    // own in idle time (`lg-settle`). That merge is the load generator's
    // bookkeeping; in the sink's checkpoint work, which a task thread
    // runs when no core is spare, it delayed the records behind each
    // barrier (BENCHMARKS.md).
    let spawn_err = |e: std::io::Error| {
        RefJobError::Job(lockgate::JobError::Internal(format!(
            "spawning a thread: {e}"
        )))
    };
    let (settle_tx, settle_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let shared = results.shared.clone();
    let settler = std::thread::Builder::new()
        .name("lg-settle".into())
        .spawn(move || {
            let _ = lockgate::tuning::idle_priority();
            // Ends when the events thread drops its sender (the job ended).
            while settle_rx.recv().is_ok() {
                shared.merge_all_settled();
            }
        })
        .map_err(spawn_err)?;
    let shared = results.shared.clone();
    let collector = std::thread::Builder::new()
        .name("lg-ckpt-events".into())
        .spawn(move || {
            for c in events.iter() {
                lock(&shared.bands).add(&c);
                lock(&shared.interval).add(&c);
                if c.status == lockgate::stats::CheckpointStatus::Completed {
                    // Full: a merge is already due, and it takes all.
                    let _ = settle_tx.try_send(());
                }
            }
        })
        .map_err(spawn_err)?;
    *lock(&results.shared.events_thread) = Some((collector, settler));
    Ok((handle, results))
}

/// The task names of the reference job with parallelism `p`, in start
/// order (what [`FailurePlan`] indexes): `source[0..p]`, `keyed_sum[0..p]`,
/// `sink[0]`.
pub fn task_names(p: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..p).map(|i| format!("source[{i}]")).collect();
    v.extend((0..p).map(|i| format!("keyed_sum[{i}]")));
    v.push("sink[0]".into());
    v
}

/// A seeded plan of `count` failures (after-records points) spread so
/// that each strikes during the run: points are drawn in `1..=M` with
/// `M = total / (parallelism × (count + 1) × 2)`, so even `count`
/// failures of one source in a row fit in its share of the records.
pub fn seeded_failures(cfg: &RefJobConfig, seed: u64, count: usize) -> FailurePlan {
    if count == 0 {
        return FailurePlan::none();
    }
    let p = cfg.parallelism.max(1);
    // W4's total is a bound; what it emits is about half of the drain
    // rate over its time (the sink spins a core of two).
    let expected = match cfg.workload {
        Workload::W4 => cfg.total_records().saturating_sub(W4_IN_FLIGHT) / 2,
        _ => cfg.total_records(),
    };
    let max = (expected / (p as u64 * (count as u64 + 1) * 2)).max(1);
    FailurePlan::seeded(seed, count, 2 * p + 1, max)
}

/// Waits until `handle`'s job ended, then collects the report.
///
/// # Errors
/// As [`RefJobResults::finish`].
pub fn wait_reference_job(
    handle: JobHandle,
    results: &RefJobResults,
    interrupted: bool,
    failures_planned: usize,
) -> Result<RefJobReport, RefJobError> {
    while !handle.is_finished() {
        // Poll the job thread's end (it has no completion channel);
        // 2 ms is far below any run's length.
        std::thread::sleep(Duration::from_millis(2));
    }
    let last = handle.metrics();
    let outcome = handle.wait();
    results.finish(outcome, last, interrupted, failures_planned)
}

/// Runs the reference job to its end: builds, starts, waits, checks.
///
/// # Errors
/// An invalid configuration or the engine's refusal to start. A job that
/// fails while running is not an error here: the report says so
/// ([`RefJobReport::job_error`]).
pub fn run_reference_job(
    cfg: &RefJobConfig,
    job_config: JobConfig,
    failures: FailurePlan,
) -> Result<RefJobReport, RefJobError> {
    let planned = failures.failures.len();
    let (handle, results) =
        start_reference_job(cfg, job_config, failures, serde_json::Value::Null)?;
    wait_reference_job(handle, &results, false, planned)
}
