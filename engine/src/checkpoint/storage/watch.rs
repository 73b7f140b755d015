//! Which checkpoint files of a [`LocalDirStorage`](super::LocalDirStorage)
//! changed since a `stat` last found them intact, as the kernel tells
//! (inotify on the store's root, Linux, local file systems).
//!
//! Before each delta a subtask checks every file of the chain it builds
//! on ([`CheckpointStorage::check_parts`](super::CheckpointStorage::check_parts)):
//! with 1,000,000 keys that was ~600 `stat`s a checkpoint (three rolling
//! chains of ~200 parts). With the watch, a file is `stat`ed once, and
//! again only after an event names it; a check reads the events first
//! (one `read` that usually finds none). The kernel queues an event in
//! the system call that made the change, so a check sees every change
//! made before it, as a `stat` would: a file deleted, renamed, replaced,
//! cut or grown. Each check also `stat`s the root, so that a path that
//! now leads to another folder (a symbolic link repointed, a folder
//! renamed or mounted over) stops the watch. Elsewhere (another system,
//! a network file system, whose other hosts' changes inotify does not
//! report, no inotify instance left) every check is a `stat`, as before.

use super::api::{PartHandle, Result};
use crate::types::element::CheckpointId;
#[cfg(target_os = "linux")]
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// The watch on a store's root, started at the first check.
#[derive(Debug)]
pub(super) struct Watch {
    state: Mutex<State>,
    /// The checkpoint a file name is of, if any.
    parse: fn(&str) -> Option<CheckpointId>,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Untried,
    /// No watch: every check `stat`s.
    Off,
    #[cfg(target_os = "linux")]
    On {
        fd: std::os::fd::OwnedFd,
        /// The watched folder (device, inode): the root's path must
        /// still lead to it.
        folder: (u64, u64),
        /// Checkpoints whose file a `stat` found intact, with no event
        /// naming it since.
        intact: HashSet<CheckpointId>,
    },
}

impl Watch {
    /// A watch not started yet; `parse` reads a checkpoint's file name.
    pub(super) fn new(parse: fn(&str) -> Option<CheckpointId>) -> Self {
        Watch {
            state: Mutex::default(),
            parse,
        }
    }

    /// Checks `parts`, in the folder `root`, with `stat`, except those
    /// whose checkpoint file was found intact before with no change
    /// since. `stat` returns whether what it checked is a file the watch
    /// sees (a one-file checkpoint; a folder's files are not).
    pub(super) fn check(
        &self,
        root: &Path,
        parts: &[PartHandle],
        stat: impl FnMut(&PartHandle) -> Result<bool>,
    ) -> Result<()> {
        self.check_each(root, parts, |p| p.checkpoint, stat)
    }

    fn check_each<T>(
        &self,
        root: &Path,
        items: &[T],
        id: impl Fn(&T) -> CheckpointId,
        mut stat: impl FnMut(&T) -> Result<bool>,
    ) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.refresh(root, self.parse);
        for item in items {
            if state.is_intact(id(item)) {
                continue;
            }
            if stat(item)? {
                state.found_intact(id(item));
            }
        }
        Ok(())
    }

    /// Whether the kernel's events are used (for tests).
    #[cfg(test)]
    pub(super) fn is_on(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_on()
    }
}

impl State {
    #[cfg(test)]
    fn is_on(&self) -> bool {
        match self {
            #[cfg(target_os = "linux")]
            State::On { .. } => true,
            _ => false,
        }
    }

    fn is_intact(&self, id: CheckpointId) -> bool {
        match self {
            #[cfg(target_os = "linux")]
            State::On { intact, .. } => intact.contains(&id),
            _ => false,
        }
    }

