//! A resumable reader of CSV files (plain or gzip) into typed records.
//!
//! A record type names the header columns it needs ([`CsvRecord::COLUMNS`],
//! found in any order) and parses one row from them. Input files are plain
//! or gzip CSV, told apart by the gzip magic bytes `1f 8b` (RFC 1952
//! §2.3.1), not by the file name. [`CsvRecordReader`] can resume at a data
//! row, which is what a replayable source checkpoints
//! ([`crate::csv_source`]).

use std::fs::File;
use std::io::{self, Read};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Everything that can go wrong reading a CSV input. Every variant names
/// the file; row errors carry the 1-based line number (the header is line
/// 1).
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// The input file could not be opened.
    #[error("{}: cannot open: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Reading failed below the CSV level (an I/O error or a corrupt gzip
    /// stream). Not a bad row: `--bad-rows skip` does not skip it.
    #[error("{}: read error after line {line}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The last line read successfully (0: none).
        line: u64,
        /// The underlying error.
        source: csv::Error,
    },
    /// The file has no header line.
    #[error("{}: line 1: empty file, expected a CSV header line", path.display())]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },
    /// A column the job needs is not in the header.
    #[error("{}: line 1: missing column `{column}` (header has: {found})", path.display())]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The missing column's name.
        column: &'static str,
        /// The header's column names, comma separated.
        found: String,
    },
    /// A column the job needs appears more than once in the header, so
    /// which one to use is ambiguous.
    #[error("{}: line 1: column `{column}` appears more than once in the header", path.display())]
    DuplicateColumn {
        /// The file.
        path: PathBuf,
        /// The duplicated column's name.
        column: &'static str,
    },
    /// A malformed data row (wrong field count, unparsable value), with
    /// [`BadRows::Fail`].
    #[error("{}: line {line}: {reason}", path.display())]
    BadRow {
        /// The file.
        path: PathBuf,
        /// The 1-based line the row starts on (header = line 1).
        line: u64,
        /// What is wrong, naming the column.
        reason: String,
    },
    /// [`CsvRecordReader::open_at`] was asked to resume past the last row.
    #[error("{}: cannot resume at data row {position}: the file has only {rows} data rows", path.display())]
    PositionBeyondEnd {
        /// The file.
        path: PathBuf,
        /// The requested position (0-based data row index).
        position: u64,
        /// The number of data rows in the file.
        rows: u64,
    },
}

/// What the reader does with a malformed data row (`--bad-rows`).
///
/// # Examples
/// ```
/// use lockgate_operators::csv::{read_all, BadRows};
/// // `Flight { origin: String, delay: i64 }`: the record of `CsvRecord`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A flight: where from, and its delay in minutes.
/// # #[derive(Debug, PartialEq)]
/// # struct Flight {
/// #     origin: String,
/// #     delay: i64,
/// # }
/// #
/// # impl CsvRecord for Flight {
/// #     const COLUMNS: &'static [&'static str] = &["origin", "delay"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let delay = fields.get(1)?;
/// #         let delay = delay.parse().map_err(|e| format!("column `{}`: {delay:?}: {e}", fields.name(1)))?;
/// #         Ok(Flight { origin: fields.get(0)?.to_string(), delay })
/// #     }
/// # }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("flights.csv");
/// std::fs::write(&path, "origin,delay\nJFK,5\nEWR,late\nLGA,-2\n")?;
///
/// let err = read_all::<Flight>(&path, BadRows::Fail).unwrap_err().to_string();
/// assert!(err.ends_with("flights.csv: line 3: column `delay`: \"late\": invalid digit found in string"), "{err}");
///
/// let (flights, skipped) = read_all::<Flight>(&path, BadRows::Skip)?;
/// assert_eq!(flights.len(), 2);
/// assert_eq!(skipped, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadRows {
    /// Return [`CsvError::BadRow`] (the default).
    #[default]
    Fail,
    /// Skip it and count it ([`CsvRecordReader::skipped`]).
    Skip,
}

