//! The frame of every file of a checkpoint folder (what builds before
//! the one-file checkpoint wrote, still read): magic, version, length,
//! CRC32C, then the payload (the table is in [`super`]'s docs).

use super::api::{Result, StorageError};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// Opens `path` with `options`, never waiting in the open (`O_NONBLOCK`,
/// which a regular file ignores, added to `flags`), and returns the file
/// with its `fstat` if it is a regular file. Anything else is refused
/// with an error naming it: a FIFO put in a checkpoint file's place would
/// block the open or the read forever, and a device such as `/dev/zero`
/// never ends. `opening` names a failed open, `using` the refusal.
pub(super) fn open_regular_with(
    path: &Path,
    options: &mut OpenOptions,
    #[cfg_attr(not(unix), allow(unused_variables))] flags: i32,
    opening: &'static str,
    using: &'static str,
) -> Result<(File, std::fs::Metadata)> {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, flags | libc::O_NONBLOCK);
    let file = options
        .open(path)
        .map_err(|e| StorageError::io(opening, path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| StorageError::io("inspecting", path, e))?;
    if !meta.is_file() {
        let e = io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
        return Err(StorageError::io(using, path, e));
    }
    Ok((file, meta))
}

/// Opens the checkpoint file at `path` for reading ([`open_regular_with`];
/// a symbolic link to a regular file is followed); returns it and its
/// length.
pub(super) fn open_regular(path: &Path) -> Result<(File, u64)> {
    let (file, meta) =
        open_regular_with(path, OpenOptions::new().read(true), 0, "reading", "reading")?;
    Ok((file, meta.len()))
}

/// Reads the regular file at `path` whole ([`open_regular`]), at most
/// the length it had when opened.
pub(super) fn read_regular(path: &Path) -> Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| StorageError::io("reading", path, e))?;
    Ok(bytes)
}

/// The 4 bytes every checkpoint file starts with ("LockGate ChecKpoint").
pub const MAGIC: [u8; 4] = *b"LGCK";

/// The file format version this build writes and the only one it reads.
/// It is stored in every file header and in the `_metadata` JSON.
pub const FORMAT_VERSION: u16 = 1;

/// Header size in bytes: magic (4) + version (2) + payload length (8) + CRC32C (4).
pub(super) const HEADER_LEN: usize = 4 + 2 + 8 + 4;

/// Reads the framed file at `path`, validates magic, version, length and
/// CRC32C, and returns the payload.
pub(super) fn read_framed(path: &Path) -> Result<Vec<u8>> {
    let _call = crate::util::calls::call(|| format!("reading {}", path.display()));
    let mut bytes = read_regular(path)?;
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
