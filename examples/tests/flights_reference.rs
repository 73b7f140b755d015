//! Tests of the flights job's CSV reader, writers and reference computation
//! (`lockgate_examples::flights`).

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use lockgate_examples::flights::{
    find_bundled, read_all, reference, render_by_visibility_csv, render_daily_csv, BadRows,
    BundledFile, CsvError, CsvRecordReader, DelayStats, Flight, FlightReader, Origin, Visibility,
    Weather, WeatherReader, BY_VISIBILITY_HEADER, DAILY_HEADER, MS_PER_DAY, MS_PER_HOUR,
};

fn write_plain(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Gzips `text` into `dir/name`; the name deliberately does not end in
/// `.gz` in some tests, as detection must use the magic bytes.
fn write_gzip(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    enc.write_all(text.as_bytes()).unwrap();
    enc.finish().unwrap();
    path
}

fn origin(s: &str) -> Origin {
    Origin::new(s).unwrap()
}

/// Epoch ms of 2013-01-`day_of_month` `hour`:00 UTC, counted from
/// 2013-01-01 = 15_706 days after 1970-01-01 (a calendar fact), not with
/// the module's own date code, so the parser is checked independently.
fn jan_2013(day_of_month: i64, hour: i64) -> i64 {
    (15_706 + day_of_month - 1) * MS_PER_DAY + hour * MS_PER_HOUR
}

const FLIGHTS_SHUFFLED: &str = "\
dep_delay,carrier,time_hour,origin
5,UA,2013-01-01T10:00:00Z,EWR
NA,AA,2013-01-01T23:00:00Z,JFK
-3,B6,2013-01-02T00:00:00Z,LGA
";

fn expected_shuffled() -> Vec<Flight> {
    vec![
        Flight {
            origin: origin("EWR"),
            time_hour_ms: jan_2013(1, 10),
            dep_delay: Some(5),
        },
        Flight {
            origin: origin("JFK"),
            time_hour_ms: jan_2013(1, 23),
            dep_delay: None,
        },
        Flight {
            origin: origin("LGA"),
            time_hour_ms: jan_2013(2, 0),
            dep_delay: Some(-3),
        },
    ]
}

#[test]
fn header_in_any_order_plain_and_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let plain = write_plain(dir.path(), "f.csv", FLIGHTS_SHUFFLED);
    let gz = write_gzip(
        dir.path(),
        "f2.csv",
        &FLIGHTS_SHUFFLED.replace('\n', "\r\n"),
    );
    // Same content, gzip and CRLF, under a name without `.gz`.
    let gz_named = dir.path().join("flights_no_suffix");
    std::fs::rename(&gz, &gz_named).unwrap();
    for path in [&plain, &gz_named] {
        let (rows, skipped) = read_all::<Flight>(path, BadRows::Fail).unwrap();
        assert_eq!(rows, expected_shuffled(), "{}", path.display());
        assert_eq!(skipped, 0);
    }
    // Sanity: the gzip file really is compressed (not plain text).
    let mut head = [0u8; 2];
    std::fs::File::open(&gz_named)
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert_eq!(head, [0x1f, 0x8b]);

    let weather = "time_hour,visib,origin,temp\n2013-01-01T10:00:00Z,0.5,EWR,40\n2013-01-01T10:00:00Z,NA,JFK,41\n";
    let wpath = write_gzip(dir.path(), "w.csv.gz", weather);
    let (rows, _) = read_all::<Weather>(&wpath, BadRows::Fail).unwrap();
    assert_eq!(
        rows,
        vec![
            Weather {
                origin: origin("EWR"),
                time_hour_ms: jan_2013(1, 10),
                visib: Some(0.5)
            },
            Weather {
                origin: origin("JFK"),
                time_hour_ms: jan_2013(1, 10),
                visib: None
            },
        ]
    );
}

