//! The one-file checkpoint of [`LocalDirStorage`](super::LocalDirStorage):
//! a checkpoint's metadata and every part in one file `chk-<n>`, written
//! once, `fsync`ed once, published by a rename and one `fsync` of the
//! root.
//!
//! | bytes | field                                              |
//! |-------|----------------------------------------------------|
//! | 4     | magic [`MAGIC`](super::MAGIC) = `b"LGCK"`          |
//! | 2     | [`SINGLE_FILE_VERSION`] (2), u16 LE                |
//! | 8     | metadata length `m`, u64 LE                        |
//! | 4     | CRC32C of the metadata, u32 LE                     |
//! | m     | metadata: the JSON of a folder's `_metadata`, each part's offset added, then spaces |
//! | ...   | the parts, one after another, each at its offset   |
//!
//! Each part's size and CRC32C are in the metadata, and the file's length
//! must be exactly the header, the metadata and the parts: a cut or grown
//! file, or a flipped byte anywhere, is found and named. A build that
//! reads only folders refuses the file by its version.
//!
//! The spaces (JSON whitespace, inside the metadata's length and CRC32C)
//! round the file's length up to [`LENGTH_STEP`]: a retired file written
//! over then keeps its length while checkpoints stay about the same size,
//! so its `fdatasync` flushes data only, with no size change for the file
//! system to journal (ext4, 20 KB: ~85 µs against ~130-190 µs when the
//! length changes).

use super::api::{Result, StorageError};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

/// The version of a one-file checkpoint, in its header (a folder's files
/// carry [`FORMAT_VERSION`](super::FORMAT_VERSION), 1).
pub(crate) const SINGLE_FILE_VERSION: u16 = 2;

/// Header bytes: magic, version, metadata length, metadata CRC32C.
pub(super) const SINGLE_HEADER_LEN: usize = 4 + 2 + 8 + 4;

/// A one-file checkpoint's length is a multiple of this (one page).
pub(super) const LENGTH_STEP: usize = 4096;

/// The length of the one-file checkpoint of `metadata` bytes of JSON and
/// `parts` bytes of parts: with the header, padded.
pub(super) fn file_len(metadata: usize, parts: usize) -> usize {
    (SINGLE_HEADER_LEN + metadata + parts).next_multiple_of(LENGTH_STEP)
}

/// The padding's bytes.
static SPACES: [u8; LENGTH_STEP] = [b' '; LENGTH_STEP];

/// Writes `metadata` (padded) and `parts` as one file at `path` and
/// `fdatasync`s it; returns its length. The file is new, or with
/// `reuse: Some(length)` a file of that length to write over (a retired
/// checkpoint's, created if gone), cut to what was written. The file's
/// name is made durable by the caller (rename, then the root's `fsync`).
pub(super) fn write_single(
    path: &Path,
    metadata: &[u8],
    parts: &[&[u8]],
    reuse: Option<u64>,
) -> Result<u64> {
    let _call = crate::util::calls::call(|| format!("writing {}", path.display()));
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(reuse.is_none())
        .create(reuse.is_some());
    // A file written over must be the one the store kept: not where a
    // symbolic link put in its place points (`O_NOFOLLOW`), and not a
    // FIFO, whose open would wait for a reader.
    #[cfg(unix)]
    let flags = libc::O_NOFOLLOW;
    #[cfg(not(unix))]
    let flags = 0;
    let (mut file, ours) =
        super::framing::open_regular_with(path, &mut options, flags, "creating", "writing")?;
    let parts_len = parts.iter().map(|p| p.len()).sum::<usize>();
    let padding = &SPACES
        [..file_len(metadata.len(), parts_len) - (SINGLE_HEADER_LEN + metadata.len() + parts_len)];
    let crc = crc32c::crc32c_append(crc32c::crc32c(metadata), padding);
    let mut header = [0u8; SINGLE_HEADER_LEN];
    header[0..4].copy_from_slice(&super::MAGIC);
    header[4..6].copy_from_slice(&SINGLE_FILE_VERSION.to_le_bytes());
    header[6..14].copy_from_slice(&((metadata.len() + padding.len()) as u64).to_le_bytes());
    header[14..18].copy_from_slice(&crc.to_le_bytes());
    let io = |e| StorageError::io("writing", path, e);
    file.write_all(&header).map_err(io)?;
    file.write_all(metadata).map_err(io)?;
    file.write_all(padding).map_err(io)?;
    let mut len = (SINGLE_HEADER_LEN + metadata.len() + padding.len()) as u64;
    for part in parts {
        // Megabytes into the page cache are milliseconds of a background
        // thread's CPU: give the core back between parts.
        crate::util::background::yield_point();
        file.write_all(part).map_err(io)?;
        len += part.len() as u64;
    }
    crate::util::background::yield_point();
    // A longer file written over keeps its tail: cut it (not always: a
    // truncation costs about what it saves).
    if reuse.is_some_and(|old| old > len) {
        file.set_len(len)
            .map_err(|e| StorageError::io("cutting", path, e))?;
    }
    // Data and length, not the times: nothing reads them.
    file.sync_data()
        .map_err(|e| StorageError::io("syncing", path, e))?;
    // The caller renames whatever is at `path`: it must still be this file
    // (a FIFO or a link put there meanwhile would be published).
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let there =
            std::fs::symlink_metadata(path).map_err(|e| StorageError::io("inspecting", path, e))?;
        if (ours.dev(), ours.ino()) != (there.dev(), there.ino()) {
            let e = std::io::Error::other("replaced by another file while being written");
            return Err(StorageError::io("writing", path, e));
        }
    }
    Ok(len)
}

