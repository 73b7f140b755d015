//! The engine-independent parts of the `lockgate flights` job: its record
//! types, a resumable CSV reader for the nycflights13 files, the bundled-data
//! locator, the CSV writers of its two outputs, and a plain-Rust
//! [`reference`](mod@reference) computation that the engine job is checked against.
//!
//! The job (spec of the `lockgate flights` issue): enrich each flight with
//! the weather row of the same `origin` and `time_hour` (event time, UTC),
//! bucket the visibility ([`Visibility`]), and write
//! `by_visibility.csv` (per origin and bucket) and `daily.csv` (per origin
//! and 24-hour event-time window aligned to UTC midnight).
//!
//! Input files are plain or gzip CSV (told apart by the gzip magic bytes
//! `1f 8b`, RFC 1952 §2.3.1, not by the file name), with columns found by
//! their header names in any order. `NA` marks a missing value, as in the
//! published data set.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use lockgate::RecordSize;
pub use lockgate_operators::csv::{
    read_all, BadRows, CsvError, CsvRecord, CsvRecordReader, Fields,
};
use serde::{Deserialize, Serialize};

/// Milliseconds in one hour.
pub const MS_PER_HOUR: i64 = 3_600_000;
/// Milliseconds in one day (UTC days have no leap seconds in epoch time).
pub const MS_PER_DAY: i64 = 86_400_000;

/// The file name of the per-(origin, visibility) output.
pub const BY_VISIBILITY_FILE: &str = "by_visibility.csv";
/// The file name of the per-(origin, UTC date) output.
pub const DAILY_FILE: &str = "daily.csv";
/// The header line (without its LF) of [`BY_VISIBILITY_FILE`].
/// (`departed` and `cancelled` as in [`DAILY_HEADER`]: together, every flight.)
pub const BY_VISIBILITY_HEADER: &str = "origin,visibility,departed,cancelled,mean_dep_delay_min";
/// The header line (without its LF) of [`DAILY_FILE`].
pub const DAILY_HEADER: &str = "origin,date,departed,cancelled,mean_dep_delay_min";

/// The directory of the bundled data, relative to the repository root.
pub const BUNDLED_DATA_DIR: &str = "data/nycflights13";

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Everything that can go wrong reading the inputs, locating the bundled
/// data or writing the outputs. Every variant that concerns a file names it;
/// row errors carry the 1-based line number (the header is line 1).
#[derive(Debug, thiserror::Error)]
pub enum FlightsError {
    /// Reading a CSV input failed (see [`CsvError`]).
    #[error(transparent)]
    Csv(#[from] CsvError),
    /// The bundled data file was not found.
    #[error("cannot find the bundled data file {} (searched {searched}); pass {flag} PATH", file.display())]
    DataNotFound {
        /// The file searched for, relative to a repository root.
        file: PathBuf,
        /// The command-line flag that gives the path instead.
        flag: &'static str,
        /// Where it was searched.
        searched: String,
    },
    /// An output file could not be written.
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/// An airport code of 1 to 4 ASCII letters or digits (nycflights13 uses the
/// 3-letter FAA codes EWR, JFK, LGA), stored inline and zero-padded.
///
/// A fixed-size code rather than a `String` keeps [`Flight`] and
/// [`Weather`] `Copy` and of fixed size (so [`RecordSize::FIXED_SIZE`]
/// holds and a batch's byte size is O(1)), avoids one allocation per parsed
/// row, and makes keys cheap to hash. The derived order is the byte order
/// of the codes (zero padding sorts a prefix first), which the outputs
/// sort by.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Origin([u8; 4]);

impl Origin {
    /// Longest code accepted, in bytes.
    pub const MAX_LEN: usize = 4;

    /// The code for `s`, or `None` unless `s` is 1 to [`Origin::MAX_LEN`]
    /// ASCII letters or digits.
    pub fn new(s: &str) -> Option<Origin> {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > Self::MAX_LEN || !b.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        let mut code = [0u8; 4];
        code[..b.len()].copy_from_slice(b);
        Some(Origin(code))
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(Self::MAX_LEN);
        // Only ASCII bytes are ever stored (see `new`), so this cannot fail;
        // the fallback keeps the function panic-free regardless.
        std::str::from_utf8(&self.0[..len]).unwrap_or("?")
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Origin({:?})", self.as_str())
    }
}

/// One flight: the columns of `flights.csv` the job needs (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Flight {
    /// Departure airport (column `origin`).
    pub origin: Origin,
    /// Scheduled departure hour, UTC epoch milliseconds (column
    /// `time_hour`); the event time.
    pub time_hour_ms: i64,
    /// Departure delay in minutes (column `dep_delay`); `None` for `NA`,
    /// which marks a cancelled flight.
    pub dep_delay: Option<i64>,
}

impl RecordSize for Flight {}

/// One hourly weather observation: the columns of `weather.csv` the job
/// needs (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weather {
    /// Airport (column `origin`).
    pub origin: Origin,
    /// Observation hour, UTC epoch milliseconds (column `time_hour`); the
    /// event time.
    pub time_hour_ms: i64,
    /// Visibility in miles (column `visib`); `None` for `NA`.
    pub visib: Option<f64>,
}

