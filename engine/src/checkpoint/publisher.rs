//! The publisher thread (`lg-publish`): the one place a checkpoint's
//! metadata is written, the checkpoint published, and old ones retired.
//!
//! The coordinator decides; the publisher carries out its
//! [`StorageRequest`]s in the order asked, off the job thread (a publish
//! ends with `fsync`s), and answers each publish on
//! [`Publisher::results`]. Requests are handled one at a time: a
//! checkpoint's metadata write is short (one file), and its parts were
//! written side by side by the tasks' snapshot threads before.
//!
//! After a publish it reads every part back once (size and CRC32C against
//! `_metadata`) and says which were intact, so that only those become
//! bases of deltas; retention keeps what `super::retention` says.

use super::coordinator::StorageRequest;
use super::retention::{Catalog, Entry};
use super::storage::{
    CheckpointMetadata, CheckpointStorage, FolderLock, JobFingerprint, PartHandle, TaskStateKey,
};
use crate::types::element::CheckpointId;
use crate::types::error::JobError;
use crate::util::calls::call;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What the publisher tells the job thread.
#[derive(Debug)]
pub(crate) enum Published {
    /// Checkpoint `id` is published (its bytes written), or what the
    /// storage said.
    Done(CheckpointId, Result<u64, String>),
    /// Checkpoint `id`'s parts were read back: `damaged` are the subtasks
    /// whose part did not match (with why); the others' parts may be
    /// bases of deltas.
    Verified {
        id: CheckpointId,
        damaged: Vec<(TaskStateKey, String)>,
    },
}

/// The job's storage and its publisher thread.
pub(crate) struct Publisher {
    storage: Arc<dyn CheckpointStorage>,
    requests: Option<Sender<StorageRequest>>,
    results: Receiver<Published>,
    thread: Option<JoinHandle<()>>,
    /// Disconnects when the thread ends.
    ended: Receiver<()>,
    /// How long the end of a job waits for the thread (the checkpoint
    /// timeout): a storage that hangs must not hold the job's end.
    grace: std::time::Duration,
}

