//! Tests of durable checkpoint storage (`lockgate::storage`):
//! round trip, atomic publish, corruption detection and fallback, retention.

use lockgate::{
    storage::CheckpointMetadata, storage::CheckpointStorage, storage::JobFingerprint,
    storage::LocalDirStorage, storage::MemoryStorage, storage::StorageError, storage::TaskStateKey,
    storage::FORMAT_VERSION,
};
use lockgate::{CheckpointId, SnapshotKind};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn job() -> JobFingerprint {
    JobFingerprint {
        job_name: "wordcount".into(),
        config: serde_json::json!({"rate": 0.1, "window_ms": 1000, "name": "x"}),
        parallelism: BTreeMap::from([("source".to_string(), 2), ("keyed_sum".to_string(), 3)]),
        max_parallelism: 128,
    }
}

/// Metadata with a fixed completion time (not the clock's), so that two
/// calls give equal values.
fn meta(id: u64, kind: SnapshotKind) -> CheckpointMetadata {
    CheckpointMetadata {
        completed_at_unix_ms: 1_700_000_000_000 + id,
        ..CheckpointMetadata::new(CheckpointId(id), kind, 1_000 * id, job())
    }
}

/// Three subtask states whose bytes depend on `id`, so checkpoints differ.
fn states(id: u64) -> Vec<(TaskStateKey, Vec<u8>)> {
    (0..3u32)
        .map(|s| {
            let bytes = (0..100 + s as u64 * 50)
                .map(|i| (i * 7 + id * 13 + s as u64) as u8)
                .collect();
            (TaskStateKey::new("keyed_sum", s), bytes)
        })
        .collect()
}

fn write(store: &dyn CheckpointStorage, id: u64, kind: SnapshotKind) {
    store
        .write_checkpoint(&meta(id, kind), &states(id))
        .unwrap();
}

fn open() -> (tempfile::TempDir, LocalDirStorage) {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirStorage::open(dir.path().join("checkpoints")).unwrap();
    (dir, store)
}

fn ids(v: &[u64]) -> Vec<CheckpointId> {
    v.iter().copied().map(CheckpointId).collect()
}

/// Applies `f` to the bytes of the file at `path`.
fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(path).unwrap();
    f(&mut bytes);
    fs::write(path, bytes).unwrap();
}

/// The state file of `subtask` in checkpoint `id`, once [`to_folder`] has
/// made it a folder.
fn state_path(store: &LocalDirStorage, id: u64, subtask: u32) -> PathBuf {
    store
        .checkpoint_path(CheckpointId(id))
        .join(format!("keyed_sum-{subtask}.state"))
}

/// A one-file checkpoint's metadata (JSON) and parts region.
fn split_single(path: &Path) -> (serde_json::Value, Vec<u8>) {
    let b = fs::read(path).unwrap();
    assert_eq!(&b[0..4], b"LGCK");
    assert_eq!(u16::from_le_bytes([b[4], b[5]]), 2, "a one-file checkpoint");
    let m = u64::from_le_bytes(b[6..14].try_into().unwrap()) as usize;
    (
        serde_json::from_slice(&b[18..18 + m]).unwrap(),
        b[18 + m..].to_vec(),
    )
}

/// Writes a one-file checkpoint with a correct header (length, CRC32C) for
/// `metadata`.
fn join_single(path: &Path, metadata: &serde_json::Value, parts: &[u8]) {
    let json = serde_json::to_vec(metadata).unwrap();
    let mut b = b"LGCK".to_vec();
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&(json.len() as u64).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    b.extend_from_slice(&json);
    b.extend_from_slice(parts);
    fs::write(path, b).unwrap();
}

/// Rewrites the one-file checkpoint `id` as the folder a build before
/// one-file checkpoints wrote (`_metadata` and a framed file per part), so
/// that the old format's checks stay tested.
fn to_folder(store: &LocalDirStorage, id: u64) {
    let path = store.checkpoint_path(CheckpointId(id));
    let (mut json, parts) = split_single(&path);
    fs::remove_file(&path).unwrap();
    fs::create_dir(&path).unwrap();
    for entry in json["states"].as_array_mut().unwrap() {
        let offset = entry["offset"].as_u64().unwrap() as usize;
        let size = entry["size"].as_u64().unwrap() as usize;
        let file = entry["file"].as_str().unwrap().to_string();
        write_framed(
            &path.join(file),
            FORMAT_VERSION,
            &parts[offset..offset + size],
        );
        entry.as_object_mut().unwrap().remove("offset");
    }
    write_framed(
        &path.join("_metadata"),
        FORMAT_VERSION,
        &serde_json::to_vec(&json).unwrap(),
    );
}

/// Writes checkpoint `id` and makes it a folder of an earlier build.
fn write_folder(store: &LocalDirStorage, id: u64) {
    write(store, id, SnapshotKind::Checkpoint);
    to_folder(store, id);
}

