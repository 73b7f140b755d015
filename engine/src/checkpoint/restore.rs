//! Restore: which checkpoint a job starts or restarts from, and whether it
//! may.
//!
//! - At start ([`open`]): the storage is opened (a folder is locked for
//!   the job), and with `checkpoint.restore_mode` `required` (or
//!   `if-present` on a storage that holds any checkpoint) the newest
//!   checkpoint whose whole chain loads, decodes and was taken by this job
//!   is chosen; newer ones that do not load are set aside as evidence
//!   (`corrupt-chk-*`). With `never`, a folder that holds checkpoints is
//!   refused.
//! - At a restart within the process ([`restart_point`]): the newest
//!   completed checkpoint that loads, read back from the job's storage.
//! - Before anything runs: state no operator claims, channel state that
//!   cannot be replayed here, and another configuration are refused
//!   (`check_*`).
//!
//! A job without storage of its own keeps its checkpoints in a
//! [`MemoryStorage`], so that every job restarts the same way.

use super::coordinator::RestorePoint;
use super::publisher::Publisher;
use super::storage::{
    CheckpointStorage, JobFingerprint, LoadedCheckpoint, LocalDirStorage, MemoryStorage,
    TaskStateKey,
};
use super::task_state::{OperatorSnapshot, RestoredState, TaskRestore};
use crate::barrier::CheckpointMode;
use crate::config::{JobConfig, RestoreMode};
use crate::types::element::CheckpointId;
use crate::types::error::JobError;
use crate::types::key_groups::{Rescale, UPPER_MAX_PARALLELISM};
use crate::types::task_id::TaskId;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A checkpoint a restore at start skipped because it did not load.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SkippedCheckpoint {
    /// Its id.
    pub id: CheckpointId,
    /// Why it was skipped (the storage's or the decoder's message).
    pub reason: String,
    /// Where the storage kept it, out of the way of restores and retention
    /// ([`CheckpointStorage::set_aside`]); `None` where it is left as it was.
    pub kept_at: Option<String>,
}

/// What a job starts with, checkpoint-wise.
pub(crate) struct Opened {
    /// Where checkpoints go (`None`: no checkpointing).
    pub(crate) publisher: Option<Publisher>,
    /// The state to start from.
    pub(crate) restored: Option<RestoredState>,
    /// Newer checkpoints that did not load, set aside.
    pub(crate) skipped: Vec<SkippedCheckpoint>,
    /// The id after the newest in storage.
    pub(crate) next_id: Option<CheckpointId>,
}