impl Publisher {
    /// Starts the thread; it holds the folder's `lock` (if any) until it
    /// ends, so the folder stays this job's while it publishes.
    pub(crate) fn start(
        storage: Arc<dyn CheckpointStorage>,
        job: JobFingerprint,
        retained: usize,
        lock: Option<FolderLock>,
        restored: Option<CheckpointId>,
        grace: std::time::Duration,
    ) -> Result<Self, JobError> {
        let (tx, rx) = unbounded::<StorageRequest>();
        let (res_tx, res_rx) = unbounded();
        let (ended_tx, ended) = crossbeam_channel::bounded::<()>(0);
        let st = storage.clone();
        let thread = std::thread::Builder::new()
            .name("lg-publish".into())
            .spawn(move || {
                let _ended = ended_tx;
                let _lock = lock;
                // Its metadata writes, renames and deletions must not hold
                // a core that a task waits for ([`crate::tuning::yield_point`]).
                crate::util::background::mark_background_thread();
                let mut state = State {
                    job,
                    retained,
                    catalog: None,
                    restored,
                };
                for req in rx {
                    let _busy = crate::util::background::busy();
                    crate::util::background::yield_point();
                    state.serve(&*st, req, &res_tx);
                }
            })
            .map_err(|e| JobError::Internal(format!("spawning the publisher thread: {e}")))?;
        Ok(Publisher {
            storage,
            requests: Some(tx),
            results: res_rx,
            thread: Some(thread),
            ended,
            grace,
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

/// The publisher thread's own state.
struct State {
    job: JobFingerprint,
    retained: usize,
    /// What retention knows; read from storage at the first retention.
    catalog: Option<Catalog>,
    /// The checkpoint restored at start, which loaded whole: verified.
    restored: Option<CheckpointId>,
}

impl State {
    /// Carries out one request.
    fn serve(
        &mut self,
        st: &dyn CheckpointStorage,
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
                let meta = CheckpointMetadata::new(id, kind, trigger_ns, self.job.clone());
                let r = {
                    let _call = call(|| format!("publishing chk-{id}"));
                    st.publish(&meta, &parts)
                        .map(|h| h.total_bytes)
                        .map_err(|e| e.to_string())
                };
                if r.is_err() {
                    let _ = st.discard(id);
                }
                let ok = r.is_ok();
                let _ = results.send(Published::Done(id, r));
                if ok {
                    let damaged = verify(st, &parts);
                    let catalog = self.catalog(st);
                    catalog.insert(
                        id,
                        Entry {
                            kind,
                            bases: parts.iter().map(|p| (p.key.clone(), p.link())).collect(),
                            verified: false,
                        },
                    );
                    let keys: Vec<TaskStateKey> = damaged.iter().map(|(k, _)| k.clone()).collect();
                    catalog.verified(id, &keys);
                    let _ = results.send(Published::Verified { id, damaged });
                }
            }
            StorageRequest::Discard { id } => {
                let _call = call(|| format!("dropping the parts of the aborted chk-{id}"));
                if let Err(e) = st.discard(id) {
                    tracing::warn!(checkpoint = %id, error = %e, "dropping the parts of an aborted checkpoint failed");
                }
            }
            StorageRequest::Remove { id } => {
                let _call = call(|| format!("deleting chk-{id}, published after it was aborted"));
                if let Err(e) = st.remove(id) {
                    tracing::warn!(checkpoint = %id, error = %e, "deleting a checkpoint published too late failed");
                }
                if let Some(c) = &mut self.catalog {
                    c.remove(id);
                }
            }
            StorageRequest::Retain => {
                let retained = self.retained;
                let catalog = self.catalog(st);
                let removed = catalog.to_remove(retained);
                // Called even with nothing to delete: one call a completed
                // checkpoint, which a store (or a test) can count on.
                let _call = call(|| format!("deleting {} old checkpoints", removed.len()));
                match st.remove_many(&removed) {
                    Ok(()) => {
                        for id in removed {
                            catalog.remove(id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "removing old checkpoints failed");
                        // Some may be gone: read the folder again next time.
                        self.catalog = None;
                    }
                }
            }
        }
    }

    /// The catalog, read from storage the first time: every published
    /// checkpoint whose metadata reads (a folder whose metadata does not
    /// read is left alone, as the storage's own retention does).
    fn catalog(&mut self, st: &dyn CheckpointStorage) -> &mut Catalog {
        let restored = self.restored;
        self.catalog.get_or_insert_with(|| {
            let _call = call(|| "reading the checkpoints' metadata for retention".to_string());
            let mut c = Catalog::default();
            for id in st.list().unwrap_or_default() {
                crate::util::background::yield_point();
                if let (Ok(meta), Ok(bases)) = (st.load_metadata(id), st.part_bases(id)) {
                    c.insert(
                        id,
                        Entry {
                            kind: meta.kind,
                            bases: bases.into_iter().collect(),
                            verified: Some(id) == restored,
                        },
                    );
                }
            }
            c
        })
    }
}

/// Reads every part back; returns those that did not match, with why.
fn verify(st: &dyn CheckpointStorage, parts: &[PartHandle]) -> Vec<(TaskStateKey, String)> {
    let mut damaged = Vec::new();
    let _call = call(|| match parts.first() {
        Some(p) => format!("reading back chk-{}", p.checkpoint),
        None => "reading back a checkpoint".into(),
    });
    for (p, r) in parts.iter().zip(st.verify_parts(parts)) {
        if let Err(e) = r {
            tracing::warn!(checkpoint = %p.checkpoint, error = %e, "a part read back does not match what was written: it is no base, and the checkpoint is not kept for restoring");
            damaged.push((p.key.clone(), e.to_string()));
        }
    }
    damaged
}

impl Drop for Publisher {
    /// Lets the thread finish what was asked (retention, discards), then
    /// joins it, so that the checkpoint folder's lock it holds is released
    /// when the publisher is gone (a job refused after its publisher
    /// started must not keep the folder). A thread still in a storage call
    /// after the grace (a file system that hangs) is left to finish on its
    /// own, holding the folder's lock: the job ends and reports now.
    fn drop(&mut self) {
        self.requests = None;
        if self.ended.recv_timeout(self.grace) == Err(crossbeam_channel::RecvTimeoutError::Timeout)
        {
            let calls: Vec<String> = crate::util::calls::storage_calls_in_progress()
                .iter()
                .map(ToString::to_string)
                .collect();
            tracing::warn!(
                grace_s = self.grace.as_secs_f64(),
                "the job ends while its checkpoint storage does not answer; still waiting: {}",
                calls.join("; ")
            );
            // Detached: it ends when the storage answers.
            self.thread.take();
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