/// The named fields of one CSV row, in the order of [`CsvRecord::COLUMNS`].
///
/// # Examples
/// A record reads its fields by their index in its columns, whatever their
/// order in the file:
/// ```
/// use lockgate_operators::csv::{read_all, BadRows};
/// # use lockgate_operators::csv::{CsvRecord, Fields};
///
/// /// A flight: where from, and its delay in minutes.
/// #[derive(Debug, PartialEq)]
/// struct Flight {
///     origin: String,
///     delay: i64,
/// }
///
/// impl CsvRecord for Flight {
///     const COLUMNS: &'static [&'static str] = &["origin", "delay"];
///     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
///         let delay = fields.get(1)?;
///         let delay = delay.parse().map_err(|e| format!("column `{}`: {delay:?}: {e}", fields.name(1)))?;
///         Ok(Flight { origin: fields.get(0)?.to_string(), delay })
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("flights.csv");
/// std::fs::write(&path, "carrier,delay,origin\nAA,5,JFK\nUA,-2,EWR\n")?;
/// let (flights, _) = read_all::<Flight>(&path, BadRows::Fail)?;
/// assert_eq!(flights, [
///     Flight { origin: "JFK".into(), delay: 5 },
///     Flight { origin: "EWR".into(), delay: -2 },
/// ]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Fields<'a> {
    record: &'a csv::ByteRecord,
    columns: &'a [usize],
    names: &'static [&'static str],
}

impl<'a> Fields<'a> {
    /// Field `i` (index into [`CsvRecord::COLUMNS`]) as text.
    ///
    /// Errors: a reason naming the column if `i` is out of range or the
    /// field is not UTF-8.
    pub fn get(&self, i: usize) -> Result<&'a str, String> {
        let name = self.names.get(i).copied().unwrap_or("?");
        let raw = self
            .columns
            .get(i)
            .and_then(|&c| self.record.get(c))
            .ok_or_else(|| format!("column `{name}` is missing from the row"))?;
        std::str::from_utf8(raw).map_err(|_| format!("column `{name}`: not valid UTF-8"))
    }

    /// The name of field `i`.
    pub fn name(&self, i: usize) -> &'static str {
        self.names.get(i).copied().unwrap_or("?")
    }
}

/// A record parsed from the named columns of a CSV row.
///
/// # Examples
/// ```
/// use lockgate_operators::csv::{read_all, BadRows, CsvError};
/// # use lockgate_operators::csv::{CsvRecord, Fields};
///
/// /// A flight: where from, and its delay in minutes.
/// #[derive(Debug, PartialEq)]
/// struct Flight {
///     origin: String,
///     delay: i64,
/// }
///
/// impl CsvRecord for Flight {
///     const COLUMNS: &'static [&'static str] = &["origin", "delay"];
///     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
///         let delay = fields.get(1)?;
///         let delay = delay.parse().map_err(|e| format!("column `{}`: {delay:?}: {e}", fields.name(1)))?;
///         Ok(Flight { origin: fields.get(0)?.to_string(), delay })
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("flights.csv");
/// std::fs::write(&path, "origin,delay\nJFK,5\n")?;
/// let (flights, _) = read_all::<Flight>(&path, BadRows::Fail)?;
/// assert_eq!(flights, [Flight { origin: "JFK".into(), delay: 5 }]);
///
/// // a file without one of the columns is refused at open
/// std::fs::write(&path, "origin,carrier\nJFK,AA\n")?;
/// let err = read_all::<Flight>(&path, BadRows::Fail).unwrap_err();
/// assert!(matches!(err, CsvError::MissingColumn { column: "delay", .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait CsvRecord: Sized {
    /// The header names of the columns the record needs; the reader finds
    /// them in any order and fails on a missing one.
    const COLUMNS: &'static [&'static str];

    /// Parses one row. Errors: the reason, naming the column.
    fn from_fields(fields: &Fields<'_>) -> Result<Self, String>;
}

