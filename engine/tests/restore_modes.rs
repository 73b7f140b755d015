//! Restore modes: `never`, `if-present` and `required`
//! (`CheckpointConfig::restore_mode`), and the deprecated `restore` flag.

use lockgate::state::KeyedFold;
use lockgate::{CheckpointConfig, JobBuilder, JobConfig, JobError, Managed, RestoreMode};
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path, mode: RestoreMode) -> JobConfig {
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(20), Some(dir.into()))
        .with_restore_mode(mode);
    config
}

/// Runs the count job on `config` over 100 records; the largest count.
fn run(name: &str, config: JobConfig) -> Result<Option<u64>, JobError> {
    let job = JobBuilder::new(name, config);
    let (input, ingest) = job.ingest::<u64>("input", 1024);
    let output = input
        .key_by(|x| x % 10)
        .task("count", 2)
        .process("count", |_| {
            // Counts records per key `x % 10`, emitting (key, count).
            Managed::new(KeyedFold::new(
                |x: &u64| x % 10,
                |c: &mut u64, x: u64| {
                    *c += 1;
                    (x % 10, *c)
                },
            ))
        })
        .collect();
    let handle = job.start()?;
    for x in 0..100u64 {
        ingest.push(x).expect("the job runs");
    }
    drop(ingest);
    handle.wait()?;
    Ok(output.try_iter().map(|(_, c)| c).max())
}

#[test]
fn if_present_starts_fresh_on_an_empty_folder_and_restores_after() {
    let dir = tempfile::tempdir().unwrap();
    let if_present = || config(dir.path(), RestoreMode::IfPresent);
    assert_eq!(run("counts", if_present()).unwrap(), Some(10), "fresh");
    assert_eq!(run("counts", if_present()).unwrap(), Some(20), "restored");
    // `never` refuses the folder now; `required` restores.
    let never = run("counts", config(dir.path(), RestoreMode::Never)).unwrap_err();
    assert!(matches!(never, JobError::FolderInUse(_)), "{never}");
    let required = run("counts", config(dir.path(), RestoreMode::Required)).unwrap();
    assert_eq!(required, Some(30));
    // A folder that does not exist yet is empty too.
    let fresh = dir.path().join("new");
    assert_eq!(
        run("counts", config(&fresh, RestoreMode::IfPresent)).unwrap(),
        Some(10)
    );
}

#[test]
fn if_present_fails_as_required_when_the_checkpoints_there_do_not_load() {
    let dir = tempfile::tempdir().unwrap();
    // Only a checkpoint set aside earlier: no fresh start over it.
    std::fs::create_dir(dir.path().join("corrupt-chk-7")).unwrap();
    let err = run("counts", config(dir.path(), RestoreMode::IfPresent))
        .unwrap_err()
        .to_string();
    assert!(err.contains("corrupt-chk-7"), "{err}");
    assert!(err.contains("no complete checkpoint"), "{err}");
    // A checkpoint folder of another layout (a `_metadata` inside).
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir(other.path().join("savepoint-1")).unwrap();
    std::fs::write(other.path().join("savepoint-1/_metadata"), b"?").unwrap();
    let err = run("counts", config(other.path(), RestoreMode::IfPresent))
        .unwrap_err()
        .to_string();
    assert!(err.contains("savepoint-1"), "{err}");
    // Checkpoints of another job: refused, naming it.
    let theirs = tempfile::tempdir().unwrap();
    run("theirs", config(theirs.path(), RestoreMode::Never)).unwrap();
    let err = run("counts", config(theirs.path(), RestoreMode::IfPresent))
        .unwrap_err()
        .to_string();
    assert!(err.contains("'theirs'"), "{err}");
    // `required` on an empty folder fails too.
    let empty = tempfile::tempdir().unwrap();
    let err = run("counts", config(empty.path(), RestoreMode::Required)).unwrap_err();
    assert!(matches!(err, JobError::Restore(_)), "{err}");
}

#[test]
#[allow(deprecated)]
fn the_deprecated_restore_flag_still_restores() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        run("counts", config(dir.path(), RestoreMode::Never)).unwrap(),
        Some(10)
    );
    let mut old = config(dir.path(), RestoreMode::Never);
    old.checkpoint.restore = true;
    assert_eq!(
        old.checkpoint.effective_restore_mode(),
        RestoreMode::Required
    );
    assert_eq!(run("counts", old).unwrap(), Some(20));
}

#[test]
fn a_mode_that_restores_needs_a_folder_or_storage() {
    let mut c = JobConfig::default();
    c.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(20), None)
        .with_restore_mode(RestoreMode::IfPresent);
    let err = run("counts", c).unwrap_err();
    assert!(matches!(err, JobError::Config(_)), "{err}");
}
