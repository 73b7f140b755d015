//! Whether a job is healthy, as `/health` answers: [`Health`], per job
//! ([`crate::JobHandle::health`]) and for the whole process
//! ([`process_health`]).

use crate::barrier::AbortReason;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Where a job stands, as [`super::JOB_STATE`] reports it (its
/// [`JobState::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Built, its first tasks not started yet (restoring, at start).
    Starting,
    /// Its tasks run.
    Running,
    /// A task failed; the job restarts from its latest completed
    /// checkpoint (the restart delay, the restore, the new tasks' start).
    Restarting,
    /// It ended: every source ended or it was stopped.
    Finished,
    /// It ended with an error (a failure with no restart left, too many
    /// failed checkpoints, a restore that failed).
    Failed,
}

impl JobState {
    /// The value of [`super::JOB_STATE`]: 0 starting, 1 running, 2
    /// restarting, 3 finished, 4 failed.
    pub fn code(self) -> u8 {
        match self {
            JobState::Starting => 0,
            JobState::Running => 1,
            JobState::Restarting => 2,
            JobState::Finished => 3,
            JobState::Failed => 4,
        }
    }

    fn from_code(c: u8) -> JobState {
        match c {
            0 => JobState::Starting,
            1 => JobState::Running,
            2 => JobState::Restarting,
            3 => JobState::Finished,
            _ => JobState::Failed,
        }
    }

    /// The state in words: `starting`, `running`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Restarting => "restarting",
            JobState::Finished => "finished",
            JobState::Failed => "failed",
        }
    }

    fn is_live(self) -> bool {
        matches!(
            self,
            JobState::Starting | JobState::Running | JobState::Restarting
        )
    }
}

/// Whether a job is healthy, and why not. Healthy (`/health` answers 200)
/// only while it runs with fewer checkpoints failed in a row than
/// [`crate::CheckpointConfig::tolerable_failures`] (always without
/// checkpointing; with `tolerable_failures` 0, while none failed); not
/// (503) at that count, while it starts or restarts, and once it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// True when healthy.
    pub ok: bool,
    /// The job's state.
    pub state: JobState,
    /// One line: `running`, or why not healthy (e.g. `3 checkpoints failed
    /// in a row (tolerated: 3), the last: storage_error`).
    pub reason: String,
}

/// A handle on a job's health, to read from another thread (an HTTP
/// handler) while the job runs and after it ended
/// ([`crate::JobHandle::health_probe`]).
#[derive(Clone, Debug)]
pub struct HealthProbe(pub(crate) Arc<HealthCell>);

impl HealthProbe {
    /// The job's health now.
    pub fn health(&self) -> Health {
        self.0.health()
    }

    /// The job's name.
    pub fn job_name(&self) -> &str {
        &self.0.job_name
    }
}

/// One job's health, updated by its job thread.
#[derive(Debug)]
pub(crate) struct HealthCell {
    job_name: String,
    state: AtomicU8,
    checkpointing: bool,
    tolerable: u32,
    consecutive_failures: AtomicU32,
    /// What the state's reason needs: the failure being restarted from,
    /// the error the job ended with, the last checkpoint failure.
    detail: Mutex<Detail>,
}

#[derive(Debug, Default)]
struct Detail {
    state: String,
    last_failure: Option<AbortReason>,
}

impl HealthCell {
    pub(crate) fn new(job_name: &str, checkpointing: bool, tolerable: u32) -> Arc<HealthCell> {
        let cell = Arc::new(HealthCell {
            job_name: job_name.to_string(),
            state: AtomicU8::new(JobState::Starting.code()),
            checkpointing,
            tolerable,
            consecutive_failures: AtomicU32::new(0),
            detail: Mutex::new(Detail::default()),
        });
        register(cell.clone());
        cell
    }

    fn detail(&self) -> std::sync::MutexGuard<'_, Detail> {
        self.detail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn state(&self) -> JobState {
        JobState::from_code(self.state.load(Relaxed))
    }

