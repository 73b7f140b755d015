//! Checkpoint folders written by an earlier build (`0cb9f06`, kept in
//! `testdata/checkpoints-0cb9f06/`, see its README) restore with this one:
//! the run goes on from the checkpoint and its result is exact.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};

fn archive(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/checkpoints-0cb9f06")
        .join(name)
}

/// Unpacks `name` (a `.tar.gz`) into `into`.
fn unpack(name: &str, into: &Path) {
    let file = File::open(archive(name)).expect("the archive is in testdata");
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(into)
        .expect("the archive unpacks");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The newest `chk-<n>` in `dir`.
fn newest(dir: &Path) -> u64 {
    *common::checkpoint_ids(dir)
        .last()
        .expect("the folder holds checkpoints")
}

fn restores_loadgen_folder(archive_name: &str, folder: &str) {
    let tmp = tempfile::tempdir().unwrap();
    unpack(archive_name, tmp.path());
    let dir = tmp.path().join(folder);
    let newest_before = newest(&dir);
    let json = tmp.path().join("run.json");
    let _machine = common::heavy();
    let o = common::bin()
        .args(["loadgen", "--restore"])
        .arg(&dir)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{archive_name}: {out}\n{err}");
    assert!(out.contains("result: ok"), "{archive_name}: {out}\n{err}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(
        j["restored_checkpoint"].as_u64(),
        Some(newest_before),
        "{archive_name}: the newest checkpoint of the old folder is restored"
    );
    assert!(
        j["restored_records"].as_u64().unwrap() > 0,
        "{archive_name}: the old checkpoint was taken mid-run"
    );
    // The run went on writing checkpoints into the old folder.
    assert!(newest(&dir) > newest_before, "{archive_name}: {out}");
}

#[test]
fn a_w1_folder_of_0cb9f06_restores_exactly() {
    restores_loadgen_folder("loadgen-w1.tar.gz", "w1");
}

#[test]
fn a_w2_folder_of_0cb9f06_restores_exactly() {
    restores_loadgen_folder("loadgen-w2.tar.gz", "w2");
}

#[test]
fn an_unaligned_w2_folder_of_0cb9f06_restores_exactly() {
    restores_loadgen_folder("loadgen-w2u.tar.gz", "w2u");
}

/// The flights job restores only into the output folder it wrote to and
/// from the input files it read, and the checkpoint records their absolute
/// paths: the archive is unpacked where it was made, and the bundled data
/// copied where the run read it.
#[test]
fn a_flights_folder_of_0cb9f06_restores_to_the_golden_output() {
    let base = Path::new("/tmp/lockgate-testdata-0cb9f06");
    if base.exists() {
        std::fs::remove_dir_all(base).unwrap();
    }
    std::fs::create_dir_all(base.join("data")).unwrap();
    unpack("flights.tar.gz", base);
    // The run read its input from here: the checkpoint records the paths.
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nycflights13");
    for f in ["flights.csv.gz", "weather.csv.gz"] {
        std::fs::copy(bundled.join(f), base.join("data").join(f)).unwrap();
    }
    let _machine = common::heavy();
    let o = common::bin()
        .args(["flights", "--restore"])
        .arg(base.join("flights-chk"))
        .arg("--flights")
        .arg(base.join("data/flights.csv.gz"))
        .arg("--weather")
        .arg(base.join("data/weather.csv.gz"))
        .arg("--out")
        .arg(base.join("flights-out"))
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/flights");
    for f in ["daily.csv", "by_visibility.csv"] {
        assert_eq!(
            std::fs::read(base.join("flights-out").join(f)).unwrap(),
            std::fs::read(golden.join(f)).unwrap(),
            "{f} after the restore differs from the golden output\n{out}\n{err}"
        );
    }
    std::fs::remove_dir_all(base).unwrap();
}

/// A `kafka run` folder of 0cb9f06, with the broker's data of that run
/// (tansu's SQLite file: the input, the output written before the kill,
/// the consumer groups): the restore reads on from the checkpoint's
/// offsets and, at least once, nothing is lost.
#[test]
fn a_kafka_folder_of_0cb9f06_restores_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    unpack("kafka.tar.gz", tmp.path());
    let Some(broker) =
        lockgate_cli::kafka::TestBroker::start_in(tmp.path().join("broker")).unwrap()
    else {
        eprintln!(
            "skipped: tansu is not installed (LOCKGATE_REQUIRE_KAFKA=1 makes this a failure)"
        );
        return;
    };
    let bs = broker.bootstrap();
    let _machine = common::heavy();
    let o = common::bin()
        .args(["kafka", "run", "--bootstrap", bs, "--restore"])
        .arg(tmp.path().join("chk"))
        .arg("--bounded")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("restored: chk-3"), "{out}\n{err}");
    assert!(out.contains("result: ok"), "{out}\n{err}");
    let o = common::bin()
        .args(["kafka", "verify", "--bootstrap", bs, "--topic", "out"])
        .args(["--records", "10000", "--guarantee", "at-least-once"])
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("lost: 0\n") && out.ends_with("result: ok\n"),
        "{out}\n{err}"
    );
}
