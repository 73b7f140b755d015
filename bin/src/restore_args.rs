//! `--restore-mode`, shared by `lockgate loadgen`, `flights` and `kafka
//! run`: `never | if-present | required` ([`lockgate::RestoreMode`]) with
//! `--checkpoint-dir DIR`, turned into the `--restore DIR` each command
//! already has (which stays `required`).

use lockgate::{storage::CheckpointStorage, storage::LocalDirStorage, RestoreMode};
use std::path::{Path, PathBuf};

/// The folder to restore from that `--restore-mode` asks for, given
/// `--restore` (`restore_given`) and `--checkpoint-dir`: `Ok(Some(dir))`
/// to restore from `dir` as `--restore dir` would, `Ok(None)` to go on as
/// the other flags say. `if-present` restores when the folder holds any
/// checkpoint in any form (published, set aside as `corrupt-chk-*`, any
/// layout: [`CheckpointStorage::traces`]), so that checkpoints there that
/// do not load, or of another job, fail as `required` does; it starts
/// fresh only on a folder with none (or no folder yet).
///
/// # Errors
/// A mode that contradicts `--restore` or needs `--checkpoint-dir`, and a
/// folder that cannot be listed.
pub(crate) fn resolve(
    mode: Option<RestoreMode>,
    restore_given: bool,
    checkpoint_dir: Option<&Path>,
) -> Result<Option<PathBuf>, String> {
    let Some(mode) = mode else {
        return Ok(None);
    };
    match (mode, restore_given) {
        (RestoreMode::Required, true) => return Ok(None),
        (_, true) => {
            return Err(format!(
                "--restore DIR restores as --restore-mode required, not {mode}; with --restore-mode {mode} give --checkpoint-dir DIR instead"
            ))
        }
        (RestoreMode::Never, false) => return Ok(None),
        _ => {}
    }
    let Some(dir) = checkpoint_dir else {
        return Err(format!(
            "--restore-mode {mode} needs --checkpoint-dir DIR (the folder to restore from and write to)"
        ));
    };
    if mode == RestoreMode::Required || !dir.exists() {
        return Ok((mode == RestoreMode::Required).then(|| dir.to_path_buf()));
    }
    let traces = LocalDirStorage::open(dir)
        .and_then(|s| s.traces())
        .map_err(|e| format!("--checkpoint-dir {}: {e}", dir.display()))?;
    Ok((!traces.is_empty()).then(|| dir.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_turn_into_a_restore_or_none() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let some = Some(dir);
        assert_eq!(resolve(None, false, some), Ok(None));
        assert_eq!(resolve(Some(RestoreMode::Never), false, some), Ok(None));
        assert_eq!(resolve(Some(RestoreMode::Required), true, None), Ok(None));
        assert_eq!(
            resolve(Some(RestoreMode::Required), false, some),
            Ok(Some(dir.to_path_buf()))
        );
        // An empty folder, or none yet: fresh.
        assert_eq!(resolve(Some(RestoreMode::IfPresent), false, some), Ok(None));
        let missing = dir.join("not-yet");
        assert_eq!(
            resolve(Some(RestoreMode::IfPresent), false, Some(&missing)),
            Ok(None)
        );
        // A checkpoint set aside counts: the restore then fails, naming it.
        std::fs::create_dir(dir.join("corrupt-chk-3")).unwrap();
        assert_eq!(
            resolve(Some(RestoreMode::IfPresent), false, some),
            Ok(Some(dir.to_path_buf()))
        );
        for (mode, restore, d) in [
            (RestoreMode::IfPresent, true, some),
            (RestoreMode::Never, true, some),
            (RestoreMode::IfPresent, false, None),
            (RestoreMode::Required, false, None),
        ] {
            assert!(resolve(Some(mode), restore, d).is_err(), "{mode} {restore}");
        }
    }
}
