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

/// `lockgate loadgen ARGS`, run to its end.
#[allow(dead_code)]
pub(crate) fn loadgen(args: &[&str]) -> std::process::Output {
    bin()
        .arg("loadgen")
        .args(args)
        .output()
        .expect("the binary runs")
}

/// A JSON file, parsed.
#[allow(dead_code)]
pub(crate) fn read_json(p: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The ids of the checkpoints `chk-<n>` in `dir` (files, or folders of
/// earlier builds), oldest first; none when `dir` does not exist.
#[allow(dead_code)]
pub(crate) fn checkpoint_ids(dir: &std::path::Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// Waits (at most `secs`) until `dir` holds `n` checkpoints, failing if
/// `child` ends first.
#[allow(dead_code)]
pub(crate) fn wait_for_checkpoints(
    dir: &std::path::Path,
    child: &mut std::process::Child,
    n: usize,
    secs: u64,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while checkpoint_ids(dir).len() < n {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended ({status}) before {n} checkpoints");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not {n} checkpoints after {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Starts `loadgen` with `run_args` and `--checkpoint-dir chk`, and kills
/// it (SIGKILL) once `n` checkpoints are there.
#[allow(dead_code)]
pub(crate) fn kill_after_checkpoints(run_args: &[&str], chk: &std::path::Path, n: usize) {
    let mut child = bin()
        .arg("loadgen")
        .args(run_args)
        .arg("--checkpoint-dir")
        .arg(chk)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_checkpoints(chk, &mut child, n, 60);
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
}