#[test]
fn missing_column_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_plain(
        dir.path(),
        "f.csv",
        "origin,time_hour,carrier\nEWR,2013-01-01T10:00:00Z,UA\n",
    );
    let err = FlightReader::open(&path, BadRows::Fail).err().unwrap();
    assert!(
        matches!(
            err,
            CsvError::MissingColumn {
                column: "dep_delay",
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("`dep_delay`"), "{msg}");
    assert!(msg.contains("f.csv"), "{msg}");
    assert!(msg.contains("line 1"), "{msg}");

    let dup = write_plain(dir.path(), "d.csv", "origin,time_hour,visib,visib\n");
    let err = WeatherReader::open(&dup, BadRows::Fail).err().unwrap();
    assert!(
        matches!(
            err,
            CsvError::DuplicateColumn {
                column: "visib",
                ..
            }
        ),
        "{err:?}"
    );

    let empty = write_plain(dir.path(), "e.csv", "");
    let err = WeatherReader::open(&empty, BadRows::Fail).err().unwrap();
    assert!(matches!(err, CsvError::EmptyFile { .. }), "{err:?}");

    let err = WeatherReader::open(dir.path().join("nope.csv"), BadRows::Fail)
        .err()
        .unwrap();
    assert!(matches!(err, CsvError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.csv"), "{err}");
}

/// Rows 1..=6 of the data are lines 2..=7; rows 2 (line 3, bad delay),
/// 4 (line 5, wrong field count) and 6 (line 7, bad time) are malformed.
const WITH_BAD_ROWS: &str = "\
origin,time_hour,dep_delay
EWR,2013-01-01T10:00:00Z,1
JFK,2013-01-01T10:00:00Z,soon
LGA,2013-01-01T11:00:00Z,2
EWR,2013-01-01T11:00:00Z
JFK,2013-01-01T12:00:00Z,NA
LGA,2013-01-01 12:00,3
EWR,2013-01-01T13:00:00Z,4
";

#[test]
fn malformed_row_error_has_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_gzip(dir.path(), "bad.csv.gz", WITH_BAD_ROWS);
    let mut reader = FlightReader::open(&path, BadRows::Fail).unwrap();
    assert_eq!(reader.next().unwrap().unwrap().dep_delay, Some(1));
    let err = reader.next().unwrap().unwrap_err();
    match &err {
        CsvError::BadRow { line, reason, .. } => {
            assert_eq!(*line, 3);
            assert!(
                reason.contains("dep_delay") && reason.contains("soon"),
                "{reason}"
            );
        }
        other => panic!("expected BadRow, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("bad.csv.gz: line 3:"), "{msg}");
    // The reader is finished after an error.
    assert!(reader.next().is_none());

    // Each kind of malformed row, alone after a good row (so on line 3).
    for (bad_line, fragment) in [
        (
            "EWR,2013-01-01T11:00:00Z",
            "expected 3 fields as in the header, found 2",
        ),
        (
            "EWR,2013-01-01T11:00:00Z,1,2",
            "expected 3 fields as in the header, found 4",
        ),
        ("LGA,2013-01-01 12:00,3", "column `time_hour`"),
        ("LGA,2013-02-30T12:00:00Z,3", "day 30 out of range"),
        ("LGAXX,2013-01-01T12:00:00Z,3", "column `origin`"),
        ("LGA,2013-01-01T12:00:00Z,1.5", "column `dep_delay`"),
        ("LGA,2013-01-01T12:00:00Z,", "column `dep_delay`"),
    ] {
        let text = format!("origin,time_hour,dep_delay\nEWR,2013-01-01T10:00:00Z,1\n{bad_line}\n");
        let path = write_plain(dir.path(), "one_bad.csv", &text);
        let err = read_all::<Flight>(&path, BadRows::Fail).unwrap_err();
        assert!(
            matches!(&err, CsvError::BadRow { line: 3, reason, .. } if reason.contains(fragment)),
            "{bad_line}: {err:?}"
        );
    }

    // Invalid UTF-8 in a needed field is a bad row, not a read error.
    let path = dir.path().join("latin1.csv");
    std::fs::write(
        &path,
        b"origin,time_hour,dep_delay\nEWR,2013-01-01T10:00:00Z,1\nEW\xc9,2013-01-01T10:00:00Z,1\n",
    )
    .unwrap();
    let err = read_all::<Flight>(&path, BadRows::Fail).unwrap_err();
    assert!(
        matches!(&err, CsvError::BadRow { line: 3, reason, .. } if reason.contains("UTF-8")),
        "{err:?}"
    );
}

/// A gzip file cut short is a read error (not a bad row, even when
/// skipping) and names the file.
#[test]
fn truncated_gzip_is_a_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("origin,time_hour,dep_delay\n");
    for i in 0..2000 {
        text.push_str(&format!("EWR,2013-01-01T10:00:00Z,{i}\n"));
    }
    let full = write_gzip(dir.path(), "full.gz", &text);
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.path().join("cut.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = read_all::<Flight>(&cut, BadRows::Skip).unwrap_err();
    assert!(matches!(err, CsvError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("cut.gz"), "{err}");
}

#[test]
fn skip_mode_skips_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_plain(dir.path(), "bad.csv", WITH_BAD_ROWS);
    let mut reader = FlightReader::open(&path, BadRows::Skip).unwrap();
    let delays: Vec<Option<i64>> = reader.by_ref().map(|r| r.unwrap().dep_delay).collect();
    assert_eq!(delays, [Some(1), Some(2), None, Some(4)]);
    assert_eq!(reader.skipped(), 3);
    assert_eq!(reader.position(), 7, "all data rows, good and bad");
}

#[test]
fn resume_from_every_position_matches_reading_through() {
    let dir = tempfile::tempdir().unwrap();
    for (path, bad_rows) in [
        (
            write_plain(dir.path(), "p.csv", WITH_BAD_ROWS),
            BadRows::Skip,
        ),
        (
            write_gzip(dir.path(), "g.csv.gz", WITH_BAD_ROWS),
            BadRows::Skip,
        ),
        (
            write_gzip(dir.path(), "ok.gz", FLIGHTS_SHUFFLED),
            BadRows::Fail,
        ),
    ] {
        // Read through, noting each record's data row index.
        let mut through = Vec::new();
        let mut reader = FlightReader::open(&path, bad_rows).unwrap();
        while let Some(r) = reader.next_record().unwrap() {
            through.push((reader.position() - 1, r));
        }
        let end = reader.position();
        assert!(!through.is_empty());
        for p in 0..=end {
            let mut resumed = FlightReader::open_at(&path, bad_rows, p).unwrap();
            assert_eq!(resumed.position(), p);
            let rest: Vec<Flight> = resumed.by_ref().map(Result::unwrap).collect();
            let expected: Vec<Flight> = through
                .iter()
                .filter(|(row, _)| *row >= p)
                .map(|(_, r)| *r)
                .collect();
            assert_eq!(rest, expected, "{} at {p}", path.display());
            assert_eq!(resumed.skipped(), reader.skipped(), "skipped restored");
            assert_eq!(resumed.position(), end);
        }
        let err = FlightReader::open_at(&path, bad_rows, end + 1)
            .err()
            .unwrap();
        assert!(
            matches!(err, CsvError::PositionBeyondEnd { position, rows, .. } if position == end + 1 && rows == end),
            "{err:?}"
        );
    }
}

/// A tiny dataset whose answer is worked out by hand below.
///
/// Weather (2013-01-01): EWR 10:00 visib 0.5 (low); EWR 11:00 visib 3
/// (reduced); JFK 23:00 visib 10 (good); a second EWR 10:00 row with visib
/// 10 that must be ignored (the first row of a key wins).
///
/// Flights:
/// 1. EWR 01-01 10:00, delay 10  → low,     day 2013-01-01
/// 2. EWR 01-01 10:00, delay NA  → low,     cancelled
/// 3. EWR 01-01 11:00, delay -4  → reduced
/// 4. JFK 01-01 23:00, delay 7   → good,    day 2013-01-01 (23:00 UTC edge)
/// 5. JFK 01-02 00:00, delay 2   → unknown (no weather), day 2013-01-02
/// 6. LGA 01-01 10:00, delay NA  → unknown, cancelled, day 2013-01-01
///
/// by_visibility (origin, bucket: flights, cancelled, mean):
/// EWR low: 2, 1, 10/1 = 10.000; EWR reduced: 1, 0, -4.000;
/// JFK good: 1, 0, 7.000; JFK unknown: 1, 0, 2.000;
/// LGA unknown: 1, 1, empty (nothing departed).
///
/// daily (origin, date: departed, cancelled, mean):
/// EWR 2013-01-01: 2, 1, (10 - 4)/2 = 3.000; JFK 2013-01-01: 1, 0, 7.000;
/// JFK 2013-01-02: 1, 0, 2.000; LGA 2013-01-01: 0, 1, empty.
#[test]
fn reference_on_a_hand_made_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let flights = write_plain(
        dir.path(),
        "flights.csv",
        "\
time_hour,origin,dep_delay
2013-01-01T10:00:00Z,EWR,10
2013-01-01T10:00:00Z,EWR,NA
2013-01-01T11:00:00Z,EWR,-4
2013-01-01T23:00:00Z,JFK,7
2013-01-02T00:00:00Z,JFK,2
2013-01-01T10:00:00Z,LGA,NA
",
    );
    let weather = write_gzip(
        dir.path(),
        "weather.csv.gz",
        "\
origin,visib,time_hour
EWR,0.5,2013-01-01T10:00:00Z
EWR,3,2013-01-01T11:00:00Z
JFK,10,2013-01-01T23:00:00Z
EWR,10,2013-01-01T10:00:00Z
",
    );
    let (f, _) = read_all::<Flight>(&flights, BadRows::Fail).unwrap();
    let (w, _) = read_all::<Weather>(&weather, BadRows::Fail).unwrap();
    let (by_vis, daily) = reference::compute(&f, &w);

    let stats = |departed, cancelled, dep_delay_sum_min| DelayStats {
        departed,
        cancelled,
        dep_delay_sum_min,
    };
    let got: Vec<(&str, Visibility, DelayStats)> = by_vis
        .iter()
        .map(|r| (r.origin.as_str(), r.visibility, r.stats))
        .collect();
    assert_eq!(
        got,
        vec![
            ("EWR", Visibility::Low, stats(1, 1, 10)),
            ("EWR", Visibility::Reduced, stats(1, 0, -4)),
            ("JFK", Visibility::Good, stats(1, 0, 7)),
            ("JFK", Visibility::Unknown, stats(1, 0, 2)),
            ("LGA", Visibility::Unknown, stats(0, 1, 0)),
        ]
    );
    assert_eq!(
        render_by_visibility_csv(&by_vis),
        "origin,visibility,departed,cancelled,mean_dep_delay_min\n\
         EWR,low,1,1,10.000\n\
         EWR,reduced,1,0,-4.000\n\
         JFK,good,1,0,7.000\n\
         JFK,unknown,1,0,2.000\n\
         LGA,unknown,0,1,\n"
    );
    assert_eq!(
        render_daily_csv(&daily),
        "origin,date,departed,cancelled,mean_dep_delay_min\n\
         EWR,2013-01-01,2,1,3.000\n\
         JFK,2013-01-01,1,0,7.000\n\
         JFK,2013-01-02,1,0,2.000\n\
         LGA,2013-01-01,0,1,\n"
    );

    // The writers sort and drop empty rows themselves.
    let mut shuffled = by_vis.clone();
    shuffled.reverse();
    shuffled.push(lockgate_examples::flights::ByVisibilityRow {
        origin: origin("AAA"),
        visibility: Visibility::Good,
        stats: DelayStats::default(),
    });
    assert_eq!(
        render_by_visibility_csv(&shuffled),
        render_by_visibility_csv(&by_vis)
    );
    let mut daily_rev = daily.clone();
    daily_rev.reverse();
    assert_eq!(render_daily_csv(&daily_rev), render_daily_csv(&daily));

    // write_outputs writes the same bytes.
    let out = dir.path().join("out/nested");
    lockgate_examples::flights::write_outputs(&out, &by_vis, &daily).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("by_visibility.csv")).unwrap(),
        render_by_visibility_csv(&by_vis)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("daily.csv")).unwrap(),
        render_daily_csv(&daily)
    );
}