/// Opens the job's checkpoint storage (`storage`, else `checkpoint.dir`,
/// else memory) and picks what it restores from: `restored` as given, or
/// with `checkpoint.restore_mode` (see [`RestoreMode`]) the newest usable
/// checkpoint there.
///
/// # Errors
/// A storage that cannot be opened, locked or listed; a restore that
/// finds nothing usable or a checkpoint of another job; a folder in use.
pub(crate) fn open(
    job: JobFingerprint,
    config: &JobConfig,
    storage: Option<Box<dyn CheckpointStorage>>,
    mut restored: Option<RestoredState>,
) -> Result<Opened, JobError> {
    let checkpointing = config.checkpoint.mode != CheckpointMode::None;
    let mode = config.checkpoint.effective_restore_mode();
    if mode != RestoreMode::Never && storage.is_none() && config.checkpoint.dir.is_none() {
        return Err(JobError::Config(format!(
            "checkpoint.restore_mode {mode} needs checkpoint.dir (or a storage)"
        )));
    }
    // A folder is one job's while it runs (its lock goes with the
    // publisher, which lives as long as the job).
    let mut folder_lock = None;
    let storage: Option<(Box<dyn CheckpointStorage>, String)> =
        match (storage, &config.checkpoint.dir) {
            (Some(s), _) => Some((s, "the job's checkpoint storage".to_string())),
            (None, Some(dir)) => {
                let local = LocalDirStorage::open(dir).map_err(JobError::Storage)?;
                if checkpointing {
                    folder_lock = Some(local.lock().map_err(JobError::Storage)?);
                }
                Some((Box::new(local), dir.display().to_string()))
            }
            // The one way to keep checkpoints in memory.
            (None, None) if checkpointing => Some((
                Box::new(MemoryStorage::new()),
                "the job's in-memory checkpoints".to_string(),
            )),
            (None, None) => None,
        };
    let mut opened = Opened {
        publisher: None,
        restored: None,
        skipped: Vec::new(),
        next_id: None,
    };
    if let Some((storage, where_)) = storage {
        let _ = storage.clean_temporaries();
        let existing = storage.list().map_err(JobError::Storage)?;
        // If-present: only a storage with no checkpoint in any form starts
        // fresh; anything else restores as `required` does.
        let traces = match mode {
            RestoreMode::IfPresent => storage.traces().map_err(JobError::Storage)?,
            _ => Vec::new(),
        };
        let restoring = mode == RestoreMode::Required
            || mode == RestoreMode::IfPresent && !(existing.is_empty() && traces.is_empty());
        if restoring {
            let (found, corrupt) = newest_usable(&*storage, &existing, Some(&job))?;
            let Some(r) = found else {
                let held = if traces.is_empty() {
                    String::new()
                } else {
                    format!("; it holds {}", traces.join(", "))
                };
                return Err(JobError::Restore(format!(
                    "no complete checkpoint in {where_}{}{held}",
                    why_none(&corrupt)
                )));
            };
            restored = Some(r);
            // Newer checkpoints that do not load are kept aside, as
            // evidence: neither restored again nor deleted by retention.
            for (id, reason) in corrupt {
                let kept_at = match storage.set_aside(id) {
                    Ok(at) => at,
                    Err(e) => {
                        tracing::warn!(checkpoint = %id, error = %e, "cannot set aside a checkpoint that does not load");
                        None
                    }
                };
                opened.skipped.push(SkippedCheckpoint {
                    id,
                    reason,
                    kept_at,
                });
            }
        } else if !existing.is_empty() {
            return Err(JobError::FolderInUse(where_));
        }
        opened.next_id = existing.last().map(|id| id.next());
        if checkpointing {
            opened.publisher = Some(Publisher::start(
                Arc::from(storage),
                job,
                config.checkpoint.retained,
                folder_lock.take(),
                // Restored from this storage: it loaded whole.
                restored
                    .as_ref()
                    .filter(|_| restoring)
                    .map(|r| r.checkpoint),
                config.checkpoint.timeout,
            )?);
        }
    }
    opened.restored = restored;
    Ok(opened)
}

/// The state to restart from after a failure: the latest completed
/// checkpoint, read back from storage (its chains of incremental parts are
/// there), or the newest older one that loads; the initial state when no
/// checkpoint completed since the start.
///
/// # Errors
/// The storage cannot be listed, or nothing at or before the latest
/// completed checkpoint loads.
pub(crate) fn restart_point(
    storage: Option<&dyn CheckpointStorage>,
    latest: Option<RestorePoint>,
) -> Result<Option<RestoredState>, JobError> {
    let latest = match latest {
        None => return Ok(None),
        Some(RestorePoint::Initial(r)) => return Ok(Some(r)),
        Some(RestorePoint::Completed(id)) => id,
    };
    let Some(storage) = storage else {
        return Err(JobError::Internal(format!(
            "checkpoint {latest} completed without storage"
        )));
    };
    let _call = crate::util::calls::call(|| format!("reading chk-{latest} back for a restart"));
    let ids: Vec<CheckpointId> = storage
        .list()
        .map_err(JobError::Storage)?
        .into_iter()
        .filter(|id| *id <= latest)
        .collect();
    match newest_usable(storage, &ids, None)? {
        (Some(found), _) => Ok(Some(found)),
        (None, corrupt) => Err(JobError::Restore(format!(
            "no completed checkpoint loads for the restart{}",
            why_none(&corrupt)
        ))),
    }
}

/// What task `task` (of `parallelism` subtasks now) restores from `r`:
/// its own snapshots, or, when the checkpoint was taken at another
/// parallelism, those of every old subtask, to redistribute.
pub(crate) fn task_restore(
    r: &RestoredState,
    task: &TaskId,
    parallelism: usize,
    max_parallelism: u32,
) -> TaskRestore {
    match r.parallelism.get(&task.operator) {
        Some(&old) if old as usize != parallelism || r.always_rescale => TaskRestore::Rescaled {
            old: (0..old as usize)
                .map(|j| r.states_of(&TaskId::new(task.operator.clone(), j)))
                .collect(),
            rescale: Rescale {
                subtask: task.subtask,
                parallelism,
                old_parallelism: old as usize,
                max_parallelism,
            },
        },
        _ => TaskRestore::Same(r.states_of(task)),
    }
}