    fn found_intact(&mut self, id: CheckpointId) {
        #[cfg(target_os = "linux")]
        if let State::On { intact, .. } = self {
            intact.insert(id);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = id;
    }

    /// Starts the watch the first time; then forgets every file an
    /// event named since the last call (all of them when events were
    /// lost, and stops when the root itself went).
    fn refresh(&mut self, root: &Path, parse: fn(&str) -> Option<CheckpointId>) {
        #[cfg(target_os = "linux")]
        {
            if let State::Untried = self {
                *self = linux::start(root).map_or(State::Off, |(fd, folder)| State::On {
                    fd,
                    folder,
                    intact: HashSet::new(),
                });
            }
            if let State::On { fd, folder, intact } = self {
                // The path may lead elsewhere now (a symbolic link
                // repointed, a folder renamed or mounted over), which no
                // event of the watched folder tells: one `stat` of the
                // root a check.
                if linux::folder_of(root) != Some(*folder) || !linux::drain(fd, intact, parse) {
                    *self = State::Off;
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (root, parse);
            *self = State::Off;
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
    use rustix::io::Errno;
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;

    /// File systems whose changes all pass through this kernel (their
    /// `statfs` magic numbers, linux/magic.h): ext2-4, XFS, Btrfs, tmpfs,
    /// F2FS, overlayfs (changes made through it).
    const LOCAL: [i64; 6] = [
        0xEF53,
        0x5846_5342,
        0x9123_683E,
        0x0102_1994,
        0xF2F5_2010,
        0x794C_7630,
    ];

    /// The device and inode of the folder `root` leads to.
    pub(super) fn folder_of(root: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(root).ok().map(|m| (m.dev(), m.ino()))
    }

    /// A non-blocking inotify instance watching `root` for every change
    /// to its entries, and the folder it watches; `None` where that
    /// cannot be had.
    pub(super) fn start(root: &Path) -> Option<(OwnedFd, (u64, u64))> {
        let folder = folder_of(root)?;
        let fs = rustix::fs::statfs(root).ok()?;
        #[allow(clippy::unnecessary_cast)] // i64 on x86-64, not everywhere
        let kind = fs.f_type as i64;
        if !LOCAL.contains(&kind) {
            return None;
        }
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
        let flags = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MODIFY
            | WatchFlags::ATTRIB
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        inotify::add_watch(&fd, root, flags).ok()?;
        Some((fd, folder))
    }

    /// Reads the queued events: a `chk-<n>` named is no longer known
    /// intact; lost events forget them all. Returns false when the watch
    /// is over (the root deleted, moved or unmounted, a read failed).
    pub(super) fn drain(
        fd: &OwnedFd,
        intact: &mut HashSet<CheckpointId>,
        parse: fn(&str) -> Option<CheckpointId>,
    ) -> bool {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(fd, &mut buf);
        loop {
            let event = match events.next() {
                Ok(e) => e,
                Err(Errno::AGAIN) => return true,
                Err(Errno::INTR) => continue,
                Err(_) => {
                    intact.clear();
                    return false;
                }
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                intact.clear();
            } else if flags.intersects(
                ReadFlags::IGNORED
                    | ReadFlags::DELETE_SELF
                    | ReadFlags::MOVE_SELF
                    | ReadFlags::UNMOUNT,
            ) {
                intact.clear();
                return false;
            } else if let Some(id) = event
                .file_name()
                .and_then(|n| n.to_str().ok())
                .and_then(parse)
            {
                intact.remove(&id);
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write as _;

    fn parse(name: &str) -> Option<CheckpointId> {
        name.strip_prefix("chk-")?.parse().ok().map(CheckpointId)
    }

    /// Checks checkpoint `id`'s file in `root` through `watch`; returns
    /// whether it was `stat`ed, and what the `stat` found.
    fn check(watch: &Watch, root: &Path, id: u64) -> (bool, Result<()>) {
        let mut statted = false;
        let r = watch.check_each(
            root,
            &[CheckpointId(id)],
            |c| *c,
            |c| {
                statted = true;
                fs::metadata(root.join(format!("chk-{}", c.get())))
                    .map(|_| true)
                    .map_err(|e| super::super::api::StorageError::io("looking at", root, e))
            },
        );
        (statted, r)
    }

    /// A file found intact is not `stat`ed again until something changes
    /// it (written, cut, deleted, replaced by a rename), and then it is:
    /// the change is seen by the next check, as a `stat` would see it.
    #[test]
    fn a_file_is_statted_again_only_after_a_change_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let watch = Watch::new(parse);
        fs::write(root.join("chk-1"), b"one").unwrap();
        fs::write(root.join("chk-2"), b"two").unwrap();
        assert!(check(&watch, root, 1).0, "the first check stats");
        if !watch.is_on() {
            // A file system the watch does not trust: every check stats.
            assert!(check(&watch, root, 1).0);
            return;
        }
        assert!(!check(&watch, root, 1).0, "nothing changed");
        // Another file's changes leave chk-1 known intact.
        fs::write(root.join("chk-2"), b"changed").unwrap();
        fs::write(root.join(".tmp-chk-3"), b"x").unwrap();
        assert!(!check(&watch, root, 1).0);
        // Written to.
        fs::OpenOptions::new()
            .append(true)
            .open(root.join("chk-1"))
            .unwrap()
            .write_all(b"!")
            .unwrap();
        assert!(check(&watch, root, 1).0);
        assert!(!check(&watch, root, 1).0);
        // Cut.
        fs::OpenOptions::new()
            .write(true)
            .open(root.join("chk-1"))
            .unwrap()
            .set_len(1)
            .unwrap();
        assert!(check(&watch, root, 1).0);
        // Replaced by a rename.
        fs::rename(root.join(".tmp-chk-3"), root.join("chk-1")).unwrap();
        assert!(check(&watch, root, 1).0);
        assert!(!check(&watch, root, 1).0);
        // Deleted: the stat runs and fails, and keeps failing.
        fs::remove_file(root.join("chk-1")).unwrap();
        let (statted, r) = check(&watch, root, 1);
        assert!(statted && r.is_err());
        let (statted, r) = check(&watch, root, 1);
        assert!(statted && r.is_err());
        // Renamed away, as retention keeps a retired file.
        assert!(check(&watch, root, 2).0);
        fs::rename(root.join("chk-2"), root.join(".tmp-spare-2")).unwrap();
        let (statted, r) = check(&watch, root, 2);
        assert!(statted && r.is_err());
    }

    /// When the root's path leads to another folder (a symbolic link
    /// repointed), the watch stops: the new folder's files are `stat`ed.
    #[test]
    fn the_watch_stops_when_its_path_leads_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["a", "b"] {
            fs::create_dir(dir.path().join(d)).unwrap();
            fs::write(dir.path().join(d).join("chk-1"), b"one").unwrap();
        }
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("a"), &link).unwrap();
        let watch = Watch::new(parse);
        assert!(check(&watch, &link, 1).1.is_ok());
        if !watch.is_on() {
            return;
        }
        assert!(!check(&watch, &link, 1).0);
        // Repointed (atomically, by a rename over the link) at a folder
        // whose chk-1 is gone.
        fs::remove_file(dir.path().join("b").join("chk-1")).unwrap();
        let tmp = dir.path().join("link2");
        std::os::unix::fs::symlink(dir.path().join("b"), &tmp).unwrap();
        fs::rename(&tmp, &link).unwrap();
        let (statted, r) = check(&watch, &link, 1);
        assert!(statted && r.is_err(), "the gone file is seen");
        assert!(!watch.is_on());
    }

    /// When the watched folder itself is moved, the watch stops and
    /// every check `stat`s again.
    #[test]
    fn the_watch_stops_when_its_folder_goes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a");
        fs::create_dir(&root).unwrap();
        fs::write(root.join("chk-1"), b"one").unwrap();
        let watch = Watch::new(parse);
        assert!(check(&watch, &root, 1).1.is_ok());
        if !watch.is_on() {
            return;
        }
        assert!(!check(&watch, &root, 1).0);
        fs::rename(&root, dir.path().join("b")).unwrap();
        fs::create_dir(&root).unwrap();
        fs::write(root.join("chk-1"), b"other").unwrap();
        assert!(check(&watch, &root, 1).0);
        assert!(!watch.is_on());
    }
}