#[test]
fn round_trip_returns_what_was_written() {
    let (_d, store) = open();
    let m = meta(3, SnapshotKind::Checkpoint);
    let s = states(3);
    let handle = store.write_checkpoint(&m, &s).unwrap();
    assert_eq!(handle.id, CheckpointId(3));
    assert_eq!(handle.path, store.root().join("chk-3"));
    assert!(handle.path.is_file(), "one file per checkpoint");
    assert_eq!(
        handle.total_bytes,
        fs::metadata(&handle.path).unwrap().len()
    );

    let loaded = store.load(CheckpointId(3)).unwrap();
    assert_eq!(loaded.metadata, m);
    assert_eq!(loaded.handle, handle);
    assert_eq!(loaded.states.len(), 3);
    for (key, bytes) in &s {
        assert_eq!(loaded.state(&key.task, key.subtask), Some(bytes.as_slice()));
    }
    assert_eq!(loaded.state("keyed_sum", 9), None);
    assert_eq!(store.load_metadata(CheckpointId(3)).unwrap(), m);
}

#[test]
fn a_folder_of_an_earlier_build_loads_and_serves_as_a_base() {
    let (_d, store) = open();
    write_folder(&store, 2);
    assert!(store.checkpoint_path(CheckpointId(2)).is_dir());
    write(&store, 3, SnapshotKind::Checkpoint);
    assert_eq!(store.list().unwrap(), ids(&[2, 3]));
    let loaded = store.load(CheckpointId(2)).unwrap();
    assert_eq!(loaded.states, states(2).into_iter().collect());
    assert_eq!(loaded.metadata, meta(2, SnapshotKind::Checkpoint));
    let latest = store.load_latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().metadata.id, CheckpointId(3));
    // Retention deletes a folder as it deletes a file.
    assert_eq!(store.retain(1).unwrap(), ids(&[2]));
    assert!(!store.checkpoint_path(CheckpointId(2)).exists());
}

#[test]
fn empty_state_and_no_states_round_trip() {
    let (_d, store) = open();
    let s = vec![(TaskStateKey::new("sink", 0), Vec::new())];
    store
        .write_checkpoint(&meta(1, SnapshotKind::Checkpoint), &s)
        .unwrap();
    store
        .write_checkpoint(&meta(2, SnapshotKind::Savepoint), &[])
        .unwrap();
    assert_eq!(
        store.load(CheckpointId(1)).unwrap().state("sink", 0),
        Some(&[][..])
    );
    let two = store.load(CheckpointId(2)).unwrap();
    assert!(two.states.is_empty());
    assert_eq!(two.metadata.kind, SnapshotKind::Savepoint);
}

#[test]
fn invalid_input_is_rejected_before_anything_is_written() {
    let (_d, store) = open();
    let mut s = states(1);
    s.push(s[0].clone());
    let err = store
        .write_checkpoint(&meta(1, SnapshotKind::Checkpoint), &s)
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("given twice"), "{err}");
    let err = store
        .write_checkpoint(&meta(0, SnapshotKind::Checkpoint), &states(0))
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput { .. }), "{err}");
    assert_eq!(fs::read_dir(store.root()).unwrap().count(), 0);
}

#[test]
fn writing_an_existing_id_fails_and_leaves_no_temporary() {
    let (_d, store) = open();
    write(&store, 4, SnapshotKind::Checkpoint);
    let err = store
        .write_checkpoint(&meta(4, SnapshotKind::Checkpoint), &states(99))
        .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists { .. }), "{err}");
    // The first checkpoint is untouched, and the failed write left nothing.
    assert_eq!(
        store.load(CheckpointId(4)).unwrap().states,
        states(4).into_iter().collect()
    );
    let names: Vec<String> = fs::read_dir(store.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["chk-4".to_string()]);
}

#[test]
fn abandoned_write_is_invisible_and_cleaned() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    write(&store, 2, SnapshotKind::Checkpoint);
    // A crash before the rename leaves the complete (or partial) folder under
    // its temporary name: simulate it by moving chk-2 back to one, and add a
    // partial one with a single file.
    let tmp = store.root().join(".tmp-chk-2-4242-0");
    fs::rename(store.checkpoint_path(CheckpointId(2)), &tmp).unwrap();
    let partial = store.root().join(".tmp-chk-3-4242-1");
    fs::create_dir(&partial).unwrap();
    fs::write(partial.join("keyed_sum-0.state"), b"LGCK").unwrap();

    assert_eq!(store.list().unwrap(), ids(&[1]));
    let latest = store.load_latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().metadata.id, CheckpointId(1));
    assert!(latest.corrupt.is_empty());

    assert_eq!(store.clean_temporaries().unwrap(), 2);
    assert!(!tmp.exists() && !partial.exists());
    assert_eq!(store.list().unwrap(), ids(&[1]));
}

#[test]
fn is_empty_ignores_temporaries() {
    let (_d, store) = open();
    assert!(store.is_empty().unwrap());
    fs::create_dir(store.root().join(".tmp-chk-1-1-0")).unwrap();
    fs::write(store.root().join("notes.txt"), b"hello").unwrap();
    assert!(store.is_empty().unwrap());
    write(&store, 1, SnapshotKind::Checkpoint);
    assert!(!store.is_empty().unwrap());
    store.remove(CheckpointId(1)).unwrap();
    assert!(store.is_empty().unwrap());
}