/// Checks the header of a one-file checkpoint; returns the metadata's
/// length and CRC32C.
fn parse_header(path: &Path, bytes: &[u8], file_len: u64) -> Result<(usize, u32)> {
    if bytes.len() < SINGLE_HEADER_LEN {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: SINGLE_HEADER_LEN as u64,
            found: file_len,
        });
    }
    if bytes[0..4] != super::MAGIC {
        return Err(StorageError::BadMagic {
            path: path.to_path_buf(),
            expected: super::MAGIC,
            found: bytes[0..4].to_vec(),
        });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != SINGLE_FILE_VERSION {
        return Err(StorageError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: SINGLE_FILE_VERSION,
        });
    }
    let m = u64::from_le_bytes(bytes[6..14].try_into().expect("8 bytes"));
    if m > file_len.saturating_sub(SINGLE_HEADER_LEN as u64) {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: SINGLE_HEADER_LEN as u64 + m,
            found: file_len,
        });
    }
    let crc = u32::from_le_bytes(bytes[14..18].try_into().expect("4 bytes"));
    Ok((m as usize, crc))
}

/// Reads a one-file checkpoint whole: its metadata (checked against its
/// CRC32C) and the parts' bytes after it.
pub(super) fn read_single(path: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    let _call = crate::util::calls::call(|| format!("reading {}", path.display()));
    let mut bytes = super::framing::read_regular(path)?;
    let file_len = bytes.len() as u64;
    let (m, crc) = parse_header(path, &bytes, file_len)?;
    let parts = bytes.split_off(SINGLE_HEADER_LEN + m);
    let metadata = bytes.split_off(SINGLE_HEADER_LEN);
    check_metadata_crc(path, &metadata, crc)?;
    Ok((metadata, parts))
}

/// Where the parts of the one-file checkpoint at `path` start: the header
/// and the metadata's length.
pub(super) fn parts_start(path: &Path) -> Result<u64> {
    Ok((SINGLE_HEADER_LEN + read_single_metadata(path)?.len()) as u64)
}

/// Reads only the header and metadata of a one-file checkpoint.
pub(super) fn read_single_metadata(path: &Path) -> Result<Vec<u8>> {
    let _call = crate::util::calls::call(|| format!("reading {}", path.display()));
    let (mut file, file_len) = super::framing::open_regular(path)?;
    let mut header = [0u8; SINGLE_HEADER_LEN];
    let n = read_up_to(&mut file, &mut header).map_err(|e| StorageError::io("reading", path, e))?;
    let (m, crc) = parse_header(path, &header[..n], file_len)?;
    let mut metadata = vec![0u8; m];
    file.read_exact(&mut metadata)
        .map_err(|e| StorageError::io("reading", path, e))?;
    check_metadata_crc(path, &metadata, crc)?;
    Ok(metadata)
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn check_metadata_crc(path: &Path, metadata: &[u8], expected: u32) -> Result<()> {
    let found = crc32c::crc32c(metadata);
    if found != expected {
        return Err(StorageError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected,
            found,
        });
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A FIFO where a spare was is refused at once: an open for writing
    /// would otherwise wait for a reader forever.
    #[test]
    fn a_fifo_in_place_of_a_spare_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".tmp-spare-1");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(write_single(&p, b"{}", &[b"part"], Some(4096)).map(|_| ()));
        });
        let err = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("writing over a FIFO did not return in 60 s")
            .expect_err("a FIFO was written as a checkpoint")
            .to_string();
        assert!(err.contains(".tmp-spare-1"), "{err}");
    }
}