/// Decodes a stored checkpoint into the state tasks restore from: per
/// task, the operator snapshots of its chain in order (the parts its delta
/// builds on first).
fn restored_from(loaded: LoadedCheckpoint) -> Result<RestoredState, JobError> {
    let mut states = HashMap::new();
    let decode = |key: &TaskStateKey, bytes: &[u8]| -> Result<Vec<OperatorSnapshot>, JobError> {
        postcard::from_bytes(bytes).map_err(|e| {
            JobError::Restore(format!(
                "state of {}[{}] in {} does not decode: {e}",
                key.task,
                key.subtask,
                loaded.handle.path.display()
            ))
        })
    };
    for (key, bytes) in &loaded.states {
        let mut snaps = Vec::new();
        for base in loaded.bases.get(key).into_iter().flatten() {
            snaps.extend(decode(key, base)?);
        }
        snaps.extend(decode(key, bytes)?);
        states.insert(TaskId::new(key.task.clone(), key.subtask as usize), snaps);
    }
    Ok(RestoredState {
        checkpoint: loaded.metadata.id,
        states,
        parallelism: loaded.metadata.job.parallelism.clone(),
        always_rescale: false,
    })
}

/// The newest checkpoint in `storage` whose whole chain loads and
/// decodes, as a restore at start would pick it (newer ones that do not
/// load are skipped, logged, and left in place), for a job that restores
/// from several folders at once ([`RestoredState::merge`], handed to
/// [`crate::JobBuilder::with_restored_state`]). `Ok(None)`: no checkpoint
/// loads (the error of each is logged).
///
/// # Errors
/// The storage cannot be listed.
pub fn load_restorable(storage: &dyn CheckpointStorage) -> Result<Option<RestoredState>, JobError> {
    let ids = storage.list().map_err(JobError::Storage)?;
    Ok(newest_usable(storage, &ids, None)?.0)
}

/// Why a loaded checkpoint's state files do not fit its recorded
/// parallelism (a damaged or edited `_metadata`): a task with parallelism
/// 0 or above the number of key groups, or state of a subtask that the
/// recorded parallelism does not have (it would be dropped in silence by
/// a restore, rescaled or not).
fn layout_error(loaded: &LoadedCheckpoint) -> Option<String> {
    let job = &loaded.metadata.job;
    let path = loaded.handle.path.display();
    if let Some((task, p)) = job
        .parallelism
        .iter()
        .find(|(_, p)| **p == 0 || **p > job.max_parallelism)
    {
        return Some(format!(
            "{path} records parallelism {p} for '{task}', not between 1 and its max_parallelism {}",
            job.max_parallelism
        ));
    }
    loaded
        .states
        .keys()
        .find_map(|key| match job.parallelism.get(&key.task) {
            Some(p) if key.subtask < *p => None,
            Some(p) => Some(format!(
                "{path} holds state of {}[{}], beyond the parallelism {p} it records for '{}'",
                key.task, key.subtask, key.task
            )),
            None => Some(format!(
                "{path} holds state of {}[{}], a task its metadata does not list",
                key.task, key.subtask
            )),
        })
}

/// Checkpoints a restore skipped, newest first, with why.
type Skipped = Vec<(CheckpointId, String)>;