#[test]
fn open_reopens_existing_store_and_rejects_a_file() {
    let (d, store) = open();
    write(&store, 5, SnapshotKind::Checkpoint);
    let again = LocalDirStorage::open(store.root()).unwrap();
    assert_eq!(again.list().unwrap(), ids(&[5]));
    let file = d.path().join("plain-file");
    fs::write(&file, b"x").unwrap();
    let err = LocalDirStorage::open(&file).unwrap_err();
    assert!(err.to_string().contains("plain-file"), "{err}");
}

#[test]
fn ids_are_listed_in_numeric_order() {
    let (_d, store) = open();
    for id in [10, 9, 2, 100, 1] {
        write(&store, id, SnapshotKind::Checkpoint);
    }
    // Names that are not canonical checkpoint names are ignored.
    fs::create_dir(store.root().join("chk-007")).unwrap();
    fs::create_dir(store.root().join("chk-abc")).unwrap();
    fs::write(store.root().join("chk-11.bak"), b"not a checkpoint").unwrap();
    assert_eq!(store.list().unwrap(), ids(&[1, 2, 9, 10, 100]));
    let latest = store.load_latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().metadata.id, CheckpointId(100));
    // A canonical name is a checkpoint, damaged if it does not load.
    fs::write(store.root().join("chk-101"), b"garbage").unwrap();
    assert_eq!(store.list().unwrap(), ids(&[1, 2, 9, 10, 100, 101]));
    let latest = store.load_latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().metadata.id, CheckpointId(100));
    assert_eq!(latest.corrupt[0].0, CheckpointId(101));
}

