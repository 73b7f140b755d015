//! Per-task metrics, readable while a job runs.
//!
//! Each task thread updates its own [`TaskMetrics`] with relaxed atomic adds
//! (one per batch, not per record); readers take a [`TaskMetricsSnapshot`]
//! at any time. Times are in ns on [`crate::util::clock::now_ns`]'s clock.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Live counters of one task (one subtask of an operator chain).
#[derive(Debug, Default)]
pub struct TaskMetrics {
    name: String,
    records_in: AtomicU64,
    batches_in: AtomicU64,
    records_out: AtomicU64,
    batches_out: AtomicU64,
    idle_ns: AtomicU64,
    backpressure_ns: AtomicU64,
    started_ns: AtomicU64,
    ended_ns: AtomicU64,
    queued: AtomicU64,
    /// [`PIN_NONE`], or the core asked for plus 1, negated when the
    /// request failed (see [`Pinning`]).
    pin: AtomicI64,
}

/// `TaskMetrics::pin` when no pinning was asked for.
const PIN_NONE: i64 = 0;

/// Where a task's thread runs, as the pinning policy asked and the OS
/// answered (`core_affinity::set_for_current`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "core")]
pub enum Pinning {
    /// No pinning was asked for.
    #[default]
    Unpinned,
    /// Pinned to this core.
    Pinned(usize),
    /// Pinning to this core failed (e.g. the core does not exist or the
    /// process may not run there): the thread runs unpinned.
    Failed(usize),
}

/// The counters the telemetry sampler copies into the metrics facade
/// (`crate::telemetry`), read without the task's name.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TaskCounters {
    pub(crate) records_in: u64,
    pub(crate) records_out: u64,
    pub(crate) idle_ns: u64,
    pub(crate) backpressure_ns: u64,
    pub(crate) queued: u64,
}

/// A copy of a task's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMetricsSnapshot {
    /// The task's full name, e.g. `keyed_sum[1]`.
    pub name: String,
    /// Records received from input channels (not counting replays).
    pub records_in: u64,
    /// Batches received.
    pub batches_in: u64,
    /// Records sent to output channels.
    pub records_out: u64,
    /// Batches sent (`records_out / batches_out` is the mean batch size).
    pub batches_out: u64,
    /// Time parked waiting for input, ns.
    pub idle_ns: u64,
    /// Time blocked on a full output channel (backpressure), ns.
    pub backpressure_ns: u64,
    /// Time neither idle nor backpressured since the task started, ns.
    pub busy_ns: u64,
    /// Elements queued in the task's input channels when last sampled.
    pub input_queue_len: u64,
    /// Whether the task's thread is pinned to a core.
    #[serde(default)]
    pub pinning: Pinning,
}

impl TaskMetricsSnapshot {
    /// Mean records per output batch (0 when nothing was sent).
    pub fn mean_batch_out(&self) -> f64 {
        if self.batches_out == 0 {
            0.0
        } else {
            self.records_out as f64 / self.batches_out as f64
        }
    }
}

impl TaskMetrics {
    /// Fresh counters for the task named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        TaskMetrics {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The task's full name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn start(&self) {
        self.started_ns.store(crate::util::clock::now_ns(), Relaxed);
    }
    pub(crate) fn end(&self) {
        self.ended_ns.store(crate::util::clock::now_ns(), Relaxed);
    }
    #[inline]
    pub(crate) fn add_in(&self, records: u64) {
        self.records_in.fetch_add(records, Relaxed);
        self.batches_in.fetch_add(1, Relaxed);
    }
    #[inline]
    pub(crate) fn add_out(&self, records: u64) {
        self.records_out.fetch_add(records, Relaxed);
        self.batches_out.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_idle_ns(&self, ns: u64) {
        self.idle_ns.fetch_add(ns, Relaxed);
    }
    pub(crate) fn add_backpressure_ns(&self, ns: u64) {
        self.backpressure_ns.fetch_add(ns, Relaxed);
    }
    pub(crate) fn set_queued(&self, n: u64) {
        self.queued.store(n, Relaxed);
    }
    /// Records the outcome of pinning the task's thread to `core`.
    pub(crate) fn set_pinned(&self, core: usize, ok: bool) {
        // Core ids are far below i64::MAX, so `core + 1` fits.
        let v = core as i64 + 1;
        self.pin.store(if ok { v } else { -v }, Relaxed);
    }

    /// The counters the sampler copies, now.
    pub(crate) fn counters(&self) -> TaskCounters {
        TaskCounters {
            records_in: self.records_in.load(Relaxed),
            records_out: self.records_out.load(Relaxed),
            idle_ns: self.idle_ns.load(Relaxed),
            backpressure_ns: self.backpressure_ns.load(Relaxed),
            queued: self.queued.load(Relaxed),
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> TaskMetricsSnapshot {
        let started = self.started_ns.load(Relaxed);
        let ended = self.ended_ns.load(Relaxed);
        let end = if ended == 0 {
            crate::util::clock::now_ns()
        } else {
            ended
        };
        let total = if started == 0 {
            0
        } else {
            end.saturating_sub(started)
        };
        let idle = self.idle_ns.load(Relaxed);
        let bp = self.backpressure_ns.load(Relaxed);
        TaskMetricsSnapshot {
            name: self.name.clone(),
            records_in: self.records_in.load(Relaxed),
            batches_in: self.batches_in.load(Relaxed),
            records_out: self.records_out.load(Relaxed),
            batches_out: self.batches_out.load(Relaxed),
            idle_ns: idle,
            backpressure_ns: bp,
            busy_ns: total.saturating_sub(idle + bp),
            input_queue_len: self.queued.load(Relaxed),
            pinning: match self.pin.load(Relaxed) {
                PIN_NONE => Pinning::Unpinned,
                v if v > 0 => Pinning::Pinned((v - 1) as usize),
                v => Pinning::Failed((-v - 1) as usize),
            },
        }
    }
}

/// The peak resident set size of this process in bytes (`VmHWM` of
/// `/proc/self/status`; 0 where unavailable, e.g. off Linux). A process's
/// peak only grows: compare pipelines in separate processes.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