/// The gzip magic bytes (RFC 1952 §2.3.1: ID1 = 0x1f, ID2 = 0x8b).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens `path` as a byte stream, decompressing it when it starts with the
/// gzip magic bytes (multi-member gzip is read to the end).
fn open_maybe_gzip(path: &Path) -> Result<Box<dyn Read + Send>, CsvError> {
    let open_err = |source| CsvError::Open {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(open_err)?;
    let mut magic = [0u8; 2];
    let mut n = 0;
    while n < magic.len() {
        match file.read(&mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(open_err(e)),
        }
    }
    let head = io::Cursor::new(magic[..n].to_vec()).chain(file);
    if magic[..n] == GZIP_MAGIC {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(head)))
    } else {
        Ok(Box::new(head))
    }
}

/// A CSV reader of records `R` that finds `R::COLUMNS` by header name, in
/// any order, and can resume at a row position.
///
/// The position ([`CsvRecordReader::position`]) is the 0-based index of
/// the next data row, counting every data row read so far, good or bad
/// (blank lines are not rows). [`CsvRecordReader::open_at`] resumes at a
/// position by reading and parsing the rows before it from the start of
/// the file: a gzip stream cannot seek, and reparsing also restores
/// [`CsvRecordReader::skipped`], so a resumed reader reports exactly what
/// one that read through would. Resuming therefore costs O(position).
///
/// Errors (see [`CsvError`]): `Open`, `EmptyFile`, `MissingColumn`,
/// `DuplicateColumn` at open; `BadRow` (with [`BadRows::Fail`]) and `Read`
/// while reading. After returning an error the reader is finished and
/// returns `None`. It never panics on bad input.
///
/// # Examples
/// Reads a gzip file, then resumes a second reader where the first one
/// stopped:
/// ```
/// use lockgate_operators::csv::{BadRows, CsvRecordReader};
/// use std::io::Write;
/// // `Flight { origin: String, delay: i64 }`: the record of `CsvRecord`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A flight: where from, and its delay in minutes.
/// # #[derive(Debug, PartialEq)]
/// # struct Flight {
/// #     origin: String,
/// #     delay: i64,
/// # }
/// #
/// # impl CsvRecord for Flight {
/// #     const COLUMNS: &'static [&'static str] = &["origin", "delay"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let delay = fields.get(1)?;
/// #         let delay = delay.parse().map_err(|e| format!("column `{}`: {delay:?}: {e}", fields.name(1)))?;
/// #         Ok(Flight { origin: fields.get(0)?.to_string(), delay })
/// #     }
/// # }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("flights.csv.gz"); // gzip is told by its first bytes
/// let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path)?, flate2::Compression::fast());
/// gz.write_all(b"origin,delay\nJFK,5\nEWR,-2\nLGA,0\n")?;
/// gz.finish()?;
///
/// let mut reader = CsvRecordReader::<Flight>::open(&path, BadRows::Fail)?;
/// assert_eq!(reader.next_record()?, Some(Flight { origin: "JFK".into(), delay: 5 }));
/// let position = reader.position(); // what a source checkpoints
/// assert_eq!(position, 1);
///
/// let resumed = CsvRecordReader::<Flight>::open_at(&path, BadRows::Fail, position)?;
/// let rest: Vec<String> = resumed.map(|f| f.map(|f| f.origin)).collect::<Result<_, _>>()?;
/// assert_eq!(rest, ["EWR", "LGA"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CsvRecordReader<R: CsvRecord> {
    path: PathBuf,
    reader: csv::Reader<Box<dyn Read + Send>>,
    /// Row index of each of `R::COLUMNS`.
    columns: Vec<usize>,
    header_len: usize,
    bad_rows: BadRows,
    position: u64,
    skipped: u64,
    last_line: u64,
    record: csv::ByteRecord,
    finished: bool,
    _record: PhantomData<fn() -> R>,
}