/// The newest of `ids` (ascending) that loads whole (its chains
/// included), decodes, and, when `job` is given (a restore at start), was
/// taken by that job and has every task's state; with the ids tried
/// before it and why each was skipped. Older ones are tried in turn. Logs
/// the first few skipped. (A restart within the process passes no `job`:
/// its checkpoints may lack tasks that had finished, which count as
/// acknowledged.)
///
/// # Errors
/// A checkpoint taken with another configuration ([`check_compatible`]).
fn newest_usable(
    storage: &dyn CheckpointStorage,
    ids: &[CheckpointId],
    job: Option<&JobFingerprint>,
) -> Result<(Option<RestoredState>, Skipped), JobError> {
    let mut corrupt: Skipped = Vec::new();
    let mut found = None;
    for &id in ids.iter().rev() {
        let loaded = match storage.load(id) {
            Ok(l) => l,
            Err(e) => {
                corrupt.push((id, e.to_string()));
                continue;
            }
        };
        if let Some(job) = job {
            check_compatible(&loaded.metadata.job, job, &loaded.handle.path)?;
        }
        if let Some(why) = layout_error(&loaded) {
            corrupt.push((id, why));
            continue;
        }
        let path = loaded.handle.path.clone();
        let r = match restored_from(loaded) {
            Ok(r) => r,
            Err(e) => {
                corrupt.push((id, e.to_string()));
                continue;
            }
        };
        // Every task acknowledged every checkpoint, so each has an entry
        // (possibly empty): a missing one is a damaged checkpoint.
        let missing = job.and_then(|_| {
            r.parallelism
                .iter()
                .flat_map(|(op, p)| (0..*p as usize).map(move |i| TaskId::new(op.clone(), i)))
                .find(|t| !r.states.contains_key(t))
        });
        if let Some(t) = missing {
            corrupt.push((
                id,
                format!("checkpoint {} has no state for task {t}", path.display()),
            ));
            continue;
        }
        found = Some(r);
        break;
    }
    // One line a skipped checkpoint, the first few only: with incremental
    // checkpoints one bad part can spoil many.
    for (id, err) in corrupt.iter().take(3) {
        tracing::warn!(checkpoint = %id, error = %err, "skipping a checkpoint that does not load");
    }
    if corrupt.len() > 3 {
        tracing::warn!("{} more checkpoints do not load", corrupt.len() - 3);
    }
    Ok((found, corrupt))
}

/// Why no checkpoint was usable, for an error message: the one cause, or
/// how many failed with the newest and the oldest cause.
fn why_none(corrupt: &Skipped) -> String {
    match corrupt.as_slice() {
        [] => String::new(),
        [(_, e)] => format!(" ({e})"),
        [(n, newest), .., (o, oldest)] => format!(
            " ({} checkpoints do not load; the newest, {n}: {newest}; the oldest, {o}: {oldest})",
            corrupt.len()
        ),
    }
}

/// Refuses, before anything runs, a restore that cannot replay the
/// restored checkpoint's channel state (records in flight persisted by an
/// unaligned checkpoint): in another checkpointing mode, or at another
/// parallelism (rescaling channel state is not built). A checkpoint whose
/// channel state is empty restores anywhere.
pub(crate) fn check_channel_state(
    r: &RestoredState,
    parallelisms: &[(String, usize)],
    lanes: bool,
) -> Result<(), JobError> {
    let mut holding: Vec<String> = r
        .states
        .iter()
        .filter(|(_, snaps)| {
            snaps.iter().any(|s| {
                s.operator == crate::checkpoint::channel_state::CHANNEL_STATE_OPERATOR
                    && crate::checkpoint::channel_state::holds_records(&s.bytes, r.checkpoint)
            })
        })
        .map(|(task, _)| task.to_string())
        .collect();
    if holding.is_empty() {
        return Ok(());
    }
    holding.sort();
    if !lanes {
        return Err(JobError::Restore(format!(
            "checkpoint {} is unaligned and holds records in flight for {}: restore it with unaligned checkpoints (--checkpoint unaligned) or with an aligned-checkpoint timeout",
            r.checkpoint,
            holding.join(", ")
        )));
    }
    let rescaled = r.always_rescale
        || parallelisms.iter().any(|(name, p)| {
            r.parallelism
                .get(name)
                .is_some_and(|&old| old as usize != *p)
        });
    if rescaled {
        return Err(JobError::Restore(format!(
            "checkpoint {} is unaligned and holds records in flight for {}, and channel state cannot be restored at another parallelism yet: restore it at the checkpoint's parallelism, or from a checkpoint without records in flight",
            r.checkpoint,
            holding.join(", ")
        )));
    }
    Ok(())
}

/// Refuses restored operator state that no operator of the job claims (an
/// operator renamed or removed), which would otherwise be dropped in
/// silence, unless `allow` (Flink's `allowNonRestoredState`).
pub(crate) fn check_all_state_claimed(
    r: &RestoredState,
    operators: &HashSet<String>,
    allow: bool,
) -> Result<(), JobError> {
    let mut unclaimed: Vec<String> = r
        .states
        .iter()
        .flat_map(|(task, snaps)| {
            snaps
                .iter()
                .filter(|s| {
                    !operators.contains(&s.operator)
                        && s.operator != crate::checkpoint::channel_state::CHANNEL_STATE_OPERATOR
                })
                .map(move |s| format!("{} (task {task})", s.operator))
        })
        .collect();
    if unclaimed.is_empty() {
        return Ok(());
    }
    unclaimed.sort();
    unclaimed.dedup();
    if allow {
        tracing::warn!(operators = ?unclaimed, "restored state that no operator claims is dropped (allow_non_restored_state)");
        return Ok(());
    }
    Err(JobError::Restore(format!(
        "checkpoint {} holds state of operators this job does not have: {}; rename them back, or set checkpoint.allow_non_restored_state to drop that state",
        r.checkpoint,
        unclaimed.join(", ")
    )))
}