#[test]
fn flipped_byte_in_a_part_is_found_named_and_recovery_falls_back() {
    let (_d, store) = open();
    write(&store, 4, SnapshotKind::Checkpoint);
    write(&store, 5, SnapshotKind::Checkpoint);
    let path = store.checkpoint_path(CheckpointId(5));
    // The last byte of the file is the last byte of the last part.
    edit(&path, |b| {
        let last = b.len() - 1;
        b[last] ^= 0x01;
    });
    let err = store.load(CheckpointId(5)).unwrap_err();
    assert!(
        matches!(err, StorageError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chk-5#keyed_sum-2.state"), "{err}");
    let latest = store.load_latest_valid().unwrap();
    assert_eq!(latest.checkpoint.unwrap().metadata.id, CheckpointId(4));
    assert_eq!(latest.corrupt.len(), 1);
    assert_eq!(latest.corrupt[0].0, CheckpointId(5));
}

#[test]
fn flipped_byte_in_a_folder_is_a_checksum_error_and_recovery_falls_back() {
    let (_d, store) = open();
    write(&store, 4, SnapshotKind::Checkpoint);
    write_folder(&store, 5);
    let path = state_path(&store, 5, 1);
    edit(&path, |b| {
        let last = b.len() - 1;
        b[last] ^= 0x01;
    });
    let err = store.load(CheckpointId(5)).unwrap_err();
    assert!(
        matches!(err, StorageError::ChecksumMismatch { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("checksum mismatch"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");

    let latest = store.load_latest_valid().unwrap();
    let chk = latest.checkpoint.expect("chk-4 is valid");
    assert_eq!(chk.metadata.id, CheckpointId(4));
    assert_eq!(chk.states, states(4).into_iter().collect());
    assert_eq!(latest.corrupt.len(), 1);
    assert_eq!(latest.corrupt[0].0, CheckpointId(5));
    assert!(latest.corrupt[0]
        .1
        .to_string()
        .contains("keyed_sum-1.state"));
}

#[test]
fn flipped_byte_in_metadata_is_a_checksum_error() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    let path = store.checkpoint_path(CheckpointId(1));
    edit(&path, |b| b[30] ^= 0x20);
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(
        matches!(err, StorageError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chk-1"), "{err}");
    assert!(store.load_metadata(CheckpointId(1)).is_err());

    write_folder(&store, 2);
    let path = store.checkpoint_path(CheckpointId(2)).join("_metadata");
    edit(&path, |b| b[30] ^= 0x20);
    let err = store.load(CheckpointId(2)).unwrap_err();
    assert!(
        matches!(err, StorageError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("_metadata"), "{err}");
    assert!(store.load_metadata(CheckpointId(2)).is_err());
}

#[test]
fn truncated_and_extended_checkpoint_files_are_reported() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    let path = store.checkpoint_path(CheckpointId(1));
    let full = fs::read(&path).unwrap();
    for (bytes, cut) in [(&full[..full.len() - 10], true), (&full[..7], true)] {
        fs::write(&path, bytes).unwrap();
        let err = store.load(CheckpointId(1)).unwrap_err();
        assert!(matches!(err, StorageError::Truncated { .. }), "{cut} {err}");
        assert!(err.to_string().contains("chk-1"), "{err}");
    }
    let mut longer = full.clone();
    longer.push(0);
    fs::write(&path, &longer).unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::TrailingBytes { .. }), "{err}");
    fs::write(&path, &full).unwrap();
    store.load(CheckpointId(1)).unwrap();
}

#[test]
fn truncated_and_extended_files_of_a_folder_are_reported() {
    let (_d, store) = open();
    write_folder(&store, 1);
    let path = state_path(&store, 1, 2);
    let full = fs::read(&path).unwrap();
    fs::write(&path, &full[..full.len() - 10]).unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::Truncated { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.starts_with("truncated: "), "{msg}");
    assert!(msg.contains("keyed_sum-2.state"), "{msg}");
    assert!(
        msg.contains(&format!(
            "{} bytes, its header says {}",
            full.len() - 10,
            full.len()
        )),
        "{msg}"
    );

    // Cut inside the header.
    fs::write(&path, &full[..7]).unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::Truncated { .. }), "{err}");

    let mut longer = full.clone();
    longer.push(0);
    fs::write(&path, &longer).unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::TrailingBytes { .. }), "{err}");

    fs::write(&path, &full).unwrap();
    store.load(CheckpointId(1)).unwrap();
}

#[test]
fn missing_metadata_and_missing_state_file() {
    let (_d, store) = open();
    write_folder(&store, 1);
    write_folder(&store, 2);
    fs::remove_file(state_path(&store, 1, 0)).unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(
        matches!(err, StorageError::MissingStateFile { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("keyed_sum-0.state"), "{err}");

    fs::remove_file(store.checkpoint_path(CheckpointId(2)).join("_metadata")).unwrap();
    let err = store.load(CheckpointId(2)).unwrap_err();
    assert!(matches!(err, StorageError::MissingMetadata { .. }), "{err}");
    assert!(err.to_string().starts_with("missing metadata"), "{err}");

    let latest = store.load_latest_valid().unwrap();
    assert!(latest.checkpoint.is_none());
    assert_eq!(
        latest.corrupt.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        ids(&[2, 1])
    );

    let err = store.load(CheckpointId(77)).unwrap_err();
    assert!(matches!(err, StorageError::NotFound { .. }), "{err}");
}

/// Writes `payload` as a correctly framed file (valid magic, version, CRC).
fn write_framed(path: &Path, version: u16, payload: &[u8]) {
    let mut b = b"LGCK".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    b.extend_from_slice(payload);
    fs::write(path, b).unwrap();
}

#[test]
fn garbage_metadata_of_a_checkpoint_file_is_reported() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    let path = store.checkpoint_path(CheckpointId(1));
    let original = fs::read(&path).unwrap();
    let (json, parts) = split_single(&path);

    // Valid JSON of the wrong id (e.g. a file renamed by hand).
    let mut wrong = json.clone();
    wrong["checkpoint"]["id"] = 9.into();
    join_single(&path, &wrong, &parts);
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(err.to_string().contains("records checkpoint id 9"), "{err}");

    // A part whose offset and size run past the end of the file.
    let mut wrong = json.clone();
    wrong["states"][2]["offset"] = 1_000_000.into();
    join_single(&path, &wrong, &parts);
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::Truncated { .. }), "{err}");
    assert!(err.to_string().contains("keyed_sum-2.state"), "{err}");

    // A part without an offset.
    let mut wrong = json.clone();
    wrong["states"][0].as_object_mut().unwrap().remove("offset");
    join_single(&path, &wrong, &parts);
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(err.to_string().contains("has no offset"), "{err}");

    // Metadata that disagrees with an (intact) part.
    let mut wrong = json.clone();
    let crc = wrong["states"][0]["crc32c"].as_u64().unwrap();
    wrong["states"][0]["crc32c"] = (crc ^ 1).into();
    join_single(&path, &wrong, &parts);
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(
        matches!(err, StorageError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chk-1#keyed_sum-0.state"), "{err}");

    fs::write(&path, &original).unwrap();
    store.load(CheckpointId(1)).unwrap();
}

#[test]
fn garbage_metadata_is_reported() {
    let (_d, store) = open();
    write_folder(&store, 1);
    let path = store.checkpoint_path(CheckpointId(1)).join("_metadata");
    let original = fs::read(&path).unwrap();

    // Not framed at all.
    fs::write(&path, b"{\"hello\": 1}").unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::BadMagic { .. }), "{err}");

    // Framed and checksummed, but not JSON.
    write_framed(&path, FORMAT_VERSION, b"\x00\xffnot json");
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(matches!(err, StorageError::BadMetadata { .. }), "{err}");
    assert!(err.to_string().contains("_metadata"), "{err}");

    // Valid JSON of the wrong id (e.g. a folder renamed by hand).
    let mut json: serde_json::Value = serde_json::from_slice(&original[18..]).unwrap();
    json["checkpoint"]["id"] = 9.into();
    write_framed(&path, FORMAT_VERSION, &serde_json::to_vec(&json).unwrap());
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(err.to_string().contains("records checkpoint id 9"), "{err}");

    // A state file name that escapes the folder.
    let mut json: serde_json::Value = serde_json::from_slice(&original[18..]).unwrap();
    json["states"][0]["file"] = "../../etc/passwd".into();
    write_framed(&path, FORMAT_VERSION, &serde_json::to_vec(&json).unwrap());
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(err.to_string().contains("invalid state file name"), "{err}");

    // Metadata that disagrees with an (intact) state file.
    let mut json: serde_json::Value = serde_json::from_slice(&original[18..]).unwrap();
    let crc = json["states"][0]["crc32c"].as_u64().unwrap();
    json["states"][0]["crc32c"] = (crc ^ 1).into();
    write_framed(&path, FORMAT_VERSION, &serde_json::to_vec(&json).unwrap());
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(
        matches!(err, StorageError::StateMismatch { what: "crc32c", .. }),
        "{err}"
    );

    fs::write(&path, &original).unwrap();
    store.load(CheckpointId(1)).unwrap();
}

