//! What the CLI test files share: the binary, and one heavy run at a time.

use std::process::Command;
use std::sync::Mutex;

/// Runs that move records take the machine's 2 cores: one at a time
/// (within one test binary; cargo runs the binaries one after another).
static HEAVY: Mutex<()> = Mutex::new(());

/// Holds the machine for one heavy run.
pub(crate) fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `lockgate` binary, with `RUST_LOG` cleared.
pub(crate) fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockgate"));
    c.env_remove("RUST_LOG");
    c
}

/// Flips the last byte of the part of `task`'s `subtask` in checkpoint `id`
/// of the folder `chk` (a one-file checkpoint, or a folder of an earlier
/// build): that checkpoint no longer loads.
#[allow(dead_code)] // not every test file damages checkpoints
pub(crate) fn flip_last_byte_of_part(chk: &std::path::Path, id: u64, task: &str, subtask: u32) {
    let storage = lockgate::storage::LocalDirStorage::open(chk).unwrap();
    let (file, range) = storage
        .part_location(
            lockgate::CheckpointId(id),
            &lockgate::storage::TaskStateKey::new(task, subtask),
        )
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[(range.end - 1) as usize] ^= 0x5a;
    std::fs::write(&file, bytes).unwrap();
}
