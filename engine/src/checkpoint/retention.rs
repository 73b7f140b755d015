//! Which completed checkpoints to keep, so that the last restorable one
//! is never lost.
//!
//! The rules (the publisher applies them after every completed
//! checkpoint):
//! - A part is *verified* once the publisher read it back whole (size and
//!   CRC32C against `_metadata`); only a verified part may be the base of
//!   a delta. A part that fails is *damaged*.
//! - A checkpoint is *restorable* while every part of its chains (its own
//!   parts and the parts its deltas build on, back to full ones) is known
//!   and none is damaged; it is *verified* when all those parts are.
//! - Kept: the newest `retained` restorable checkpoints; the newest
//!   verified one, V; and a fallback, the newest verified one older than V
//!   whose chains share no file with V's (before any is verified: the
//!   newest restorable one whose parts are all full). With every
//!   checkpoint they build on. A damaged checkpoint is never a root.
//! - Savepoints are never deleted; a folder whose metadata cannot be read
//!   is left alone.
//!
//! Damage after verification (a file deleted or changed later) is found
//! by a snapshot thread's `stat` of its chain before a delta (a deleted
//! or truncated file) or only at restore, which then falls back to the
//! fallback: its files are not V's.

use super::storage::{PartLink, TaskStateKey};
use crate::types::element::{CheckpointId, SnapshotKind};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// One part file: the checkpoint it was written for and whose it is.
type PartFile = (CheckpointId, TaskStateKey);

/// What retention knows of one checkpoint in storage.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) kind: SnapshotKind,
    /// How each part builds on earlier ones (no base: a full part).
    pub(crate) bases: BTreeMap<TaskStateKey, PartLink>,
    /// Every one of its own parts was read back and matched.
    pub(crate) verified: bool,
}

/// The checkpoints in storage, as retention sees them.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    entries: BTreeMap<CheckpointId, Entry>,
    damaged: HashSet<PartFile>,
}

impl Catalog {
    /// Adds (or replaces) checkpoint `id`.
    pub(crate) fn insert(&mut self, id: CheckpointId, entry: Entry) {
        self.entries.insert(id, entry);
    }

    /// Forgets checkpoint `id` (deleted).
    pub(crate) fn remove(&mut self, id: CheckpointId) {
        self.entries.remove(&id);
        self.damaged.retain(|(c, _)| *c != id);
    }

