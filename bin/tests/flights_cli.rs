//! `lockgate flights` end to end: the binary on small files, bad inputs,
//! and the bundled data with injected failures.

use lockgate_examples::flights::{
    read_all, reference, render_by_visibility_csv, render_daily_csv, BadRows, Flight, Weather,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lockgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Columns in another order than the published files, with extra ones.
const FLIGHTS: &str = "\
carrier,time_hour,origin,dep_delay,flight
UA,2013-01-01T10:00:00Z,EWR,2,1545
AA,2013-01-01T10:00:00Z,JFK,NA,1141
B6,2013-01-01T11:00:00Z,JFK,-4,725
DL,2013-01-01T12:00:00Z,LGA,10,461
UA,2013-01-01T23:00:00Z,EWR,30,1696
UA,2013-01-02T01:00:00Z,EWR,-1,507
";

const WEATHER: &str = "\
origin,time_hour,visib,temp
EWR,2013-01-01T10:00:00Z,10,39.02
JFK,2013-01-01T10:00:00Z,0.5,39.02
JFK,2013-01-01T11:00:00Z,3,39.9
EWR,2013-01-01T23:00:00Z,NA,40.1
EWR,2013-01-02T01:00:00Z,6,38
";

fn files(dir: &Path, flights: &str, weather: &str) -> (PathBuf, PathBuf) {
    let f = dir.join("flights.csv");
    let w = dir.join("weather.csv");
    std::fs::write(&f, flights).unwrap();
    std::fs::write(&w, weather).unwrap();
    (f, w)
}

fn run_on(f: &Path, w: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "flights",
        "--flights",
        f.to_str().unwrap(),
        "--weather",
        w.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    lockgate(&args)
}

#[test]
fn a_small_run_writes_the_reference_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (f, w) = files(dir.path(), FLIGHTS, WEATHER);
    let out = dir.path().join("out");
    let o = run_on(&f, &w, &out, &["--parallelism", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("flights: 6 records read"), "{stdout}");
    assert!(stdout.contains("weather: 5 records read"), "{stdout}");
    assert!(stdout.contains("late records: 0"), "{stdout}");
    assert!(stdout.contains("checkpoints completed:"), "{stdout}");
    assert!(stdout.contains("by_visibility.csv"), "{stdout}");
    let (flights, _) = read_all::<Flight>(&f, BadRows::Fail).unwrap();
    let (weather, _) = read_all::<Weather>(&w, BadRows::Fail).unwrap();
    let (vis, daily) = reference::compute(&flights, &weather);
    let got_vis = std::fs::read_to_string(out.join("by_visibility.csv")).unwrap();
    assert_eq!(got_vis, render_by_visibility_csv(&vis));
    assert_eq!(
        std::fs::read_to_string(out.join("daily.csv")).unwrap(),
        render_daily_csv(&daily)
    );
    // the hand-checked buckets: DL at LGA has no weather row; EWR 23:00 has NA
    assert!(got_vis.contains("LGA,unknown,1,0,10.000\n"), "{got_vis}");
    assert!(got_vis.contains("JFK,low,0,1,\n"), "{got_vis}");
    assert!(got_vis.contains("JFK,reduced,1,0,-4.000\n"), "{got_vis}");
}

#[test]
fn a_missing_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, w) = files(dir.path(), FLIGHTS, WEATHER);
    let missing = dir.path().join("nope.csv.gz");
    let o = run_on(&missing, &w, &dir.path().join("out"), &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("nope.csv.gz"), "{err}");
    assert!(err.contains("cannot open"), "{err}");
}

#[test]
fn a_malformed_row_exits_2_with_its_line_or_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let bad = FLIGHTS.replace(
        "B6,2013-01-01T11:00:00Z,JFK,-4,725",
        "B6,2013-01-01T11:00:00Z,JFK,soon,725",
    );
    let (f, w) = files(dir.path(), &bad, WEATHER);
    let o = run_on(&f, &w, &dir.path().join("out"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("flights.csv: line 4"), "{err}");
    assert!(err.contains("dep_delay"), "{err}");

    let o = run_on(&f, &w, &dir.path().join("out"), &["--bad-rows", "skip"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("flights: 5 records read"), "{stdout}");
    assert!(stdout.contains("(1 bad rows skipped)"), "{stdout}");
}

#[test]
fn a_wrong_header_exits_2_naming_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let (f, w) = files(dir.path(), FLIGHTS, &WEATHER.replace("visib", "visibility"));
    let o = run_on(&f, &w, &dir.path().join("out"), &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("missing column `visib`"), "{err}");
    assert!(err.contains("weather.csv: line 1"), "{err}");
}