impl RecordSize for Weather {}

/// The visibility bucket of a flight. Variants are declared in byte order
/// of their names, so the derived order is the output's sort order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Visibility {
    /// `visib` ≥ 5.0 miles.
    Good,
    /// `visib` < 1.0 mile.
    Low,
    /// 1.0 ≤ `visib` < 5.0 miles.
    Reduced,
    /// No weather row for the flight's origin and hour (or its `visib` is
    /// `NA`).
    Unknown,
}

impl Visibility {
    /// All buckets, in output order.
    pub const ALL: [Visibility; 4] = [
        Visibility::Good,
        Visibility::Low,
        Visibility::Reduced,
        Visibility::Unknown,
    ];

    /// The bucket of a weather row's `visib` (miles): < 1.0 `low`, < 5.0
    /// `reduced`, otherwise `good` (the job spec). A weather row whose
    /// `visib` is `NA` tells nothing about visibility, so `None` is
    /// `unknown`, as a missing weather row is (our choice; the bundled data
    /// has no `NA` visib).
    pub fn from_visib(visib: Option<f64>) -> Visibility {
        match visib {
            None => Visibility::Unknown,
            Some(v) if v < 1.0 => Visibility::Low,
            Some(v) if v < 5.0 => Visibility::Reduced,
            Some(_) => Visibility::Good,
        }
    }