    /// Checkpoint `id` was read back: `damaged` holds its parts that did
    /// not match.
    pub(crate) fn verified(&mut self, id: CheckpointId, damaged: &[TaskStateKey]) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.verified = damaged.is_empty();
        }
        self.damaged.extend(damaged.iter().map(|k| (id, k.clone())));
    }

    /// Every part file of `id`'s chains, `None` when a link is unknown (a
    /// checkpoint gone or unreadable).
    fn files(&self, id: CheckpointId) -> Option<BTreeSet<PartFile>> {
        let mut files = BTreeSet::new();
        for (key, link) in &self.entries.get(&id)?.bases {
            files.insert((id, key.clone()));
            let mut base = link.base;
            while let Some(b) = base.filter(|b| link.reaches(*b)) {
                if !files.insert((b, key.clone())) {
                    break;
                }
                base = self.entries.get(&b)?.bases.get(key)?.base;
            }
        }
        Some(files)
    }

    /// True when every part of `id`'s chains is known and none damaged.
    fn restorable(&self, files: &BTreeSet<PartFile>) -> bool {
        files.iter().all(|f| !self.damaged.contains(f))
    }

    /// True when every checkpoint `files` come from was verified.
    fn all_verified(&self, files: &BTreeSet<PartFile>) -> bool {
        files
            .iter()
            .all(|(c, _)| self.entries.get(c).is_some_and(|e| e.verified))
    }

    /// The checkpoints to delete so that what the module docs say is kept,
    /// with `retained` the newest restorable ones to keep (at least 1).
    pub(crate) fn to_remove(&self, retained: usize) -> Vec<CheckpointId> {
        // Chains are walked lazily, newest first, each once: with rolling
        // chains of a few hundred parts and as many checkpoints kept,
        // walking every checkpoint's chain after every completed one took
        // 15 % of a 2-core run's CPU (W2, 1,000,000 keys, 10 ms, `perf`).
        let mut memo: HashMap<CheckpointId, Option<BTreeSet<PartFile>>> = HashMap::new();
        let newest_first: Vec<CheckpointId> = self
            .entries
            .iter()
            .rev()
            .filter(|(_, e)| e.kind == SnapshotKind::Checkpoint)
            .map(|(id, _)| *id)
            .collect();
        let mut roots: Vec<CheckpointId> = Vec::new();
        for &id in &newest_first {
            if roots.len() == retained.max(1) {
                break;
            }
            if self.chain(&mut memo, id).is_some() {
                roots.push(id);
            }
        }
        let newest_verified = newest_first.iter().copied().find(|&id| {
            self.chain(&mut memo, id)
                .is_some_and(|f| self.all_verified(f))
        });
        match newest_verified {
            Some(v) => {
                roots.push(v);
                let of_v = self.chain(&mut memo, v).cloned().unwrap_or_default();
                let fallback = newest_first.iter().copied().find(|&id| {
                    // A checkpoint whose own part is in V's chains shares
                    // a file with it: no need to walk its chains.
                    let own_in_v = self.entries[&id]
                        .bases
                        .keys()
                        .any(|k| of_v.contains(&(id, k.clone())));
                    id < v
                        && !own_in_v
                        && self
                            .chain(&mut memo, id)
                            .is_some_and(|f| self.all_verified(f) && f.is_disjoint(&of_v))
                });
                roots.extend(fallback);
            }
            None => {
                // Nothing read back yet (a job that restored): the newest
                // checkpoint that is complete on its own.
                let full = newest_first.iter().copied().find(|&id| {
                    self.entries[&id].bases.values().all(|l| l.base.is_none())
                        && self.chain(&mut memo, id).is_some()
                });
                roots.extend(full);
            }
        }
        let mut needed: HashSet<CheckpointId> = HashSet::new();
        for r in &roots {
            if let Some(files) = self.chain(&mut memo, *r) {
                needed.extend(files.iter().map(|(c, _)| *c));
            }
        }
        self.entries
            .iter()
            .filter(|(id, e)| e.kind == SnapshotKind::Checkpoint && !needed.contains(id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The files of `id`'s chains when it is restorable, walked once.
    fn chain<'m>(
        &self,
        memo: &'m mut HashMap<CheckpointId, Option<BTreeSet<PartFile>>>,
        id: CheckpointId,
    ) -> Option<&'m BTreeSet<PartFile>> {
        memo.entry(id)
            .or_insert_with(|| self.files(id).filter(|f| self.restorable(f)))
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: u32) -> TaskStateKey {
        TaskStateKey::new("op", s)
    }

    fn link(base: Option<u64>) -> PartLink {
        PartLink {
            base: base.map(CheckpointId),
            from: None,
        }
    }

    /// A checkpoint of two subtasks with these bases.
    fn entry(b0: Option<u64>, b1: Option<u64>, verified: bool) -> Entry {
        Entry {
            kind: SnapshotKind::Checkpoint,
            bases: [(key(0), link(b0)), (key(1), link(b1))]
                .into_iter()
                .collect(),
            verified,
        }
    }

    fn ids(v: &[u64]) -> Vec<CheckpointId> {
        v.iter().copied().map(CheckpointId).collect()
    }

    /// 1 full, 2-4 deltas on it, 5 full, 6 a delta on 5: V = 6, whose
    /// chains are {5, 6}; the fallback is 4 (chains 1-4), disjoint.
    #[test]
    fn keeps_the_newest_verified_and_a_disjoint_fallback() {
        let mut c = Catalog::default();
        c.insert(CheckpointId(1), entry(None, None, true));
        for i in 2..=4 {
            c.insert(CheckpointId(i), entry(Some(i - 1), Some(i - 1), true));
        }
        c.insert(CheckpointId(5), entry(None, None, true));
        c.insert(CheckpointId(6), entry(Some(5), Some(5), true));
        assert_eq!(c.to_remove(1), Vec::<CheckpointId>::new());
        // A new full chain from 7: V = 8, fallback 6 (chains 5-6): 1-4 go.
        c.insert(CheckpointId(7), entry(None, None, true));
        c.insert(CheckpointId(8), entry(Some(7), Some(7), true));
        assert_eq!(c.to_remove(1), ids(&[1, 2, 3, 4]));
    }

    /// A damaged part of 3 (subtask 0): 3 and 4 (built on it) are not
    /// restorable and never roots; 5 (subtask 0 full again, subtask 1 a
    /// delta on 4) is, and keeps what its chains need.
    #[test]
    fn a_damaged_part_is_never_kept_as_a_root() {
        let mut c = Catalog::default();
        c.insert(CheckpointId(1), entry(None, None, true));
        c.insert(CheckpointId(2), entry(Some(1), Some(1), true));
        c.insert(CheckpointId(3), entry(Some(2), Some(2), true));
        c.verified(CheckpointId(3), &[key(0)]);
        c.insert(CheckpointId(4), entry(Some(3), Some(3), true));
        c.insert(CheckpointId(5), entry(None, Some(4), true));
        assert!(!c.restorable(&c.files(CheckpointId(3)).unwrap()));
        assert!(!c.restorable(&c.files(CheckpointId(4)).unwrap()));
        assert!(c.restorable(&c.files(CheckpointId(5)).unwrap()));
        // V = 5, whose subtask-1 chain reaches back to 1: all stay.
        assert_eq!(c.to_remove(1), Vec::<CheckpointId>::new());
        // 6 and 7 full: V = 7, the fallback 6; 1-5 go, the damaged 3 too.
        c.insert(CheckpointId(6), entry(None, None, true));
        c.insert(CheckpointId(7), entry(None, None, true));
        assert_eq!(c.to_remove(1), ids(&[1, 2, 3, 4, 5]));
    }

    /// Unverified checkpoints (just published) are kept as the newest, the
    /// newest verified one too.
    #[test]
    fn the_newest_verified_stays_while_newer_ones_are_read_back() {
        let mut c = Catalog::default();
        c.insert(CheckpointId(1), entry(None, None, true));
        c.insert(CheckpointId(2), entry(Some(1), Some(1), true));
        c.insert(CheckpointId(3), entry(Some(2), Some(2), false));
        c.insert(CheckpointId(4), entry(None, None, false));
        // Retained 1: 4 (newest), 2 (newest verified) and its chain; no
        // disjoint verified fallback older than 2; 3 goes.
        assert_eq!(c.to_remove(1), ids(&[3]));
    }

    /// Savepoints are never deleted; a checkpoint whose chain has an
    /// unknown link is not restorable.
    #[test]
    fn savepoints_stay_and_broken_chains_are_not_roots() {
        let mut c = Catalog::default();
        let mut sp = entry(None, None, true);
        sp.kind = SnapshotKind::Savepoint;
        c.insert(CheckpointId(1), sp);
        c.insert(CheckpointId(3), entry(Some(2), Some(2), true));
        c.insert(CheckpointId(4), entry(None, None, true));
        c.insert(CheckpointId(5), entry(None, None, true));
        assert_eq!(c.to_remove(1), ids(&[3]));
    }
}