#[test]
fn the_bundled_data_with_injected_failures_gives_the_golden_files() {
    // Aligned, unaligned, and aligned with a 1 ms aligned-checkpoint
    // timeout (rule 19: alignments longer than that switch to unaligned).
    for mode in [
        &["exactly-once"][..],
        &["unaligned"],
        &["exactly-once", "--aligned-checkpoint-timeout-ms", "1"],
        // On cooperative workers (the job has more tasks than workers).
        &["exactly-once", "--workers", "2"],
        &["unaligned", "--workers", "2"],
    ] {
        golden_with_failures(mode);
    }
}

fn golden_with_failures(mode_args: &[&str]) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/flights");
    let out = tempfile::tempdir().unwrap();
    let mode = mode_args.join(" ");
    let mut args = vec![
        "flights",
        "--out",
        out.path().to_str().unwrap(),
        "--checkpoint",
    ];
    args.extend(mode_args);
    args.extend(["--inject-failures", "3", "--seed", "2"]);
    let o = lockgate(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("flights: 336776 records read"), "{stdout}");
    assert!(stdout.contains("late records: 0"), "{stdout}");
    // Whether a planned failure strikes depends on its task's input (see
    // the command's docs); with this seed at least one does.
    let restarts: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("restarts: "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the restarts line");
    assert!(restarts >= 1, "{mode}: {stdout}");
    for name in ["by_visibility.csv", "daily.csv"] {
        let got = std::fs::read(out.path().join(name)).unwrap();
        let want = std::fs::read(golden.join(name)).unwrap();
        assert!(got == want, "{mode}: {name} differs from the golden file");
    }
}

/// An unaligned run records its mode in its checkpoints: a restore
/// without `--checkpoint` replays their channel state in the same mode,
/// also after falling back from a newest checkpoint that does not load to
/// an unaligned one; a restore in another mode is refused (exit 2).
#[test]
fn a_restore_takes_the_unaligned_mode_from_the_checkpoint() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/flights");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let (out_s, chk_s) = (out.to_str().unwrap(), chk.to_str().unwrap());
    let o = lockgate(&[
        "flights",
        "--out",
        out_s,
        "--checkpoint",
        "unaligned",
        "--checkpoint-dir",
        chk_s,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The newest (the final checkpoint, aligned by FLIP-147) has its
    // metadata damaged: the restore falls back to an unaligned one.
    let newest = std::fs::read_dir(&chk)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("chk-")
                .and_then(|n| n.parse::<u64>().ok())
        })
        .max()
        .unwrap();
    assert!(newest >= 2, "only {newest} checkpoint(s)");
    let victim = chk.join(format!("chk-{newest}"));
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[30] ^= 0x5a; // inside the metadata, past the 18-byte header
    std::fs::write(&victim, bytes).unwrap();
    let o = lockgate(&[
        "flights",
        "--out",
        out_s,
        "--restore",
        chk_s,
        "--checkpoint",
        "exactly-once",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("the checkpoint was taken with --checkpoint unaligned"),
        "{}",
        text(&o.stderr)
    );
    let o = lockgate(&["flights", "--out", out_s, "--restore", chk_s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("warning: chk-{newest} does not load")),
        "{}",
        text(&o.stderr)
    );
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains(&format!("restored: chk-{}", newest - 1)),
        "{stdout}"
    );
    for name in ["by_visibility.csv", "daily.csv"] {
        let got = std::fs::read(out.join(name)).unwrap();
        let want = std::fs::read(golden.join(name)).unwrap();
        assert!(got == want, "{name} differs from the golden file");
    }
}

