//! The frame of every checkpoint file: magic, version, length, CRC32C, then
//! the payload (the table is in [`super`]'s docs).

use super::api::{Result, StorageError};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// The 4 bytes every checkpoint file starts with ("LockGate ChecKpoint").
pub const MAGIC: [u8; 4] = *b"LGCK";

/// The file format version this build writes and the only one it reads.
/// It is stored in every file header and in the `_metadata` JSON.
pub const FORMAT_VERSION: u16 = 1;

/// Header size in bytes: magic (4) + version (2) + payload length (8) + CRC32C (4).
pub(super) const HEADER_LEN: usize = 4 + 2 + 8 + 4;

/// Bytes checksummed and written by one step of [`write_framed`]: 256
/// KiB, some tens of µs of work between two yield points.
const WRITE_PIECE_BYTES: usize = 256 * 1024;

/// Creates `path` (which must not exist), writes the framed `payload`,
/// fsyncs it, and returns the payload's CRC32C.
pub(super) fn write_framed(path: &Path, payload: &[u8]) -> Result<u32> {
    let _call = crate::util::calls::call(|| format!("writing {}", path.display()));
    let mut crc = 0;
    for piece in payload.chunks(WRITE_PIECE_BYTES) {
        crc = crc32c::crc32c_append(crc, piece);
        crate::util::background::yield_point();
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| StorageError::io("creating", path, e))?;
    let mut header = [0u8; HEADER_LEN];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[6..14].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    header[14..18].copy_from_slice(&crc.to_le_bytes());
    // Two writes, header then payload, straight from memory: the payload
    // is already one buffer, and a write buffer (256 KiB before) was one
    // more allocation and copy per file (its fresh pages showed in a
    // snapshot thread's profile; BENCHMARKS.md). A torn write is caught
    // on reading by the length and the CRC.
    file.write_all(&header)
        .map_err(|e| StorageError::io("writing", path, e))?;
    // The payload in pieces with a yield point between them: copying
    // megabytes into the page cache is milliseconds of a snapshot
    // thread's CPU, which must not hold a core that long
    // ([`crate::yield_point`]).
    for piece in payload.chunks(WRITE_PIECE_BYTES) {
        crate::util::background::yield_point();
        file.write_all(piece)
            .map_err(|e| StorageError::io("writing", path, e))?;
    }
    crate::util::background::yield_point();
    file.sync_all()
        .map_err(|e| StorageError::io("syncing", path, e))?;
    Ok(crc)
}

/// Reads the framed file at `path`, validates magic, version, length and
/// CRC32C, and returns the payload.
pub(super) fn read_framed(path: &Path) -> Result<Vec<u8>> {
    let _call = crate::util::calls::call(|| format!("reading {}", path.display()));
    let mut bytes = fs::read(path).map_err(|e| StorageError::io("reading", path, e))?;
    let found_len = bytes.len() as u64;
    if bytes[..bytes.len().min(4)] != MAGIC[..bytes.len().min(4)] {
        return Err(StorageError::BadMagic {
            path: path.to_path_buf(),
            expected: MAGIC,
            found: bytes[..bytes.len().min(4)].to_vec(),
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: HEADER_LEN as u64,
            found: found_len,
        });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(StorageError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[6..14]);
    let payload_len = u64::from_le_bytes(len_bytes);
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&bytes[14..18]);
    let expected_crc = u32::from_le_bytes(crc_bytes);
    let expected_len = payload_len.saturating_add(HEADER_LEN as u64);
    if found_len < expected_len {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: expected_len,
            found: found_len,
        });
    }
    if found_len > expected_len {
        return Err(StorageError::TrailingBytes {
            path: path.to_path_buf(),
            expected: expected_len,
            found: found_len,
        });
    }
    bytes.drain(..HEADER_LEN);
    let crc = crc32c::crc32c(&bytes);
    if crc != expected_crc {
        return Err(StorageError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: expected_crc,
            found: crc,
        });
    }
    Ok(bytes)
}

/// Makes the entries of directory `dir` durable (fsync of the directory;
/// a no-op where directories cannot be opened, i.e. outside Unix).
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    let _call = crate::util::calls::call(|| format!("syncing {}", dir.display()));
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| StorageError::io("syncing", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