#[test]
fn wrong_version_is_reported() {
    let (_d, store) = open();
    write(&store, 3, SnapshotKind::Checkpoint);
    edit(&store.checkpoint_path(CheckpointId(3)), |b| {
        b[4..6].copy_from_slice(&7u16.to_le_bytes())
    });
    let err = store.load(CheckpointId(3)).unwrap_err();
    assert!(
        matches!(err, StorageError::UnsupportedVersion { found: 7, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chk-3"), "{err}");

    write_folder(&store, 1);
    let path = state_path(&store, 1, 0);
    edit(&path, |b| b[4..6].copy_from_slice(&7u16.to_le_bytes()));
    let err = store.load(CheckpointId(1)).unwrap_err();
    assert!(
        err.to_string().contains("unsupported format version 7"),
        "{err}"
    );
    assert!(err.to_string().contains("keyed_sum-0.state"), "{err}");

    // A version inside the metadata JSON is checked too.
    write_folder(&store, 2);
    let path = store.checkpoint_path(CheckpointId(2)).join("_metadata");
    let original = fs::read(&path).unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&original[18..]).unwrap();
    json["format_version"] = 7.into();
    write_framed(&path, FORMAT_VERSION, &serde_json::to_vec(&json).unwrap());
    let err = store.load(CheckpointId(2)).unwrap_err();
    assert!(
        matches!(err, StorageError::UnsupportedVersion { found: 7, .. }),
        "{err}"
    );
}

fn check_retention(store: &dyn CheckpointStorage) {
    for id in 1..=7 {
        let kind = if id == 2 || id == 5 {
            SnapshotKind::Savepoint
        } else {
            SnapshotKind::Checkpoint
        };
        write(store, id, kind);
    }
    // Checkpoints: 1 3 4 6 7; savepoints: 2 5.
    assert_eq!(store.retain(2).unwrap(), ids(&[1, 3, 4]));
    assert_eq!(store.list().unwrap(), ids(&[2, 5, 6, 7]));
    assert_eq!(store.retain(2).unwrap(), ids(&[]));
    assert_eq!(store.retain(0).unwrap(), ids(&[6, 7]));
    assert_eq!(store.list().unwrap(), ids(&[2, 5]));
    assert!(!store.is_empty().unwrap());
    assert!(matches!(
        store.remove(CheckpointId(6)),
        Err(StorageError::NotFound { .. })
    ));
    store.remove(CheckpointId(5)).unwrap();
    assert_eq!(store.list().unwrap(), ids(&[2]));
}

/// `remove_many` deletes every id named, and at an id that is not
/// there stops with `NotFound`: those before it are gone, those after
/// it stay.
fn check_remove_many(store: &dyn CheckpointStorage) {
    for id in 1..=6 {
        write(store, id, SnapshotKind::Checkpoint);
    }
    store.remove_many(&ids(&[1, 2, 4])).unwrap();
    assert_eq!(store.list().unwrap(), ids(&[3, 5, 6]));
    store.remove_many(&[]).unwrap();
    assert!(matches!(
        store.remove_many(&ids(&[3, 4, 5])),
        Err(StorageError::NotFound {
            id: CheckpointId(4),
            ..
        })
    ));
    assert_eq!(store.list().unwrap(), ids(&[5, 6]));
    // What is left still loads.
    assert_eq!(store.load(CheckpointId(5)).unwrap().states.len(), 3);
}

/// The temporaries in `store`'s folder: retired checkpoint files kept
/// for reuse, or an interrupted write's.
fn temporaries(root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".tmp-")
        })
        .collect();
    found.sort();
    found
}

/// Deleting leaves at most the two retired files kept for reuse, and
/// none once the store is dropped.
fn check_deletion_leaves_no_temporary(store: LocalDirStorage) {
    let root = store.root().to_path_buf();
    assert!(temporaries(&root).len() <= 2, "{:?}", temporaries(&root));
    drop(store);
    assert_eq!(temporaries(&root), Vec::<PathBuf>::new());
}

#[test]
fn remove_many_deletes_all_named_and_stops_at_a_missing_one() {
    let (_d, store) = open();
    check_remove_many(&store);
    check_deletion_leaves_no_temporary(store);
    check_remove_many(&MemoryStorage::new());
}

#[test]
fn retain_keeps_newest_checkpoints_and_all_savepoints() {
    let (_d, store) = open();
    check_retention(&store);
    check_deletion_leaves_no_temporary(store);
}