    /// The bucket's name as written in `by_visibility.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Visibility::Good => "good",
            Visibility::Low => "low",
            Visibility::Reduced => "reduced",
            Visibility::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Visibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A flight with its visibility bucket: the output of the join (40 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EnrichedFlight {
    /// The flight.
    pub flight: Flight,
    /// The bucket of the weather row of the same origin and hour.
    pub visibility: Visibility,
}

impl RecordSize for EnrichedFlight {}

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d`.
///
/// Formula: Howard Hinnant's public-domain `days_from_civil`
/// (<https://howardhinnant.github.io/date_algorithms.html>). `m` must be in
/// 1..=12 and `d` in 1..=31 (not checked here; see [`parse_utc_timestamp_ms`]).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (m, d) = (i64::from(m), i64::from(d));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // [0, 399]
    let mp = if m > 2 { m - 3 } else { m + 9 }; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
                                                     // 719_468 = days from 0000-03-01 to 1970-01-01.
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date `(year, month 1..=12, day 1..=31)` of
/// `days` since 1970-01-01.
///
/// Formula: Howard Hinnant's public-domain `civil_from_days`
/// (<https://howardhinnant.github.io/date_algorithms.html>). Valid for any
/// `days` within ±2^60 (no overflow).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // 719_468 = days from 0000-03-01 to 1970-01-01; 146_097 = days per
    // 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    // The ranges above make these conversions lossless.
    (y, m as u32, d as u32)
}

/// `days` since 1970-01-01 as `YYYY-MM-DD` (the year zero-padded to 4
/// digits; years outside 0..=9999 print with more digits or a sign).
pub fn format_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The UTC day (days since 1970-01-01) of an epoch-millisecond time,
/// rounding toward negative infinity (the tumbling window aligned to UTC
/// midnight that contains it).
pub fn utc_day(epoch_ms: i64) -> i64 {
    epoch_ms.div_euclid(MS_PER_DAY)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses a UTC timestamp `YYYY-MM-DDTHH:MM:SSZ` (the `time_hour` format of
/// the bundled files, RFC 3339 restricted to UTC and whole seconds) into
/// epoch milliseconds.
///
/// Errors: a message saying what is wrong (format, or an out-of-range
/// month, day, hour, minute or second).
pub fn parse_utc_timestamp_ms(s: &str) -> Result<i64, String> {
    const EXPECTED: &str = "expected a UTC time like 2013-01-01T05:00:00Z";
    let b = s.as_bytes();
    // Byte offsets of the separators in `YYYY-MM-DDTHH:MM:SSZ` (20 bytes).
    let shape_ok = b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    let num = |from: usize, to: usize| -> Option<u32> {
        let digits = b.get(from..to)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0u32, |acc, &c| acc * 10 + u32::from(c - b'0')),
        )
    };
    let parts = (
        num(0, 4),
        num(5, 7),
        num(8, 10),
        num(11, 13),
        num(14, 16),
        num(17, 19),
    );
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(sec)) = parts else {
        return Err(format!("{EXPECTED}, found `{}`", shown(s)));
    };
    if !shape_ok {
        return Err(format!("{EXPECTED}, found `{}`", shown(s)));
    }
    let y = i64::from(y);
    if !(1..=12).contains(&mo) {
        return Err(format!("month {mo} out of range in `{}`", shown(s)));
    }
    if d == 0 || d > days_in_month(y, mo) {
        return Err(format!("day {d} out of range in `{}`", shown(s)));
    }
    if h > 23 || mi > 59 || sec > 59 {
        return Err(format!("time of day out of range in `{}`", shown(s)));
    }
    let days = days_from_civil(y, mo, d);
    let secs = i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(sec);
    Ok(days * MS_PER_DAY + secs * 1000)
}

/// `s` cut to at most 40 characters for an error message, so that a
/// garbage field does not flood the terminal.
fn shown(s: &str) -> String {
    const MAX_CHARS: usize = 40;
    if s.chars().count() <= MAX_CHARS {
        s.to_string()
    } else {
        let cut: String = s.chars().take(MAX_CHARS).collect();
        format!("{cut}…")
    }
}

// ---------------------------------------------------------------------------
// CSV reading
// ---------------------------------------------------------------------------

fn parse_origin(fields: &Fields<'_>, i: usize) -> Result<Origin, String> {
    let s = fields.get(i)?;
    Origin::new(s).ok_or_else(|| {
        format!(
            "column `{}`: expected 1 to 4 ASCII letters or digits, found `{}`",
            fields.name(i),
            shown(s)
        )
    })
}

fn parse_time(fields: &Fields<'_>, i: usize) -> Result<i64, String> {
    parse_utc_timestamp_ms(fields.get(i)?).map_err(|e| format!("column `{}`: {e}", fields.name(i)))
}

/// `NA` is the data set's marker of a missing value.
const NA: &str = "NA";

impl CsvRecord for Flight {
    const COLUMNS: &'static [&'static str] = &["origin", "time_hour", "dep_delay"];

    fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
        let origin = parse_origin(fields, 0)?;
        let time_hour_ms = parse_time(fields, 1)?;
        let raw = fields.get(2)?;
        let dep_delay = if raw == NA {
            None
        } else {
            Some(raw.parse::<i64>().map_err(|_| {
                format!(
                    "column `dep_delay`: expected a whole number of minutes or NA, found `{}`",
                    shown(raw)
                )
            })?)
        };
        Ok(Flight {
            origin,
            time_hour_ms,
            dep_delay,
        })
    }
}

impl CsvRecord for Weather {
    const COLUMNS: &'static [&'static str] = &["origin", "time_hour", "visib"];

    fn from_fields(fields: &Fields<'_>) -> Result<Self, String> {
        let origin = parse_origin(fields, 0)?;
        let time_hour_ms = parse_time(fields, 1)?;
        let raw = fields.get(2)?;
        let visib = if raw == NA {
            None
        } else {
            match raw.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Some(v),
                _ => {
                    return Err(format!(
                        "column `visib`: expected a non-negative number of miles or NA, found `{}`",
                        shown(raw)
                    ))
                }
            }
        };
        Ok(Weather {
            origin,
            time_hour_ms,
            visib,
        })
    }
}

/// The reader of `flights.csv`.
pub type FlightReader = CsvRecordReader<Flight>;
/// The reader of `weather.csv`.
pub type WeatherReader = CsvRecordReader<Weather>;

// ---------------------------------------------------------------------------
// Locating the bundled data
// ---------------------------------------------------------------------------

/// One of the bundled input files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundledFile {
    /// `data/nycflights13/flights.csv.gz`.
    Flights,
    /// `data/nycflights13/weather.csv.gz`.
    Weather,
}

impl BundledFile {
    /// The file's name in [`BUNDLED_DATA_DIR`].
    pub fn file_name(self) -> &'static str {
        match self {
            BundledFile::Flights => "flights.csv.gz",
            BundledFile::Weather => "weather.csv.gz",
        }
    }

    /// The command-line flag that gives its path instead.
    pub fn flag(self) -> &'static str {
        match self {
            BundledFile::Flights => "--flights",
            BundledFile::Weather => "--weather",
        }
    }

    /// Its path relative to a repository root.
    pub fn relative_path(self) -> PathBuf {
        Path::new(BUNDLED_DATA_DIR).join(self.file_name())
    }
}

/// Finds a bundled data file: in the current directory and each of its
/// parents, then in the repository this crate was built from
/// (`CARGO_MANIFEST_DIR/..`).
///
/// Errors: [`FlightsError::DataNotFound`], naming the flag to pass.
pub fn find_bundled(file: BundledFile) -> Result<PathBuf, FlightsError> {
    let cwd = std::env::current_dir().ok();
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    find_bundled_from(file, cwd.as_deref(), Some(&built_from))
}

/// [`find_bundled`] with explicit roots: `start` and each of its parents,
/// then `fallback_root`.
///
/// Errors: [`FlightsError::DataNotFound`], naming the flag to pass.
pub fn find_bundled_from(
    file: BundledFile,
    start: Option<&Path>,
    fallback_root: Option<&Path>,
) -> Result<PathBuf, FlightsError> {
    let rel = file.relative_path();
    let mut searched = Vec::new();
    if let Some(start) = start {
        for dir in start.ancestors() {
            let candidate = dir.join(&rel);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        searched.push(format!("{} and its parents", start.display()));
    }
    if let Some(root) = fallback_root {
        let candidate = root.join(&rel);
        if candidate.is_file() {
            return Ok(candidate);
        }
        searched.push(root.display().to_string());
    }
    Err(FlightsError::DataNotFound {
        file: rel,
        flag: file.flag(),
        searched: if searched.is_empty() {
            "nowhere".to_string()
        } else {
            searched.join("; ")
        },
    })
}

// ---------------------------------------------------------------------------
// Aggregates and output rows
// ---------------------------------------------------------------------------

/// Departure-delay statistics of a group of flights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DelayStats {
    /// Flights with a `dep_delay`.
    pub departed: u64,
    /// Flights whose `dep_delay` is `NA`.
    pub cancelled: u64,
    /// Sum of `dep_delay` over the departed flights, minutes. An `i128`
    /// (saturating) so that no input can overflow it.
    pub dep_delay_sum_min: i128,
}

impl DelayStats {
    /// Counts one flight with this `dep_delay`.
    pub fn add(&mut self, dep_delay: Option<i64>) {
        match dep_delay {
            Some(d) => {
                self.departed += 1;
                self.dep_delay_sum_min = self.dep_delay_sum_min.saturating_add(i128::from(d));
            }
            None => self.cancelled += 1,
        }
    }

    /// Adds another group's statistics to these.
    pub fn merge(&mut self, other: &DelayStats) {
        self.departed += other.departed;
        self.cancelled += other.cancelled;
        self.dep_delay_sum_min = self
            .dep_delay_sum_min
            .saturating_add(other.dep_delay_sum_min);
    }

    /// All flights of the group.
    pub fn flights(&self) -> u64 {
        self.departed + self.cancelled
    }

    /// The mean delay as printed in the outputs: see [`format_mean`].
    pub fn mean_text(&self) -> String {
        format_mean(self.dep_delay_sum_min, self.departed)
    }
}

/// `format!("{:.3}", sum as f64 / count as f64)` (the job spec's
/// formatting, computed from the integer sum and count), or the empty
/// string when `count` is 0.
pub fn format_mean(sum: i128, count: u64) -> String {
    if count == 0 {
        String::new()
    } else {
        format!("{:.3}", sum as f64 / count as f64)
    }
}

/// One row of `by_visibility.csv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByVisibilityRow {
    /// The airport.
    pub origin: Origin,
    /// The bucket.
    pub visibility: Visibility,
    /// Its flights.
    pub stats: DelayStats,
}

impl RecordSize for ByVisibilityRow {}

/// One row of `daily.csv`: a tumbling 24-hour event-time window aligned to
/// UTC midnight, for one origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyRow {
    /// The airport.
    pub origin: Origin,
    /// The window's UTC day, days since 1970-01-01 ([`utc_day`]).
    pub day: i64,
    /// Its flights.
    pub stats: DelayStats,
}

impl RecordSize for DailyRow {}

/// The exact text of `by_visibility.csv`: the header, then one LF-ended
/// line per row with flights, sorted by origin then bucket name (byte
/// order). The mean is [`format_mean`] (empty when every flight of the
/// group was cancelled, as for `daily.csv`). Rows must have distinct
/// (origin, bucket) keys; rows with no flights are left out.
pub fn render_by_visibility_csv(rows: &[ByVisibilityRow]) -> String {
    let mut rows: Vec<&ByVisibilityRow> = rows.iter().filter(|r| r.stats.flights() > 0).collect();
    rows.sort_by(|a, b| (a.origin, a.visibility.name()).cmp(&(b.origin, b.visibility.name())));
    let mut out = String::with_capacity(64 * (rows.len() + 1));
    out.push_str(BY_VISIBILITY_HEADER);
    out.push('\n');
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{}\n",
            r.origin,
            r.visibility.name(),
            r.stats.departed,
            r.stats.cancelled,
            r.stats.mean_text()
        ));
    }
    out
}

