//! The publisher thread (`lg-publish`): the one place a checkpoint's
//! metadata is written, the checkpoint published, and old ones retired.
//!
//! The coordinator decides; the publisher carries out its
//! [`StorageRequest`]s in the order asked, off the job thread (a publish
//! ends with `fsync`s), and answers each publish on
//! [`Publisher::results`]. Requests are handled one at a time: a
//! checkpoint's metadata write is short (one file), and its parts were
//! written side by side by the tasks' snapshot threads before.

use super::coordinator::StorageRequest;
use super::storage::{CheckpointMetadata, CheckpointStorage, FolderLock, JobFingerprint};
use crate::types::element::CheckpointId;
use crate::types::error::JobError;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The answer to a publish: the bytes written, or what the storage said.
pub(crate) type Published = (CheckpointId, Result<u64, String>);

/// The job's storage and its publisher thread.
pub(crate) struct Publisher {
    storage: Arc<dyn CheckpointStorage>,
    requests: Option<Sender<StorageRequest>>,
    results: Receiver<Published>,
    thread: Option<JoinHandle<()>>,
}

impl Publisher {
    /// Starts the thread; it holds the folder's `lock` (if any) until it
    /// ends, so the folder stays this job's while it publishes.
    pub(crate) fn start(
        storage: Arc<dyn CheckpointStorage>,
        job: JobFingerprint,
        retained: usize,
        lock: Option<FolderLock>,
    ) -> Result<Self, JobError> {
        let (tx, rx) = unbounded::<StorageRequest>();
        let (res_tx, res_rx) = unbounded();
        let st = storage.clone();
        let thread = std::thread::Builder::new()
            .name("lg-publish".into())
            .spawn(move || {
                let _lock = lock;
                // Its metadata writes, renames and deletions must not hold
                // a core that a task waits for ([`crate::yield_point`]).
                crate::util::background::mark_background_thread();
                for req in rx {
                    let _busy = crate::util::background::busy();
                    crate::util::background::yield_point();
                    serve(&*st, &job, retained, req, &res_tx);
                }
            })
            .map_err(|e| JobError::Internal(format!("spawning the publisher thread: {e}")))?;
        Ok(Publisher {
            storage,
            requests: Some(tx),
            results: res_rx,
            thread: Some(thread),
        })
    }

    /// The storage it publishes to (restarts read back from it).
    pub(crate) fn storage(&self) -> &dyn CheckpointStorage {
        &*self.storage
    }

    /// A shared handle on the storage (the tasks' snapshot threads write
    /// their parts to it).
    pub(crate) fn shared_storage(&self) -> Arc<dyn CheckpointStorage> {
        self.storage.clone()
    }

    /// Where the answers to publish requests come.
    pub(crate) fn results(&self) -> &Receiver<Published> {
        &self.results
    }

    /// Queues `req`.
    pub(crate) fn send(&self, req: StorageRequest) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(req);
        }
    }
}

/// Carries out one request.
fn serve(
    st: &dyn CheckpointStorage,
    job: &JobFingerprint,
    retained: usize,
    req: StorageRequest,
    results: &Sender<Published>,
) {
    match req {
        StorageRequest::Publish {
            id,
            kind,
            trigger_ns,
            parts,
        } => {
            let meta = CheckpointMetadata::new(id, kind, trigger_ns, job.clone());
            let r = st
                .publish(&meta, &parts)
                .map(|h| h.total_bytes)
                .map_err(|e| e.to_string());
            if r.is_err() {
                let _ = st.discard(id);
            }
            let _ = results.send((id, r));
        }
        StorageRequest::Discard { id } => {
            if let Err(e) = st.discard(id) {
                tracing::warn!(checkpoint = %id, error = %e, "dropping the parts of an aborted checkpoint failed");
            }
        }
        StorageRequest::Remove { id } => {
            if let Err(e) = st.remove(id) {
                tracing::warn!(checkpoint = %id, error = %e, "deleting a checkpoint published too late failed");
            }
        }
        StorageRequest::Retain => {
            if let Err(e) = st.retain(retained.max(1)) {
                tracing::warn!(error = %e, "removing old checkpoints failed");
            }
        }
    }
}

impl Drop for Publisher {
    /// Lets the thread finish what was asked (retention, discards), then
    /// joins it, so that the checkpoint folder's lock it holds is released
    /// when the publisher is gone (a job refused after its publisher
    /// started must not keep the folder).
    fn drop(&mut self) {
        self.requests = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