/// A retired checkpoint's file is written over by a later checkpoint
/// (the same inode), which loads exactly what was written whether the
/// old file was longer or shorter; a kept file deleted by someone else
/// is created again.
#[cfg(unix)]
#[test]
fn retired_files_are_written_over_by_later_checkpoints() {
    use std::os::unix::fs::MetadataExt;
    let (_d, store) = open();
    let big = |id: u64| -> Vec<(TaskStateKey, Vec<u8>)> {
        vec![(TaskStateKey::new("keyed_sum", 0), vec![id as u8; 100_000])]
    };
    let small = |id: u64| -> Vec<(TaskStateKey, Vec<u8>)> {
        vec![(TaskStateKey::new("keyed_sum", 0), vec![id as u8; 10])]
    };
    store
        .write_checkpoint(&meta(1, SnapshotKind::Checkpoint), &big(1))
        .unwrap();
    store
        .write_checkpoint(&meta(2, SnapshotKind::Checkpoint), &small(2))
        .unwrap();
    write(&store, 3, SnapshotKind::Checkpoint);
    let inode = |id: u64| {
        fs::metadata(store.checkpoint_path(CheckpointId(id)))
            .unwrap()
            .ino()
    };
    let retired = [inode(1), inode(2), inode(3)];
    store.remove_many(&ids(&[1, 2, 3])).unwrap();
    assert_eq!(store.list().unwrap(), ids(&[]));
    // Two kept (the newest retired last), the third deleted.
    let kept = temporaries(store.root());
    assert_eq!(kept.len(), 2, "{kept:?}");
    // chk-4 writes over the file last kept (chk-2's, 10 bytes of state):
    // longer. chk-5 over chk-1's (100,000 bytes): shorter, cut.
    store
        .write_checkpoint(&meta(4, SnapshotKind::Checkpoint), &states(4))
        .unwrap();
    store
        .write_checkpoint(&meta(5, SnapshotKind::Checkpoint), &small(5))
        .unwrap();
    assert_eq!(inode(4), retired[1]);
    assert_eq!(inode(5), retired[0]);
    assert_eq!(temporaries(store.root()), Vec::<PathBuf>::new());
    let loaded = store.load(CheckpointId(4)).unwrap();
    assert_eq!(loaded.states, states(4).into_iter().collect());
    let loaded = store.load(CheckpointId(5)).unwrap();
    assert_eq!(loaded.states, small(5).into_iter().collect());
    let len = |id: u64| {
        fs::metadata(store.checkpoint_path(CheckpointId(id)))
            .unwrap()
            .len()
    };
    // The length is rounded up to a page, with spaces in the metadata.
    assert_eq!(len(5), 4096, "chk-5 holds none of chk-1's 100,000 bytes");
    assert_eq!(len(4) % 4096, 0);
    // A checkpoint a little larger than the one it writes over keeps the
    // file's length (no size change for the file system to journal).
    let sized = |n: usize| vec![(TaskStateKey::new("keyed_sum", 0), vec![7u8; n])];
    store.remove_many(&ids(&[5])).unwrap();
    store
        .write_checkpoint(&meta(6, SnapshotKind::Checkpoint), &sized(300))
        .unwrap();
    assert_eq!((inode(6), len(6)), (retired[0], 4096));
    let loaded = store.load(CheckpointId(6)).unwrap();
    assert_eq!(loaded.states, sized(300).into_iter().collect());
    store.remove_many(&ids(&[6])).unwrap();
    write(&store, 5, SnapshotKind::Checkpoint);
    // A kept file that another name links to (a copy made with `ln` or
    // `cp -al`) is not written over: the copy keeps its checkpoint.
    store.remove_many(&ids(&[5])).unwrap();
    let kept = temporaries(store.root());
    assert_eq!(kept.len(), 1, "{kept:?}");
    let copy = store.root().parent().unwrap().join("copy-of-chk-5");
    fs::hard_link(&kept[0], &copy).unwrap();
    let before = fs::read(&copy).unwrap();
    write(&store, 7, SnapshotKind::Checkpoint);
    assert_ne!(inode(7), fs::metadata(&copy).unwrap().ino());
    assert_eq!(fs::read(&copy).unwrap(), before);
    // One replaced by a symbolic link: its target is left alone.
    store.remove_many(&ids(&[7])).unwrap();
    let kept = temporaries(store.root());
    assert_eq!(kept.len(), 1, "{kept:?}");
    fs::remove_file(&kept[0]).unwrap();
    std::os::unix::fs::symlink(&copy, &kept[0]).unwrap();
    write(&store, 8, SnapshotKind::Checkpoint);
    assert_eq!(fs::read(&copy).unwrap(), before);
    assert!(fs::symlink_metadata(store.checkpoint_path(CheckpointId(8)))
        .unwrap()
        .is_file());
    // A kept file deleted behind the store's back: the next checkpoint
    // creates it again.
    store.remove_many(&ids(&[4])).unwrap();
    for t in temporaries(store.root()) {
        fs::remove_file(t).unwrap();
    }
    write(&store, 6, SnapshotKind::Checkpoint);
    assert_eq!(
        store.load(CheckpointId(6)).unwrap().states,
        states(6).into_iter().collect()
    );
}

