//! The sampler thread: copies each task's counters (the atomics its
//! thread updates, `TaskMetrics`) into the metrics facade at most every
//! [`SAMPLE_INTERVAL`], so the record path pays nothing for metrics; and
//! ends a recovery's span when the first record after the restore
//! arrives.

use super::health::HealthCell;
use super::names::*;
use crate::types::metrics::TaskMetrics;
use crate::types::task_id::TaskId;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use metrics::{Counter, Gauge, Histogram};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the task counters are copied into the facade.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// How often an open recovery looks for its first record (the precision
/// of [`RECOVERY_DURATION`]).
const RECOVERY_POLL: Duration = Duration::from_millis(1);

/// A recovery in progress: its span, since when, and the records the
/// tasks had received before its restart (the first record after the
/// restore ends it).
pub(crate) struct Recovery {
    pub(crate) span: tracing::Span,
    pub(crate) since: Instant,
    pub(crate) baseline: u64,
}

enum Msg {
    Recovery(Recovery),
    Stop,
}

struct TaskHandles {
    metrics: Arc<TaskMetrics>,
    records_in: Counter,
    records_out: Counter,
    backpressure: Gauge,
    idle: Gauge,
    queue: Gauge,
}

struct State {
    tasks: Vec<TaskHandles>,
    health: Arc<HealthCell>,
    job_state: Gauge,
    healthy: Gauge,
    recovery_duration: Histogram,
    last_recovery: Gauge,
    open: Option<Recovery>,
}

/// The running sampler; [`Sampler::stop`] takes a last sample and ends it.
pub(crate) struct Sampler {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

/// The records every task received so far.
pub(crate) fn records_in(metrics: &[Arc<TaskMetrics>]) -> u64 {
    metrics.iter().map(|m| m.counters().records_in).sum()
}

impl Sampler {
    pub(crate) fn start(
        job_name: &str,
        tasks: &[TaskId],
        metrics: &[Arc<TaskMetrics>],
        health: Arc<HealthCell>,
    ) -> Sampler {
        let job = job_name.to_string();
        let l = [(LABEL_JOB_NAME, job.clone())];
        let tasks = tasks
            .iter()
            .zip(metrics)
            .map(|(t, m)| {
                let l = [
                    (LABEL_JOB_NAME, job.clone()),
                    (LABEL_TASK, t.operator.clone()),
                    (LABEL_SUBTASK, t.subtask.to_string()),
                ];
                TaskHandles {
                    metrics: m.clone(),
                    records_in: metrics::counter!(RECORDS_IN, &l),
                    records_out: metrics::counter!(RECORDS_OUT, &l),
                    backpressure: metrics::gauge!(BACKPRESSURE_SECONDS, &l),
                    idle: metrics::gauge!(IDLE_SECONDS, &l),
                    queue: metrics::gauge!(INPUT_QUEUE_LENGTH, &l),
                }
            })
            .collect();
        let mut state = State {
            tasks,
            health,
            job_state: metrics::gauge!(JOB_STATE, &l),
            healthy: metrics::gauge!(JOB_HEALTHY, &l),
            recovery_duration: metrics::histogram!(RECOVERY_DURATION, &l),
            last_recovery: metrics::gauge!(LAST_RECOVERY_DURATION, &l),
            open: None,
        };
        state.sample();
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("lg-telemetry".into())
            .spawn(move || state.run(&rx));
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the metrics sampler thread; task metrics are not exported");
                None
            }
        };
        Sampler { tx, thread }
    }

    /// Hands over an open recovery, ended at the first record.
    pub(crate) fn watch(&self, r: Recovery) {
        let _ = self.tx.send(Msg::Recovery(r));
    }

    /// A last sample, then the thread ends (a recovery still open is
    /// closed without a first record).
    pub(crate) fn stop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl State {
    fn run(&mut self, rx: &Receiver<Msg>) {
        let mut next_sample = Instant::now() + SAMPLE_INTERVAL;
        loop {
            let now = Instant::now();
            if now >= next_sample {
                self.sample();
                next_sample = now + SAMPLE_INTERVAL;
            }
            self.check_recovery();
            let mut wait = next_sample.saturating_duration_since(Instant::now());
            if self.open.is_some() {
                wait = wait.min(RECOVERY_POLL);
            }
            match rx.recv_timeout(wait) {
                Ok(Msg::Recovery(r)) => {
                    if let Some(old) = self.open.replace(r) {
                        // It failed again before its first record.
                        old.span.record("first_record", false);
                    }
                }
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        self.check_recovery();
        if let Some(r) = self.open.take() {
            r.span.record("first_record", false);
        }
        self.sample();
    }

    fn sample(&self) {
        for t in &self.tasks {
            let c = t.metrics.counters();
            t.records_in.absolute(c.records_in);
            t.records_out.absolute(c.records_out);
            t.backpressure.set(c.backpressure_ns as f64 / 1e9);
            t.idle.set(c.idle_ns as f64 / 1e9);
            t.queue.set(c.queued as f64);
        }
        let h = self.health.health();
        self.job_state.set(f64::from(h.state.code()));
        self.healthy.set(if h.ok { 1.0 } else { 0.0 });
    }

    fn check_recovery(&mut self) {
        let Some(r) = &self.open else { return };
        let seen: u64 = self
            .tasks
            .iter()
            .map(|t| t.metrics.counters().records_in)
            .sum();
        if seen <= r.baseline {
            return;
        }
        let took = r.since.elapsed();
        r.span.record("first_record", true);
        r.span.record("duration_ms", took.as_secs_f64() * 1e3);
        self.recovery_duration.record(took.as_secs_f64());
        self.last_recovery.set(took.as_secs_f64());
        self.open = None;
    }
}
