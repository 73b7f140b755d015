//! Storage calls in progress: which thread waits on which file since when.
//!
//! A file system that hangs (frozen, a dead network mount) holds a thread
//! in the kernel for as long as it hangs, and a process cannot exit while
//! one of its threads is held there. The engine never waits on such a
//! thread to fail a job or end it, but an application should say what it
//! is left waiting for: every checkpoint storage call off the record path
//! (a part written, a checkpoint published, read back or removed) is
//! registered here while it runs. Not on the record path: a call costs a
//! lock and a clock read, next to a file write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A checkpoint storage call in progress (see
/// [`storage_calls_in_progress`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageCall {
    /// The thread waiting on it (`lg-snap-3`, `lg-publish`, `lg-job`).
    pub thread: String,
    /// What it does, naming the checkpoint and the part or folder.
    pub what: String,
    /// How long it has been waiting.
    pub running_for: Duration,
}

impl std::fmt::Display for StorageCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} for {:.1} s",
            self.thread,
            self.what,
            self.running_for.as_secs_f64()
        )
    }
}

struct Entry {
    thread: String,
    thread_id: std::thread::ThreadId,
    what: String,
    since: Instant,
}

static NEXT: AtomicU64 = AtomicU64::new(0);
static CALLS: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);

fn calls() -> std::sync::MutexGuard<'static, Option<HashMap<u64, Entry>>> {
    // An entry is inserted or removed whole: a panic cannot leave one half
    // written.
    CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registered while alive (see [`call`]).
#[derive(Debug)]
pub(crate) struct CallGuard(u64);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(m) = calls().as_mut() {
            m.remove(&self.0);
        }
    }
}

/// Registers a storage call of the calling thread, `what` built only
/// here, until the guard drops.
pub(crate) fn call(what: impl FnOnce() -> String) -> CallGuard {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let thread = std::thread::current()
        .name()
        .unwrap_or("an unnamed thread")
        .to_string();
    calls().get_or_insert_with(HashMap::new).insert(
        id,
        Entry {
            thread,
            thread_id: std::thread::current().id(),
            what: what(),
            since: Instant::now(),
        },
    );
    CallGuard(id)
}

/// The checkpoint storage calls running now, in this process, one a
/// thread (the innermost: the file it waits on, when the storage names
/// one), the longest first. A call that has run for seconds is one a hung
/// file system holds; the process cannot exit before the kernel lets it
/// go, so an application says so before it exits (`lockgate loadgen`
/// does, naming each).
///
/// # Examples
/// ```
/// // No job: nothing is waiting on storage.
/// assert!(lockgate::storage::storage_calls_in_progress().is_empty());
/// ```
pub fn storage_calls_in_progress() -> Vec<StorageCall> {
    let now = Instant::now();
    let guard = calls();
    // The innermost call of each thread: the latest registered.
    let mut inner: HashMap<std::thread::ThreadId, (u64, &Entry)> = HashMap::new();
    for (id, e) in guard.iter().flatten() {
        let slot = inner.entry(e.thread_id).or_insert((*id, e));
        if *id > slot.0 {
            *slot = (*id, e);
        }
    }
    let mut v: Vec<StorageCall> = inner
        .into_values()
        .map(|(_, e)| StorageCall {
            thread: e.thread.clone(),
            what: e.what.clone(),
            running_for: now.saturating_duration_since(e.since),
        })
        .collect();
    drop(guard);
    v.sort_by_key(|c| std::cmp::Reverse(c.running_for));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_listed_while_it_runs() {
        let g = call(|| "writing part x".to_string());
        let listed = storage_calls_in_progress();
        assert!(listed.iter().any(|c| c.what == "writing part x"));
        drop(g);
        assert!(!storage_calls_in_progress()
            .iter()
            .any(|c| c.what == "writing part x"));
    }
}