/// A one-file checkpoint as builds before the 4 KiB padding wrote it (its
/// metadata written again without the padding, with its length and
/// CRC32C) loads and is retired.
#[test]
fn a_one_file_checkpoint_without_padding_loads() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    let path = store.checkpoint_path(CheckpointId(1));
    let padded = fs::metadata(&path).unwrap().len();
    assert_eq!(padded % 4096, 0);
    let (metadata, parts) = split_single(&path);
    fs::remove_file(&path).unwrap();
    join_single(&path, &metadata, &parts);
    assert!(
        fs::metadata(&path).unwrap().len() < padded,
        "the file was padded"
    );
    let store = LocalDirStorage::open(store.root()).unwrap();
    assert_eq!(
        store.load(CheckpointId(1)).unwrap().states,
        states(1).into_iter().collect()
    );
    store.remove_many(&ids(&[1])).unwrap();
    assert_eq!(store.list().unwrap(), ids(&[]));
}

/// Loads `id` on another thread: a read that blocks (a FIFO) fails the
/// test instead of hanging it.
fn load_error_within(store: &LocalDirStorage, id: u64) -> String {
    let store = store.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(store.load(CheckpointId(id)).map(|_| ()));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(r) => r.expect_err("it loaded").to_string(),
        Err(_) => panic!("loading chk-{id} did not return in 60 s"),
    }
}

#[test]
fn a_fifo_or_device_in_place_of_a_checkpoint_file_is_refused_not_waited_on() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    let fifo = store.checkpoint_path(CheckpointId(2));
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let err = load_error_within(&store, 2);
    assert!(
        err.contains("not a regular file") && err.contains("chk-2"),
        "{err}"
    );
    std::os::unix::fs::symlink("/dev/zero", store.checkpoint_path(CheckpointId(3))).unwrap();
    let err = load_error_within(&store, 3);
    assert!(
        err.contains("not a regular file") && err.contains("chk-3"),
        "{err}"
    );
    assert_eq!(
        store.load(CheckpointId(1)).unwrap().states,
        states(1).into_iter().collect()
    );
}

/// A cut one-file checkpoint's error gives the file's own length.
#[test]
fn a_cut_file_is_named_with_its_length() {
    let (_d, store) = open();
    write(&store, 1, SnapshotKind::Checkpoint);
    let path = store.checkpoint_path(CheckpointId(1));
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let err = store.load(CheckpointId(1)).unwrap_err().to_string();
    assert!(
        err.contains(&format!("holds {} bytes", len - 3)) && err.contains(&format!("says {len}")),
        "{err}"
    );
}

#[test]
fn a_retired_file_of_the_length_needed_is_written_over_first() {
    use std::os::unix::fs::MetadataExt;
    let (_d, store) = open();
    let sized = |n: usize| vec![(TaskStateKey::new("keyed_sum", 0), vec![7u8; n])];
    let stat = |id: u64| fs::metadata(store.checkpoint_path(CheckpointId(id))).unwrap();
    store
        .write_checkpoint(&meta(1, SnapshotKind::Checkpoint), &sized(100))
        .unwrap();
    store
        .write_checkpoint(&meta(2, SnapshotKind::Checkpoint), &sized(10_000))
        .unwrap();
    let one_page = stat(1).ino();
    assert_eq!((stat(1).len(), stat(2).len()), (4096, 3 * 4096));
    // Both kept; chk-2's, retired last, would be the one taken otherwise.
    store.remove_many(&ids(&[1, 2])).unwrap();
    store
        .write_checkpoint(&meta(3, SnapshotKind::Checkpoint), &sized(200))
        .unwrap();
    assert_eq!((stat(3).ino(), stat(3).len()), (one_page, 4096));
    let loaded = store.load(CheckpointId(3)).unwrap();
    assert_eq!(loaded.states, sized(200).into_iter().collect());
}

#[test]
fn retain_leaves_unreadable_checkpoints_alone() {
    let (_d, store) = open();
    for id in 1..=2 {
        write(&store, id, SnapshotKind::Checkpoint);
    }
    write_folder(&store, 3);
    fs::remove_file(store.checkpoint_path(CheckpointId(3)).join("_metadata")).unwrap();
    // chk-3 is unreadable: not counted, so chk-2 is the newest kept one.
    assert_eq!(store.retain(1).unwrap(), ids(&[1]));
    assert_eq!(store.list().unwrap(), ids(&[2, 3]));
}