    /// Enters `state`; `why`: what its reason says (a failure, an error).
    pub(crate) fn set_state(&self, state: JobState, why: String) {
        self.detail().state = why;
        self.state.store(state.code(), Relaxed);
    }

    /// A checkpoint ended: completed, or aborted with `reason`.
    pub(crate) fn checkpoint_ended(&self, aborted: Option<AbortReason>) -> u32 {
        match aborted {
            None => {
                self.consecutive_failures.store(0, Relaxed);
                0
            }
            // The coordinator's rule (Flink's CheckpointFailureManager).
            Some(r) if r.counts_as_failure() => {
                self.detail().last_failure = Some(r);
                self.consecutive_failures.fetch_add(1, Relaxed) + 1
            }
            Some(_) => self.consecutive_failures.load(Relaxed),
        }
    }

    pub(crate) fn health(&self) -> Health {
        let state = self.state();
        let d = self.detail();
        let (ok, reason) = match state {
            JobState::Starting => (false, "starting".to_string()),
            JobState::Restarting => (false, format!("restarting after {}", d.state)),
            JobState::Finished => (false, "the job finished".to_string()),
            JobState::Failed => (false, format!("the job failed: {}", d.state)),
            JobState::Running => {
                let n = self.consecutive_failures.load(Relaxed);
                if self.checkpointing && n > 0 && n >= self.tolerable {
                    (
                        false,
                        format!(
                            "{n} checkpoints failed in a row (tolerated: {}), the last: {}",
                            self.tolerable,
                            d.last_failure.map_or("unknown", AbortReason::as_str)
                        ),
                    )
                } else {
                    (true, "running".to_string())
                }
            }
        };
        Health {
            ok,
            state,
            reason: one_line(&reason),
        }
    }
}

/// `s` on one line (a cause may hold newlines), at most 300 characters.
fn one_line(s: &str) -> String {
    let mut line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 300 {
        line = line.chars().take(299).collect::<String>() + "…";
    }
    line
}

/// Jobs whose health [`process_health`] reads: the newest
/// [`MAX_REGISTERED`] started in this process.
static JOBS: Mutex<VecDeque<Arc<HealthCell>>> = Mutex::new(VecDeque::new());

/// How many jobs' health the process keeps (a process that starts jobs
/// one after another keeps the newest).
const MAX_REGISTERED: usize = 64;

fn register(cell: Arc<HealthCell>) {
    let mut jobs = JOBS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Ended jobs go first when the list is full.
    if jobs.len() >= MAX_REGISTERED {
        if let Some(i) = jobs.iter().position(|c| !c.state().is_live()) {
            jobs.remove(i);
        } else {
            jobs.pop_front();
        }
    }
    jobs.push_back(cell);
}

/// The health of the jobs this process started, as one answer (what the
/// `lockgate` command's `/health` serves): while some job is starting,
/// running or restarting, healthy when each of those is (else the first
/// one that is not, named when several run); once every job ended, the
/// newest's (not healthy); before any job started, not healthy
/// (`no job has started`).
pub fn process_health() -> Health {
    let jobs = JOBS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let live: Vec<&Arc<HealthCell>> = jobs.iter().filter(|c| c.state().is_live()).collect();
    if live.is_empty() {
        return jobs.back().map_or_else(
            || Health {
                ok: false,
                state: JobState::Starting,
                reason: "no job has started".into(),
            },
            |c| c.health(),
        );
    }
    let several = live.len() > 1;
    for c in &live {
        let h = c.health();
        if !h.ok {
            return if several {
                Health {
                    reason: format!("job {}: {}", c.job_name, h.reason),
                    ..h
                }
            } else {
                h
            };
        }
    }
    Health {
        ok: true,
        state: JobState::Running,
        reason: if several {
            format!("{} jobs running", live.len())
        } else {
            "running".into()
        },
    }
}