impl<R: CsvRecord> std::fmt::Debug for CsvRecordReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvRecordReader").finish_non_exhaustive()
    }
}

impl<R: CsvRecord> CsvRecordReader<R> {
    /// Opens `path` (plain or gzip) at its first data row and checks its
    /// header (a UTF-8 byte-order mark before it is skipped).
    pub fn open(path: impl AsRef<Path>, bad_rows: BadRows) -> Result<Self, CsvError> {
        let path = path.as_ref().to_path_buf();
        let input = open_maybe_gzip(&path)?;
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            // Rows with the wrong field count are reported by us, as bad rows.
            .flexible(true)
            // The recorded streams quote no field. With quoting on, one stray
            // `"` would swallow every following line into a single bad row
            // (silently dropping them with --bad-rows skip); off, it is one
            // bad value on its own line.
            .quoting(false)
            .from_reader(input);
        let headers = match reader.byte_headers() {
            Ok(h) => h.clone(),
            Err(source) => {
                return Err(CsvError::Read {
                    path,
                    line: 0,
                    source,
                })
            }
        };
        if headers.is_empty() {
            return Err(CsvError::EmptyFile { path });
        }
        let mut names: Vec<String> = headers
            .iter()
            .map(|h| String::from_utf8_lossy(h).into_owned())
            .collect();
        // A UTF-8 byte-order mark before the header (as spreadsheet
        // programs write) is not part of the first column's name.
        if let Some(first) = names.first_mut() {
            if let Some(rest) = first.strip_prefix('\u{feff}') {
                *first = rest.to_string();
            }
        }
        let mut columns = Vec::with_capacity(R::COLUMNS.len());
        for &column in R::COLUMNS {
            let mut found = names
                .iter()
                .enumerate()
                .filter(|(_, n)| n.as_str() == column);
            match (found.next(), found.next()) {
                (Some((i, _)), None) => columns.push(i),
                (Some(_), Some(_)) => return Err(CsvError::DuplicateColumn { path, column }),
                (None, _) => {
                    return Err(CsvError::MissingColumn {
                        path,
                        column,
                        found: names.join(","),
                    })
                }
            }
        }
        Ok(CsvRecordReader {
            path,
            reader,
            columns,
            header_len: headers.len(),
            bad_rows,
            position: 0,
            skipped: 0,
            last_line: 1,
            record: csv::ByteRecord::new(),
            finished: false,
            _record: PhantomData,
        })
    }

    /// Opens `path` so that the next row read is data row `position`
    /// (0-based), as reported by [`CsvRecordReader::position`] of an earlier
    /// reader of the same file. Rows before it are read and parsed again
    /// (see the type's docs), so `skipped` counts the bad rows before it.
    ///
    /// Errors: those of [`CsvRecordReader::open`], a bad row before
    /// `position` with [`BadRows::Fail`], and
    /// [`CsvError::PositionBeyondEnd`] when the file has fewer rows.
    pub fn open_at(
        path: impl AsRef<Path>,
        bad_rows: BadRows,
        position: u64,
    ) -> Result<Self, CsvError> {
        let mut reader = Self::open(path, bad_rows)?;
        while reader.position < position {
            if reader.step()?.is_none() {
                return Err(CsvError::PositionBeyondEnd {
                    path: reader.path.clone(),
                    position,
                    rows: reader.position,
                });
            }
        }
        Ok(reader)
    }

    /// The 0-based index of the next data row (= data rows read so far,
    /// good or bad).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Bad rows skipped so far (with [`BadRows::Skip`]), counted from the
    /// first data row even after [`CsvRecordReader::open_at`].
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next record, `Ok(None)` at the end of the file.
    ///
    /// Errors: [`CsvError::BadRow`] (with [`BadRows::Fail`]) and
    /// [`CsvError::Read`]; the reader is finished afterwards.
    pub fn next_record(&mut self) -> Result<Option<R>, CsvError> {
        loop {
            match self.step()? {
                None => return Ok(None),
                Some(Some(record)) => return Ok(Some(record)),
                Some(None) => {} // a skipped bad row
            }
        }
    }