#[test]
fn memory_storage_follows_the_same_rules() {
    let store = MemoryStorage::new();
    check_retention(&store);

    let store = MemoryStorage::new();
    assert!(store.is_empty().unwrap());
    write(&store, 1, SnapshotKind::Checkpoint);
    let loaded = store.load(CheckpointId(1)).unwrap();
    assert_eq!(loaded.metadata, meta(1, SnapshotKind::Checkpoint));
    assert_eq!(loaded.states, states(1).into_iter().collect());
    assert!(matches!(
        store.write_checkpoint(&meta(1, SnapshotKind::Checkpoint), &states(1)),
        Err(StorageError::AlreadyExists { .. })
    ));
    store.set_fail_writes(true);
    let err = store
        .write_checkpoint(&meta(2, SnapshotKind::Checkpoint), &states(2))
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    store.set_fail_writes(false);
    write(&store, 2, SnapshotKind::Checkpoint);
    assert_eq!(store.list().unwrap(), ids(&[1, 2]));
}

#[test]
fn storage_is_usable_as_a_shared_trait_object() {
    let (_d, store) = open();
    let shared: std::sync::Arc<dyn CheckpointStorage> = std::sync::Arc::new(store);
    let writer = {
        let shared = shared.clone();
        std::thread::spawn(move || write(&*shared, 1, SnapshotKind::Checkpoint))
    };
    writer.join().unwrap();
    assert_eq!(shared.list().unwrap(), ids(&[1]));
}

fn arb_states() -> impl Strategy<Value = Vec<(TaskStateKey, Vec<u8>)>> {
    // Task names include characters that are not valid in file names.
    prop::collection::btree_map(
        ("[a-zA-Z0-9_ ./\\\\é-]{0,12}", 0u32..4),
        prop::collection::vec(any::<u8>(), 0..512),
        0..6,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|((task, subtask), bytes)| (TaskStateKey::new(task, subtask), bytes))
            .collect()
    })
}

proptest! {
    // Each case writes and fsyncs a few files: keep the case count small.
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_checkpoint_round_trips(
        states in arb_states(),
        id in 1u64..=lockgate::storage::MAX_CHECKPOINT_ID,
        trigger in any::<u64>(),
        rate in any::<f64>().prop_filter("JSON has no NaN/inf", |f| f.is_finite()),
        savepoint in any::<bool>(),
    ) {
        let (_d, store) = open();
        let kind = if savepoint { SnapshotKind::Savepoint } else { SnapshotKind::Checkpoint };
        let mut m = CheckpointMetadata::new(CheckpointId(id), kind, trigger, job());
        m.job.config = serde_json::json!({ "rate": rate, "big": u64::MAX });
        let handle = store.write_checkpoint(&m, &states).unwrap();
        let loaded = store.load(CheckpointId(id)).unwrap();
        prop_assert_eq!(&loaded.metadata, &m);
        prop_assert_eq!(loaded.states, states.into_iter().collect::<BTreeMap<_, _>>());
        prop_assert_eq!(loaded.handle, handle);
        prop_assert_eq!(store.list().unwrap(), vec![CheckpointId(id)]);
    }
}

#[test]
fn a_part_written_after_its_checkpoint_was_discarded_is_refused_and_leaves_nothing() {
    // Many threads write parts of checkpoints 1..=8 while checkpoint 1..=8
    // is discarded halfway: after the discard no part of it is written,
    // and no staging folder is left behind for it.
    let (_d, store) = open();
    let store = std::sync::Arc::new(store);
    for id in 1..=8u64 {
        let writers: Vec<_> = (0..4u32)
            .map(|s| {
                let st = store.clone();
                std::thread::spawn(move || {
                    // A file per write: a part file is created new, so a
                    // second write of one name fails (`AlreadyExists`)
                    // whenever the discard comes late, on a loaded machine.
                    (0..50)
                        .map(|j| {
                            st.write_part(
                                CheckpointId(id),
                                &TaskStateKey::new("keyed_sum", s * 100 + j),
                                &[7u8; 4096],
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        store.discard(CheckpointId(id)).unwrap();
        for w in writers {
            let results = w.join().unwrap();
            // Once one write is refused, every later one is too.
            let first_refused = results.iter().position(Result::is_err);
            if let Some(i) = first_refused {
                assert!(results[i..].iter().all(|r| matches!(
                    r,
                    Err(StorageError::Discarded { id: d, .. }) if *d == CheckpointId(id)
                )));
            }
        }
        let left: Vec<String> = fs::read_dir(store.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(&format!("chk-{id}-")))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
    // Another checkpoint still writes and publishes.
    let m = meta(9, SnapshotKind::Checkpoint);
    store.write_checkpoint(&m, &states(9)).unwrap();
    assert_eq!(store.list().unwrap(), ids(&[9]));
}

#[test]
fn a_store_remembers_the_newest_1024_aborted_checkpoints_only() {
    let (_d, store) = open();
    for id in 1..=1100 {
        store.discard(CheckpointId(id)).unwrap();
    }
    let key = TaskStateKey::new("keyed_sum", 0);
    // The newest aborted ones still refuse a late part...
    assert!(matches!(
        store.write_part(CheckpointId(1100), &key, b"late"),
        Err(StorageError::Discarded { .. })
    ));
    assert!(matches!(
        store.write_part(CheckpointId(77), &key, b"late"),
        Err(StorageError::Discarded { .. })
    ));
    // ...the oldest are forgotten: the memory a long job keeps is bounded.
    store.write_part(CheckpointId(76), &key, b"late").unwrap();
}
