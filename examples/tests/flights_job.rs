//! The flights job on the engine against the plain-Rust reference, on a
//! slice of the bundled data, with and without failures.

use lockgate::keys::key_to_subtask;
use lockgate::{
    testing::FailurePlan, testing::FailurePoint, CheckpointMode, JobConfig, RestartStrategy,
};
use lockgate_examples::flights::{
    find_bundled, read_all, reference, render_by_visibility_csv, render_daily_csv, BadRows,
    BundledFile, Flight, Weather,
};
use lockgate_examples::flights_job::{origin_hash, run, task_names, FlightsJobSpec};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flights in the slice: about 22 days of 2013 (the file is sorted by
/// `time_hour`), small enough for a debug build on 2 cores.
const SLICE_FLIGHTS: usize = 20_000;

/// Writes the first `n` flights (plain CSV) and the weather rows up to the
/// last of their hours (gzip, to read both formats) into `dir`.
fn write_slice(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    let open = |f: BundledFile| {
        let path = find_bundled(f).expect("the bundled data is in the repository");
        BufReader::new(flate2::read::MultiGzDecoder::new(
            std::fs::File::open(path).unwrap(),
        ))
    };
    let flights_path = dir.join("flights.csv");
    let mut last_hour = String::new();
    {
        let mut out = std::fs::File::create(&flights_path).unwrap();
        let mut lines = open(BundledFile::Flights).lines();
        let header = lines.next().unwrap().unwrap();
        let col = header.split(',').position(|c| c == "time_hour").unwrap();
        writeln!(out, "{header}").unwrap();
        for line in lines.take(n) {
            let line = line.unwrap();
            last_hour = line.split(',').nth(col).unwrap().to_string();
            writeln!(out, "{line}").unwrap();
        }
    }
    let weather_path = dir.join("weather.csv.gz");
    {
        let file = std::fs::File::create(&weather_path).unwrap();
        let mut out = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        let mut lines = open(BundledFile::Weather).lines();
        let header = lines.next().unwrap().unwrap();
        let col = header.split(',').position(|c| c == "time_hour").unwrap();
        writeln!(out, "{header}").unwrap();
        for line in lines {
            let line = line.unwrap();
            // ISO times compare as text
            if line.split(',').nth(col).unwrap() > last_hour.as_str() {
                break;
            }
            writeln!(out, "{line}").unwrap();
        }
        out.finish().unwrap();
    }
    (flights_path, weather_path)
}

fn spec(flights: &Path, weather: &Path, out: &Path, parallelism: usize) -> FlightsJobSpec {
    FlightsJobSpec {
        flights: flights.to_path_buf(),
        weather: weather.to_path_buf(),
        out_dir: out.to_path_buf(),
        parallelism,
        max_out_of_orderness_ms: 60 * 60 * 1000,
        bad_rows: BadRows::Fail,
    }
}

fn config(mode: CheckpointMode, restarts: u32) -> JobConfig {
    let mut c = JobConfig::default();
    c.checkpoint.mode = mode;
    if mode != CheckpointMode::None {
        c.checkpoint.interval = Some(Duration::from_millis(20));
    }
    c.restart = RestartStrategy {
        max_attempts: restarts,
        delay: Duration::ZERO,
    };
    c
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn the_job_matches_the_reference_and_failures_do_not_change_a_byte() {
    let data = tempfile::tempdir().unwrap();
    let (fpath, wpath) = write_slice(data.path(), SLICE_FLIGHTS);

    // The reference, computed without the engine over the same rows.
    let (flights, _) = read_all::<Flight>(&fpath, BadRows::Fail).unwrap();
    let (weather, _) = read_all::<Weather>(&wpath, BadRows::Fail).unwrap();
    assert_eq!(flights.len(), SLICE_FLIGHTS);
    let (by_vis, daily) = reference::compute(&flights, &weather);
    let expected_vis = render_by_visibility_csv(&by_vis);
    let expected_daily = render_daily_csv(&daily);
    assert!(
        expected_vis.contains(",unknown,"),
        "the slice has unmatched flights"
    );

    // Without failures.
    let clean = tempfile::tempdir().unwrap();
    let s = spec(&fpath, &wpath, clean.path(), 2);
    let r = run(
        &s,
        config(CheckpointMode::ExactlyOnce, 0),
        FailurePlan::none(),
    )
    .unwrap();
    assert_eq!(read(&r.by_visibility_path), expected_vis);
    assert_eq!(read(&r.daily_path), expected_daily);
    assert_eq!(r.summary.flights_read, SLICE_FLIGHTS as u64);
    assert_eq!(r.summary.weather_read, weather.len() as u64);
    assert_eq!(r.summary.late_records(), 0);
    let unknown: u64 = by_vis
        .iter()
        .filter(|v| v.visibility == lockgate_examples::flights::Visibility::Unknown)
        .map(|v| v.stats.flights())
        .sum();
    assert_eq!(r.summary.join.unmatched, unknown);
    assert!(r.metrics.completed_checkpoints() >= 1);
    assert_eq!(r.rows.duplicates, 0);

    // With three failures: two in the busiest aggregate subtask (the last
    // stage: a restore never puts it past what it had received), each
    // after a fifth of its input, and one in a join subtask while it takes
    // a snapshot. Whatever their order, each strikes: a restart puts the
    // aggregate back at most to where it was, so it needs at most 4 fifths
    // of its input to meet both of its failures.
    let failing = tempfile::tempdir().unwrap();
    let s = spec(&fpath, &wpath, failing.path(), 2);
    let names = task_names(&s);
    let idx = |n: &str| names.iter().position(|t| t == n).unwrap();
    let mut per_subtask = [0u64; 2];
    for f in &flights {
        per_subtask[key_to_subtask(origin_hash(&f.origin), 2)] += 1;
    }
    let busiest = if per_subtask[0] >= per_subtask[1] {
        0
    } else {
        1
    };
    let fifth = per_subtask[busiest] / 5;
    let aggregate = idx(&format!("aggregate[{busiest}]"));
    let plan = FailurePlan::none()
        .with(aggregate, FailurePoint::AfterRecords(fifth))
        .with(idx("enrich[0]"), FailurePoint::DuringSnapshot)
        .with(aggregate, FailurePoint::AfterRecords(fifth));
    let r = run(&s, config(CheckpointMode::ExactlyOnce, 5), plan).unwrap();
    assert_eq!(r.metrics.restarts, 3, "{:?}", r.metrics.failures);
    assert_eq!(read(&r.by_visibility_path), expected_vis);
    assert_eq!(read(&r.daily_path), expected_daily);
    assert_eq!(r.summary.flights_read, SLICE_FLIGHTS as u64);
    assert_eq!(
        r.summary.join.unmatched, unknown,
        "counts restored, not summed"
    );
}

#[test]
fn without_checkpoints_and_with_one_subtask_the_result_is_the_same() {
    let data = tempfile::tempdir().unwrap();
    let (fpath, wpath) = write_slice(data.path(), 3_000);
    let (flights, _) = read_all::<Flight>(&fpath, BadRows::Fail).unwrap();
    let (weather, _) = read_all::<Weather>(&wpath, BadRows::Fail).unwrap();
    let (by_vis, daily) = reference::compute(&flights, &weather);
    let out = tempfile::tempdir().unwrap();
    let s = spec(&fpath, &wpath, out.path(), 1);
    let r = run(&s, config(CheckpointMode::None, 0), FailurePlan::none()).unwrap();
    assert_eq!(
        read(&r.by_visibility_path),
        render_by_visibility_csv(&by_vis)
    );
    assert_eq!(read(&r.daily_path), render_daily_csv(&daily));
    assert_eq!(r.metrics.completed_checkpoints(), 0);
    // LF line endings only
    assert!(!read(&r.daily_path).contains('\r'));
}

#[test]
fn a_malformed_row_is_an_input_error_with_its_line() {
    let data = tempfile::tempdir().unwrap();
    let (fpath, wpath) = write_slice(data.path(), 500);
    let text = read(&fpath);
    let mut lines: Vec<&str> = text.lines().collect();
    lines[300] = "2013,1,1,garbage";
    std::fs::write(&fpath, lines.join("\n") + "\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let s = spec(&fpath, &wpath, out.path(), 1);
    let err = run(
        &s,
        config(CheckpointMode::ExactlyOnce, 0),
        FailurePlan::none(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            lockgate_examples::flights_job::FlightsJobError::Input(_)
        ),
        "{msg}"
    );
    assert!(msg.contains("line 301"), "{msg}");
    assert!(msg.contains("flights.csv"), "{msg}");

    let mut s = s;
    s.bad_rows = BadRows::Skip;
    let r = run(
        &s,
        config(CheckpointMode::ExactlyOnce, 0),
        FailurePlan::none(),
    )
    .unwrap();
    assert_eq!(r.summary.flights_skipped, 1);
    assert_eq!(r.summary.flights_read, 499);
}

/// The whole bundled data set, checked against the golden files.
#[test]
fn the_whole_data_set_gives_the_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tempfile::tempdir().unwrap();
    let s = spec(
        &find_bundled(BundledFile::Flights).unwrap(),
        &find_bundled(BundledFile::Weather).unwrap(),
        out.path(),
        2,
    );
    let r = run(
        &s,
        config(CheckpointMode::ExactlyOnce, 0),
        FailurePlan::none(),
    )
    .unwrap();
    let golden = root.join("testdata/flights");
    assert_eq!(
        read(&r.by_visibility_path),
        read(&golden.join("by_visibility.csv"))
    );
    assert_eq!(read(&r.daily_path), read(&golden.join("daily.csv")));
    assert_eq!(r.summary.late_records(), 0);
}