/// Counts rows and `NA` delays of the bundled flights file with the csv and
/// flate2 crates directly, independently of the module's reader.
fn count_independently(path: &Path) -> (u64, u64, BTreeSet<String>) {
    let file = std::fs::File::open(path).unwrap();
    let mut rdr = csv::Reader::from_reader(flate2::read::GzDecoder::new(file));
    let headers = rdr.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (delay, orig) = (col("dep_delay"), col("origin"));
    let (mut rows, mut na) = (0, 0);
    let mut origins = BTreeSet::new();
    for rec in rdr.records() {
        let rec = rec.unwrap();
        rows += 1;
        if &rec[delay] == "NA" {
            na += 1;
        }
        origins.insert(rec[orig].to_string());
    }
    (rows, na, origins)
}

/// Runs the reference over the whole bundled data set (336,776 flights,
/// 26,115 weather rows) and checks structural facts; about 2 s in a debug
/// build with the workspace's opt-level 2 dependencies. Also checks that
/// the committed golden outputs in `testdata/flights/` are what the
/// reference produces now (regenerate them with
/// `cargo run -p lockgate-operators --example flights_reference`).
#[test]
fn reference_on_the_bundled_data() {
    let flights_path = find_bundled(BundledFile::Flights).unwrap();
    let weather_path = find_bundled(BundledFile::Weather).unwrap();
    let (flights, skipped) = read_all::<Flight>(&flights_path, BadRows::Fail).unwrap();
    assert_eq!(skipped, 0);
    let (weather, _) = read_all::<Weather>(&weather_path, BadRows::Fail).unwrap();
    let (rows, na_delays, origins) = count_independently(&flights_path);
    assert_eq!(flights.len() as u64, rows);
    assert_eq!(rows, 336_776, "the data set's published flight count");
    let expected_origins: BTreeSet<String> = ["EWR", "JFK", "LGA"].map(String::from).into();
    assert_eq!(origins, expected_origins);

    let (by_vis, daily) = reference::compute(&flights, &weather);
    let got_origins: BTreeSet<String> = by_vis.iter().map(|r| r.origin.to_string()).collect();
    assert_eq!(got_origins, expected_origins);
    let total: u64 = by_vis.iter().map(|r| r.stats.flights()).sum();
    let cancelled: u64 = by_vis.iter().map(|r| r.stats.cancelled).sum();
    assert_eq!(total, rows);
    assert_eq!(cancelled, na_delays);
    let daily_total: u64 = daily.iter().map(|r| r.stats.flights()).sum();
    let daily_cancelled: u64 = daily.iter().map(|r| r.stats.cancelled).sum();
    assert_eq!(daily_total, rows);
    assert_eq!(daily_cancelled, na_delays);
    // Flights without a weather row for their hour are `unknown`.
    let weather_keys: std::collections::HashSet<(Origin, i64)> =
        weather.iter().map(|w| (w.origin, w.time_hour_ms)).collect();
    let unmatched = flights
        .iter()
        .filter(|f| !weather_keys.contains(&(f.origin, f.time_hour_ms)))
        .count() as u64;
    let unknown: u64 = by_vis
        .iter()
        .filter(|r| r.visibility == Visibility::Unknown)
        .map(|r| r.stats.flights())
        .sum();
    assert_eq!(unknown, unmatched);

    let by_vis_text = render_by_visibility_csv(&by_vis);
    let daily_text = render_daily_csv(&daily);
    assert!(by_vis_text.starts_with(&format!("{BY_VISIBILITY_HEADER}\n")));
    assert!(daily_text.starts_with(&format!("{DAILY_HEADER}\n")));
    assert!(!by_vis_text.contains('\r') && !daily_text.contains('\r'));
    // Late-evening local flights fall on the next UTC date.
    assert!(daily_text.contains(",2014-01-01,"), "2014 dates appear");
    // One daily row per (origin, date), each date well formed.
    let mut per_origin_days: HashMap<String, usize> = HashMap::new();
    for line in daily_text.lines().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 5, "{line}");
        assert_eq!(fields[1].len(), 10, "{line}");
        *per_origin_days.entry(fields[0].to_string()).or_default() += 1;
    }
    assert_eq!(per_origin_days.values().sum::<usize>(), daily.len());

    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/flights");
    assert_eq!(
        std::fs::read_to_string(golden.join("by_visibility.csv")).unwrap(),
        by_vis_text,
        "testdata/flights/by_visibility.csv is stale"
    );
    assert_eq!(
        std::fs::read_to_string(golden.join("daily.csv")).unwrap(),
        daily_text,
        "testdata/flights/daily.csv is stale"
    );
}

