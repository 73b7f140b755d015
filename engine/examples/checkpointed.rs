//! A stateful embedded job with exactly-once checkpoints that survives a
//! task failure: the application pushes records through an ingest source,
//! a keyed operator counts them in checkpointed state, one planned failure
//! restarts the job from its latest checkpoint, and the counts that come
//! out at the end of the input are exact (nothing lost, nothing counted
//! twice: the ingest source replays what it took since that checkpoint).
//!
//! Run it with `cargo run -p lockgate --example checkpointed`; it exits with
//! code 1 if a count is wrong.

use lockgate::{
    testing::FailurePlan, testing::FailurePoint, BoxError, CheckpointConfig, Context, JobBuilder,
    JobConfig, KeyedState, Managed, RestartStrategy, StatefulOperator,
};
use std::time::Duration;

/// Distinct keys of the pushed records (`record % KEYS`).
const KEYS: u64 = 10;

/// Counts records per key; emits `(key, count)` once, at the end of input.
/// Its state is managed: `Managed` snapshots it (incrementally) and
/// restores it, with no code here.
struct Count;

impl StatefulOperator<u64, (u64, u64)> for Count {
    type State = KeyedState<u64, u64>;

    fn process(
        &mut self,
        counts: &mut Self::State,
        input: &mut Vec<u64>,
        _ctx: &mut Context<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        for r in input.drain(..) {
            *counts.get_or_default(r % KEYS) += 1;
        }
        Ok(())
    }

    fn end_of_input(
        &mut self,
        counts: &mut Self::State,
        ctx: &mut Context<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        ctx.output().extend(counts.iter().map(|(k, c)| (*k, *c)));
        Ok(())
    }
}

/// Pushes `0..n`, counts them per key in 2 subtasks with one failure, and
/// returns the counts and the number of restarts.
///
/// # Errors
/// The job's error, or a message when the checkpoint folder cannot be made.
pub(crate) fn run(n: u64) -> Result<(Vec<(u64, u64)>, u32), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("checkpoint folder: {e}"))?;
    let mut config = JobConfig::default();
    config.checkpoint =
        CheckpointConfig::exactly_once(Duration::from_millis(50), Some(dir.path().into()));
    config.restart = RestartStrategy {
        max_attempts: 3,
        delay: Duration::ZERO,
    };
    let job = JobBuilder::new("checkpointed", config);
    let (input, ingest) = job.ingest::<u64>("input", 1024);
    let counts = input
        .key_by(|r| r % KEYS)
        .task("count", 2)
        .process("count", |_| Managed::new(Count))
        .collect();
    // One task failure a third of the way in: the job restarts from its
    // latest completed checkpoint.
    let count0 = job
        .task_names()
        .iter()
        .position(|t| t == "count[0]")
        .ok_or("no task count[0]")?;
    let job = job
        .with_failures(FailurePlan::none().with(count0, FailurePoint::AfterRecords(n / (3 * 2))));
    let handle = job.start().map_err(|e| e.to_string())?;
    for r in 0..n {
        ingest.push(r).map_err(|_| "the job ended early")?;
        if r % 1_000 == 999 {
            // a pause now and then, so that checkpoints complete meanwhile
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    ingest.close();
    let metrics = handle.wait().map_err(|e| e.to_string())?;
    let mut got: Vec<(u64, u64)> = counts.try_iter().collect();
    got.sort_unstable();
    Ok((got, metrics.restarts))
}

#[allow(dead_code)]
fn main() {
    let n = 60_000;
    match run(n) {
        Ok((counts, restarts)) => {
            let exact: Vec<(u64, u64)> = (0..KEYS).map(|k| (k, n / KEYS)).collect();
            println!("{restarts} restart(s); counts per key: {counts:?}");
            if counts != exact || restarts != 1 {
                eprintln!("wrong: expected {exact:?} after 1 restart");
                std::process::exit(1);
            }
            println!("exact: every pushed record counted once");
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