/// Refuses a checkpoint taken by a job with another name, configuration,
/// operators or number of key groups. A different parallelism is
/// accepted: the tasks are then restored rescaled (each operator
/// redistributes its state, or refuses, see
/// [`crate::Checkpointed::restore_rescaled`]).
fn check_compatible(
    stored: &JobFingerprint,
    now: &JobFingerprint,
    path: &std::path::Path,
) -> Result<(), JobError> {
    if stored.job_name != now.job_name {
        return Err(JobError::Restore(format!(
            "{} was taken by job '{}', not '{}'",
            path.display(),
            stored.job_name,
            now.job_name
        )));
    }
    if stored.max_parallelism == 0 || stored.max_parallelism > UPPER_MAX_PARALLELISM {
        return Err(JobError::Restore(format!(
            "{} records max_parallelism {}, not between 1 and {UPPER_MAX_PARALLELISM} (a damaged or edited _metadata?)",
            path.display(),
            stored.max_parallelism
        )));
    }
    if stored.max_parallelism != now.max_parallelism {
        return Err(JobError::Restore(format!(
            "{} was taken with max_parallelism {} (key groups), {} now; it cannot change on restore (keyed state is stored by key group)",
            path.display(),
            stored.max_parallelism,
            now.max_parallelism
        )));
    }
    for op in now.parallelism.keys() {
        if !stored.parallelism.contains_key(op) {
            return Err(JobError::Restore(format!(
                "operator '{op}' is not in {}; the job graph differs",
                path.display()
            )));
        }
    }
    if stored.parallelism.len() != now.parallelism.len() {
        return Err(JobError::Restore(format!(
            "{} has operators this job does not have; the job graph differs",
            path.display()
        )));
    }
    // A key that is absent on one side and null on the other is no
    // difference (a setting added later, unset), as `config_differences`
    // shows them: refuse exactly when it names one.
    let differences = config_differences(&stored.config, &now.config);
    if !differences.is_empty() {
        return Err(JobError::Restore(format!(
            "{} was taken with another configuration: {}",
            path.display(),
            differences.join(", ")
        )));
    }
    Ok(())
}

/// What differs between two application configs, as `key: stored → now`
/// per differing key of an object (nested objects as `a.b`), or the two
/// values whole: the words of a restore refused for another configuration,
/// for applications that check before they start a job too. Empty when
/// they are the same; a key absent on one side and null on the other is
/// no difference.
///
/// # Examples
/// ```
/// use serde_json::json;
/// let d = lockgate::storage::config_differences(&json!({"a": 1, "b": "x"}), &json!({"a": 2, "b": "x"}));
/// assert_eq!(d, ["a: 1 → 2"]);
/// assert!(lockgate::storage::config_differences(&json!({"a": 1, "b": null}), &json!({"a": 1})).is_empty());
/// assert!(lockgate::storage::config_differences(&json!(null), &json!(null)).is_empty());
/// ```
pub fn config_differences(stored: &serde_json::Value, now: &serde_json::Value) -> Vec<String> {
    fn walk(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    let (va, vb) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    if va != vb {
                        walk(&name, va, vb, out);
                    }
                }
            }
            _ => {
                let shown = |v: &Value| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => "(none)".into(),
                    other => other.to_string(),
                };
                let name = if prefix.is_empty() { "config" } else { prefix };
                // Values that read the same differ in type: show them as JSON.
                let (x, y) = match (shown(a), shown(b)) {
                    (x, y) if x == y => (a.to_string(), b.to_string()),
                    other => other,
                };
                out.push(format!("{name}: {x} → {y}"));
            }
        }
    }
    let mut out = Vec::new();
    if stored != now {
        walk("", stored, now, &mut out);
    }
    out
}