    /// Reads exactly one data row: `None` at the end, `Some(None)` for a
    /// bad row skipped with [`BadRows::Skip`], `Some(Some(record))` else.
    fn step(&mut self) -> Result<Option<Option<R>>, CsvError> {
        if self.finished {
            return Ok(None);
        }
        match self.reader.read_byte_record(&mut self.record) {
            Ok(true) => {}
            Ok(false) => {
                self.finished = true;
                return Ok(None);
            }
            Err(source) => {
                self.finished = true;
                return Err(CsvError::Read {
                    path: self.path.clone(),
                    line: self.last_line,
                    source,
                });
            }
        }
        let line = self
            .record
            .position()
            .map_or(self.last_line + 1, |p| p.line());
        self.last_line = line;
        self.position += 1;
        match self.parse_current() {
            Ok(record) => Ok(Some(Some(record))),
            Err(reason) => match self.bad_rows {
                BadRows::Skip => {
                    self.skipped += 1;
                    Ok(Some(None))
                }
                BadRows::Fail => {
                    self.finished = true;
                    Err(CsvError::BadRow {
                        path: self.path.clone(),
                        line,
                        reason,
                    })
                }
            },
        }
    }

    fn parse_current(&self) -> Result<R, String> {
        if self.record.len() != self.header_len {
            return Err(format!(
                "expected {} fields as in the header, found {}",
                self.header_len,
                self.record.len()
            ));
        }
        R::from_fields(&Fields {
            record: &self.record,
            columns: &self.columns,
            names: R::COLUMNS,
        })
    }
}

impl<R: CsvRecord> Iterator for CsvRecordReader<R> {
    type Item = Result<R, CsvError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Reads all records of `path`; returns them with the number of bad rows
/// skipped (always 0 with [`BadRows::Fail`]).
///
/// Errors: as [`CsvRecordReader::open`] and [`CsvRecordReader::next_record`].
///
/// # Examples
/// ```
/// use lockgate_operators::csv::{read_all, BadRows};
/// // `Flight { origin: String, delay: i64 }`: the record of `CsvRecord`'s example
/// # use lockgate_operators::csv::{CsvRecord, Fields};
/// #
/// # /// A flight: where from, and its delay in minutes.
/// # #[derive(Debug, PartialEq)]
/// # struct Flight {
/// #     origin: String,
/// #     delay: i64,
/// # }
/// #
/// # impl CsvRecord for Flight {
/// #     const COLUMNS: &'static [&'static str] = &["origin", "delay"];
/// #     fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
/// #         let delay = fields.get(1)?;
/// #         let delay = delay.parse().map_err(|e| format!("column `{}`: {delay:?}: {e}", fields.name(1)))?;
/// #         Ok(Flight { origin: fields.get(0)?.to_string(), delay })
/// #     }
/// # }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("flights.csv");
/// std::fs::write(&path, "origin,delay\nJFK,5\nEWR,-2\n")?;
/// let (flights, skipped) = read_all::<Flight>(&path, BadRows::Skip)?;
/// assert_eq!(flights.iter().map(|f| f.delay).sum::<i64>(), 3);
/// assert_eq!(skipped, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_all<R: CsvRecord>(
    path: impl AsRef<Path>,
    bad_rows: BadRows,
) -> Result<(Vec<R>, u64), CsvError> {
    let mut reader = CsvRecordReader::<R>::open(path, bad_rows)?;
    let mut records = Vec::new();
    while let Some(r) = reader.next_record()? {
        records.push(r);
    }
    Ok((records, reader.skipped()))
}