/// The position-based reader also works on the bundled gzip file: resuming
/// in the middle yields the same rows as reading through.
#[test]
fn resume_in_the_bundled_flights() {
    let path = find_bundled(BundledFile::Flights).unwrap();
    // An arbitrary position well inside the file.
    let at = 123_457;
    let mut through = CsvRecordReader::<Flight>::open(&path, BadRows::Fail).unwrap();
    for _ in 0..at {
        through.next_record().unwrap().unwrap();
    }
    let mut resumed = CsvRecordReader::<Flight>::open_at(&path, BadRows::Fail, at).unwrap();
    for _ in 0..1000 {
        assert_eq!(
            resumed.next_record().unwrap(),
            through.next_record().unwrap()
        );
    }
    assert_eq!(resumed.position(), through.position());
}

/// A stray quote is one bad value on its line, not the start of a field
/// that swallows every following line (which `--bad-rows skip` would then
/// drop as a single bad row).
#[test]
fn a_stray_quote_spoils_only_its_own_row() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
origin,time_hour,dep_delay
EWR,2013-01-01T10:00:00Z,1
JFK,2013-01-01T10:00:00Z,\"2
LGA,2013-01-01T11:00:00Z,3
EWR,2013-01-01T11:00:00Z,4
";
    let path = write_plain(dir.path(), "quote.csv", text);
    let mut reader = FlightReader::open(&path, BadRows::Skip).unwrap();
    let delays: Vec<Option<i64>> = reader.by_ref().map(|r| r.unwrap().dep_delay).collect();
    assert_eq!(delays, [Some(1), Some(3), Some(4)]);
    assert_eq!(reader.skipped(), 1);
    let err = read_all::<Flight>(&path, BadRows::Fail).unwrap_err();
    assert!(err.to_string().contains("line 3"), "{err}");
}