/// The exact text of `daily.csv`: the header, then one LF-ended line per
/// row with flights, sorted by origin then date; `date` is `YYYY-MM-DD`
/// and the mean is [`format_mean`] (empty when nothing departed). Rows must
/// have distinct (origin, day) keys; rows with no flights are left out.
pub fn render_daily_csv(rows: &[DailyRow]) -> String {
    let mut rows: Vec<&DailyRow> = rows.iter().filter(|r| r.stats.flights() > 0).collect();
    rows.sort_by_key(|r| (r.origin, r.day));
    let mut out = String::with_capacity(48 * (rows.len() + 1));
    out.push_str(DAILY_HEADER);
    out.push('\n');
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{}\n",
            r.origin,
            format_date(r.day),
            r.stats.departed,
            r.stats.cancelled,
            r.stats.mean_text()
        ));
    }
    out
}

/// Writes `dir/by_visibility.csv` and `dir/daily.csv` (creating `dir`),
/// as [`render_by_visibility_csv`] and [`render_daily_csv`] render them.
///
/// Errors: [`FlightsError::Write`] naming the directory or file.
pub fn write_outputs(
    dir: &Path,
    by_visibility: &[ByVisibilityRow],
    daily: &[DailyRow],
) -> Result<(), FlightsError> {
    std::fs::create_dir_all(dir).map_err(|source| FlightsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    for (name, text) in [
        (BY_VISIBILITY_FILE, render_by_visibility_csv(by_visibility)),
        (DAILY_FILE, render_daily_csv(daily)),
    ] {
        let path = dir.join(name);
        File::create(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
            .map_err(|source| FlightsError::Write { path, source })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Reference computation
// ---------------------------------------------------------------------------

/// The job's answer computed in plain Rust over all rows at once, without
/// the engine: the oracle the engine job is compared with.
pub mod reference {
    use super::*;

    /// Joins every flight with the weather row of the same origin and
    /// `time_hour` (the first such row in `weather` order when there are
    /// several; the bundled data has none), buckets it, and aggregates.
    ///
    /// Returns the rows of `by_visibility.csv` sorted by origin then bucket
    /// name, and the rows of `daily.csv` (windows = UTC days of
    /// `time_hour`) sorted by origin then day; only groups with flights.
    /// Cost: O((flights + weather) log groups) time, O(weather) memory.
    pub fn compute(
        flights: &[Flight],
        weather: &[Weather],
    ) -> (Vec<ByVisibilityRow>, Vec<DailyRow>) {
        let mut visib: HashMap<(Origin, i64), Option<f64>> = HashMap::with_capacity(weather.len());
        for w in weather {
            visib.entry((w.origin, w.time_hour_ms)).or_insert(w.visib);
        }
        let mut by_vis: BTreeMap<(Origin, &'static str, Visibility), DelayStats> = BTreeMap::new();
        let mut daily: BTreeMap<(Origin, i64), DelayStats> = BTreeMap::new();
        for f in flights {
            let bucket = match visib.get(&(f.origin, f.time_hour_ms)) {
                Some(&v) => Visibility::from_visib(v),
                None => Visibility::Unknown,
            };
            by_vis
                .entry((f.origin, bucket.name(), bucket))
                .or_default()
                .add(f.dep_delay);
            daily
                .entry((f.origin, utc_day(f.time_hour_ms)))
                .or_default()
                .add(f.dep_delay);
        }
        let by_vis = by_vis
            .into_iter()
            .map(|((origin, _, visibility), stats)| ByVisibilityRow {
                origin,
                visibility,
                stats,
            })
            .collect();
        let daily = daily
            .into_iter()
            .map(|((origin, day), stats)| DailyRow { origin, day, stats })
            .collect();
        (by_vis, daily)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calendar facts (days since 1970-01-01), checked with Python's
    /// `datetime.date` arithmetic.
    #[test]
    fn days_from_civil_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2013, 1, 1), 15_706);
        assert_eq!(days_from_civil(2014, 1, 1), 16_071);
    }

    /// Walks the calendar one day at a time with a naive month table and
    /// checks both conversions against it, 1600-03-01 .. 2400-12-31.
    #[test]
    fn civil_conversions_match_a_naive_calendar_walk() {
        let (mut y, mut m, mut d) = (1600i64, 3u32, 1u32);
        let mut days = days_from_civil(1600, 3, 1);
        while y <= 2400 {
            assert_eq!(civil_from_days(days), (y, m, d), "days {days}");
            assert_eq!(days_from_civil(y, m, d), days);
            days += 1;
            d += 1;
            if d > days_in_month(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn format_date_pads() {
        assert_eq!(format_date(days_from_civil(2014, 1, 1)), "2014-01-01");
        assert_eq!(format_date(days_from_civil(987, 3, 9)), "0987-03-09");
    }

    #[test]
    fn utc_day_rounds_down_for_negative_times() {
        assert_eq!(utc_day(0), 0);
        assert_eq!(utc_day(MS_PER_DAY - 1), 0);
        assert_eq!(utc_day(-1), -1);
    }

    #[test]
    fn timestamps_parse_and_reject() {
        let ms = parse_utc_timestamp_ms("2013-01-01T10:00:00Z").unwrap();
        assert_eq!(
            ms,
            days_from_civil(2013, 1, 1) * MS_PER_DAY + 10 * MS_PER_HOUR
        );
        assert_eq!(parse_utc_timestamp_ms("1970-01-01T00:00:01Z"), Ok(1000));
        for bad in [
            "",
            "2013-01-01 10:00:00",
            "2013-01-01T10:00:00",
            "2013-13-01T10:00:00Z",
            "2013-02-29T10:00:00Z",
            "2013-01-01T24:00:00Z",
            "2013-01-01T10:60:00Z",
            "2013-1-01T10:00:00Z",
            "+013-01-01T10:00:00Z",
            "2013-01-01T10:00:00Zé",
        ] {
            let err = parse_utc_timestamp_ms(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(parse_utc_timestamp_ms("2012-02-29T00:00:00Z").is_ok());
    }

    #[test]
    fn origin_codes() {
        let jfk = Origin::new("JFK").unwrap();
        assert_eq!(jfk.as_str(), "JFK");
        assert_eq!(jfk.to_string(), "JFK");
        assert!(Origin::new("").is_none());
        assert!(Origin::new("KJFKX").is_none());
        assert!(Origin::new("J K").is_none());
        assert!(Origin::new("JFÉ").is_none());
        // Byte order of the codes, with a prefix first.
        let mut codes: Vec<Origin> = ["LGA", "EWR", "JF", "JFK", "A1"]
            .iter()
            .map(|s| Origin::new(s).unwrap())
            .collect();
        codes.sort();
        let names: Vec<&str> = codes.iter().map(Origin::as_str).collect();
        assert_eq!(names, ["A1", "EWR", "JF", "JFK", "LGA"]);
    }

    #[test]
    fn visibility_buckets_and_order() {
        assert_eq!(Visibility::from_visib(Some(0.0)), Visibility::Low);
        assert_eq!(Visibility::from_visib(Some(0.99)), Visibility::Low);
        assert_eq!(Visibility::from_visib(Some(1.0)), Visibility::Reduced);
        assert_eq!(Visibility::from_visib(Some(4.99)), Visibility::Reduced);
        assert_eq!(Visibility::from_visib(Some(5.0)), Visibility::Good);
        assert_eq!(Visibility::from_visib(None), Visibility::Unknown);
        let mut by_name = Visibility::ALL;
        by_name.sort_by_key(|v| v.name());
        assert_eq!(by_name, Visibility::ALL, "declaration order = name order");
    }

    #[test]
    fn mean_formatting() {
        assert_eq!(format_mean(0, 0), "");
        assert_eq!(format_mean(10, 4), "2.500");
        assert_eq!(format_mean(-1, 3), "-0.333");
        assert_eq!(format_mean(2, 3), "0.667");
    }

    #[test]
    fn record_sizes_are_fixed() {
        let f = Flight {
            origin: Origin::new("EWR").unwrap(),
            time_hour_ms: 0,
            dep_delay: None,
        };
        let w = Weather {
            origin: f.origin,
            time_hour_ms: 0,
            visib: Some(1.0),
        };
        // 32 bytes each (the documented layouts), whatever the content.
        assert_eq!(Flight::batch_size_bytes(&[f; 3]), 3 * 32);
        assert_eq!(w.size_bytes(), 32);
        let e = EnrichedFlight {
            flight: f,
            visibility: Visibility::Low,
        };
        assert_eq!(e.size_bytes(), 40);
    }

    #[test]
    fn bundled_not_found_names_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let err = find_bundled_from(BundledFile::Weather, Some(dir.path()), None).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("--weather PATH"), "{msg}");
        assert!(msg.contains("weather.csv.gz"), "{msg}");
        let err = find_bundled_from(BundledFile::Flights, None, Some(dir.path())).unwrap_err();
        assert!(err.to_string().contains("--flights PATH"), "{err}");
    }

    #[test]
    fn bundled_found_from_a_subdirectory() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join(BUNDLED_DATA_DIR);
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("flights.csv.gz"), b"x").unwrap();
        let sub = root.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let found = find_bundled_from(BundledFile::Flights, Some(&sub), None).unwrap();
        assert_eq!(found, data.join("flights.csv.gz"));
    }
}
