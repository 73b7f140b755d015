//! The job thread's side of the telemetry: the job's state and health
//! as it starts, fails, restarts and ends, the restart counter, and a
//! `recovery` span (info level) per restore, handed to the sampler
//! thread, which ends it at the first record after the restore.

use super::health::{HealthCell, JobState};
use super::names::{describe_metrics, LABEL_JOB_NAME, RESTARTS};
use super::sampler::{records_in, Recovery, Sampler};
use crate::checkpoint::RestoredState;
use crate::types::metrics::TaskMetrics;
use crate::types::task_id::TaskId;
use metrics::Counter;
use std::sync::Arc;
use std::time::Instant;
use tracing::field::Empty;

/// A job's telemetry (see the module docs).
pub(crate) struct JobTelemetry {
    job_name: String,
    health: Arc<HealthCell>,
    metrics: Vec<Arc<TaskMetrics>>,
    restarts: Counter,
    sampler: Sampler,
    /// The recovery under way, until its new tasks start.
    recovery: Option<Recovery>,
}

/// The bytes of operator state `r` holds (what a restore reads).
fn state_bytes(r: &RestoredState) -> u64 {
    r.states
        .values()
        .flatten()
        .map(|s| s.bytes.len() as u64)
        .sum()
}

impl JobTelemetry {
    /// Starts the job's sampler; `restored`: the state the job starts
    /// from, whose restore is a recovery too.
    pub(crate) fn start(
        job_name: &str,
        tasks: &[TaskId],
        metrics: Vec<Arc<TaskMetrics>>,
        health: Arc<HealthCell>,
        restored: Option<&RestoredState>,
    ) -> JobTelemetry {
        describe_metrics();
        let sampler = Sampler::start(job_name, tasks, &metrics, health.clone());
        let recovery = restored.map(|r| {
            let span = tracing::info_span!(
                "recovery",
                job = %job_name,
                cause = "restored at start",
                restart = 0,
                checkpoint = r.checkpoint.get(),
                state_bytes = state_bytes(r),
                first_record = Empty,
                duration_ms = Empty,
            );
            Recovery {
                span,
                since: Instant::now(),
                baseline: 0,
            }
        });
        JobTelemetry {
            restarts: metrics::counter!(RESTARTS, LABEL_JOB_NAME => job_name.to_string()),
            job_name: job_name.to_string(),
            health,
            metrics,
            sampler,
            recovery,
        }
    }

    /// An attempt's tasks started.
    pub(crate) fn running(&mut self) {
        self.health.set_state(JobState::Running, String::new());
        if let Some(r) = self.recovery.take() {
            self.sampler.watch(r);
        }
    }

    /// Task `task` failed with `cause`, and the job restarts: a recovery
    /// begins.
    pub(crate) fn restarting(&mut self, task: &TaskId, cause: &str, restart: u32) {
        self.health
            .set_state(JobState::Restarting, format!("{task} failed: {cause}"));
        let span = tracing::info_span!(
            "recovery",
            job = %self.job_name,
            cause = %format_args!("{task} failed: {cause}"),
            restart,
            checkpoint = Empty,
            state_bytes = Empty,
            first_record = Empty,
            duration_ms = Empty,
        );
        self.recovery = Some(Recovery {
            span,
            since: Instant::now(),
            baseline: records_in(&self.metrics),
        });
    }

    /// The restart restores `restored` (`None`: from the beginning).
    pub(crate) fn restoring(&mut self, restored: Option<&RestoredState>) {
        self.restarts.increment(1);
        if let Some(r) = &self.recovery {
            match restored {
                Some(s) => {
                    r.span.record("checkpoint", s.checkpoint.get());
                    r.span.record("state_bytes", state_bytes(s));
                }
                None => {
                    r.span.record("state_bytes", 0u64);
                }
            }
        }
    }

    /// The job ended, with `error` when it failed: the state, a last
    /// sample, and the sampler ends.
    pub(crate) fn ended(&mut self, error: Option<&crate::types::error::JobError>) {
        match error {
            None => self.health.set_state(JobState::Finished, String::new()),
            Some(e) => self.health.set_state(JobState::Failed, e.to_string()),
        }
        if let Some(r) = self.recovery.take() {
            r.span.record("first_record", false);
        }
        self.sampler.stop();
    }
}