#[test]
fn the_bundled_data_rescaled_mid_run_gives_the_golden_files() {
    // Issue 14: killed at parallelism 2 after a checkpoint, restored at 3:
    // the join's and the windows' keyed state move by key group, the
    // sinks' pending parts are committed by their new owners.
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/flights");
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args([
            "flights",
            "--out",
            out.to_str().unwrap(),
            "--parallelism",
            "2",
        ])
        .args([
            "--checkpoint",
            "exactly-once",
            "--checkpoint-interval-ms",
            "20",
        ])
        .args(["--checkpoint-dir", chk.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let has_checkpoint = || {
        std::fs::read_dir(&chk).is_ok_and(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with("chk-"))
        })
    };
    while !has_checkpoint() && std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    assert!(has_checkpoint(), "no checkpoint in {}", chk.display());
    let o = lockgate(&[
        "flights",
        "--out",
        out.to_str().unwrap(),
        "--parallelism",
        "3",
        "--checkpoint",
        "exactly-once",
        "--restore",
        chk.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("flights: 336776 records read"), "{stdout}");
    assert!(stdout.contains("late records: 0"), "{stdout}");
    assert!(
        stdout.contains("rescaled (enrich 2 → 3, aggregate 2 → 3)"),
        "{stdout}"
    );
    for name in ["by_visibility.csv", "daily.csv"] {
        let got = std::fs::read(out.join(name)).unwrap();
        let want = std::fs::read(golden.join(name)).unwrap();
        assert!(got == want, "{name} differs from the golden file");
    }
    // Restored again without --parallelism: the checkpoint's (3), not
    // the default 2.
    let o = lockgate(&[
        "flights",
        "--out",
        out.to_str().unwrap(),
        "--restore",
        chk.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let store = lockgate::storage::LocalDirStorage::open(&chk).unwrap();
    let newest = *lockgate::storage::CheckpointStorage::list(&store)
        .unwrap()
        .last()
        .unwrap();
    let meta = lockgate::storage::CheckpointStorage::load_metadata(&store, newest).unwrap();
    assert_eq!(meta.job.parallelism.get("aggregate"), Some(&3), "{meta:?}");
}

#[test]
fn a_checkpoint_interval_without_checkpoints_or_zero_workers_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (f, w) = files(dir.path(), FLIGHTS, WEATHER);
    let o = run_on(
        &f,
        &w,
        &dir.path().join("out"),
        &["--checkpoint", "none", "--checkpoint-interval-ms", "5"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains("--checkpoint-interval-ms needs checkpoints"),
        "{err}"
    );
    let o = run_on(&f, &w, &dir.path().join("out"), &["--workers", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains("--workers must be between 1 and 1024"),
        "{err}"
    );
}

#[test]
fn an_aligned_checkpoint_timeout_in_another_mode_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (f, w) = files(dir.path(), FLIGHTS, WEATHER);
    for mode in ["unaligned", "at-least-once", "none"] {
        let o = run_on(
            &f,
            &w,
            &dir.path().join("out"),
            &["--checkpoint", mode, "--aligned-checkpoint-timeout-ms", "5"],
        );
        assert_eq!(o.status.code(), Some(2), "{mode}: {}", text(&o.stdout));
        let err = text(&o.stderr);
        assert!(
            err.contains(
                "--aligned-checkpoint-timeout-ms applies to --checkpoint exactly-once only"
            ),
            "{mode}: {err}"
        );
    }
}

/// A `--restore` in at-least-once mode may count records twice, as an
/// in-process restart may: the run says so, and exits 0.
#[test]
fn an_at_least_once_restore_says_records_may_be_counted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (f, w) = files(dir.path(), FLIGHTS, WEATHER);
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let chk_s = chk.to_str().unwrap();
    let o = run_on(
        &f,
        &w,
        &out,
        &["--checkpoint", "at-least-once", "--checkpoint-dir", chk_s],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        !text(&o.stdout).contains("counted twice"),
        "{}",
        text(&o.stdout)
    );
    let o = run_on(
        &f,
        &w,
        &out,
        &["--restore", chk_s, "--checkpoint", "at-least-once"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("note: at-least-once: records replayed after the restore of chk-")
            && stdout.contains("may be counted twice in the figures"),
        "{stdout}"
    );
}

#[test]
fn restore_takes_the_folder_and_refuses_another_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (f, w) = files(dir.path(), FLIGHTS, WEATHER);
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let chk_s = chk.to_str().unwrap();
    // A whole run, its final checkpoint in chk.
    let o = run_on(&f, &w, &out, &["--checkpoint-dir", chk_s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let first = std::fs::read_to_string(out.join("daily.csv")).unwrap();
    // --restore DIR is the checkpoint folder itself; into the same output
    // folder (named another way) the run resumes from its final checkpoint.
    let same = dir.path().join("out/../out/.");
    let o = run_on(&f, &w, &same, &["--restore", chk_s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(out.join("daily.csv")).unwrap(),
        first
    );
    // Printed paths are normalised.
    let stdout = text(&o.stdout);
    assert!(
        !stdout.contains("/../") && !stdout.contains("/./"),
        "{stdout}"
    );
    // Into another output folder: refused, naming it, and nothing left
    // behind there.
    let other = dir.path().join("other");
    let o = run_on(&f, &w, &other, &["--restore", chk_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains("another output folder") && err.contains("out: "),
        "{err}"
    );
    assert!(!other.exists(), "the refused run's --out is left behind");
    // A checkpoint folder and --restore that differ are refused.
    let o = run_on(
        &f,
        &w,
        &out,
        &[
            "--restore",
            chk_s,
            "--checkpoint-dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("differ"), "{}", text(&o.stderr));
    // An output folder whose committed parts are gone is refused, not
    // restored into a partial output.
    std::fs::remove_dir_all(out.join("parts")).unwrap();
    let o = run_on(&f, &w, &out, &["--restore", chk_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("missing"), "{}", text(&o.stderr));
    // A missing folder is named.
    let o = run_on(&f, &w, &out, &["--restore", "/nonexistent-folder"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("/nonexistent-folder"));
    assert!(!Path::new("/nonexistent-folder").exists());
}
