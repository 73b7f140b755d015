//! `lockgate loadgen --output committed`: the reference sink as a
//! two-phase-commit sink. Committed output is exact through injected
//! failures, a kill -9 and a restore, and a restore that falls back past a
//! committed checkpoint retracts it instead of committing it twice.

use serde_json::Value;
use std::path::Path;
use std::process::Output;

mod common;
use common::{checkpoint_ids, heavy, kill_after_checkpoints, loadgen, read_json};

/// W2 with committed output, killed by [`kill_after`].
const KILLED_RUN: &[&str] = &[
    "--duration",
    "4",
    "--warmup",
    "0",
    "--rate",
    "20000",
    "--checkpoint-interval-ms",
    "20",
    "--output",
    "committed",
];

/// Runs [`KILLED_RUN`] into `chk` and kills it (SIGKILL) once `n`
/// checkpoints are there.
fn kill_after(chk: &Path, n: usize) {
    kill_after_checkpoints(KILLED_RUN, chk, n);
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The committed counts of a run's JSON, asserting nothing was lost,
/// duplicated or left uncommitted.
fn assert_committed_exact(j: &Value) -> &Value {
    let c = &j["committed"];
    assert_eq!(c["lost"], 0, "{c}");
    assert_eq!(c["duplicated"], 0, "{c}");
    assert_eq!(c["uncommitted"], 0, "{c}");
    assert_eq!(c["records"], j["total_records"], "{c}");
    c
}

#[test]
fn committed_output_needs_checkpoints() {
    let o = loadgen(&["--output", "committed", "--checkpoint", "none"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--output committed needs checkpoints"),
        "{}",
        text(&o)
    );
}

/// W2 with failures: every record committed once; its committed latency
/// is the processing latency plus the wait for a checkpoint's completion.
#[test]
fn injected_failures_leave_committed_output_exact() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("c.json");
    let hgrm = dir.path().join("c.hgrm");
    let o = loadgen(&[
        "--duration",
        "2",
        "--warmup",
        "0",
        "--rate",
        "20000",
        "--checkpoint-interval-ms",
        "10",
        "--output",
        "committed",
        "--inject-failures",
        "3",
        "--json",
        json.to_str().unwrap(),
        "--hgrm",
        hgrm.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("committed latency (from the intended send time to the commit)"),
        "{out}"
    );
    assert!(
        out.contains("uncommitted") && out.ends_with("result: ok\n"),
        "{out}"
    );
    let j = read_json(&json);
    assert_committed_exact(&j);
    assert!(
        j["recoveries"].as_u64().unwrap() >= 1,
        "{}",
        j["recoveries"]
    );
    let (p, c) = (&j["latency_ns"], &j["committed_latency_ns"]);
    assert!(c["count"].as_u64().unwrap() > 0, "{c}");
    // A record is committed after it arrived: its committed latency is
    // larger, by at least a checkpoint's completion (the p50s, as
    // distributions: not record by record).
    assert!(c["p50"].as_u64() > p["p50"].as_u64(), "{p} {c}");
    assert!(!j["timeline"]["committed_points"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(dir.path().join("c.committed.hgrm").is_file());
}

/// Killed mid-run (between pre-commits and commits), then restored: what
/// the first process committed (its log) and what the second commits make
/// every record committed once.
#[test]
fn a_killed_run_restored_commits_every_record_once() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    kill_after(&chk, 3);
    assert!(chk.join("committed.log").is_file());
    let json = dir.path().join("r.json");
    let o = loadgen(&[
        "--restore",
        chk.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let j = read_json(&json);
    assert!(j["restored_checkpoint"].as_u64().is_some());
    assert_committed_exact(&j);
}

/// The two newest checkpoints damaged after the kill: the restore falls
/// back to an older one, naming the files, and what was committed for the
/// second newest (completed, so committed, before the newest was taken) is
/// retracted, shown, and committed again: nothing twice.
#[test]
fn a_fall_back_past_a_committed_checkpoint_retracts_it() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    kill_after(&chk, 4);
    let ids = checkpoint_ids(&chk);
    let damaged = &ids[ids.len() - 2..];
    for id in damaged {
        common::flip_last_byte_of_part(&chk, *id, "sink", 0);
    }
    let json = dir.path().join("r.json");
    let o = loadgen(&[
        "--restore",
        chk.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for id in damaged {
        assert!(out.contains(&format!("chk-{id} does not load")), "{out}");
    }
    assert!(out.contains("sink-0.state"), "{out}");
    assert!(out.contains("retracted by a restore"), "{out}");
    let j = read_json(&json);
    assert!(j["restored_checkpoint"].as_u64().unwrap() < damaged[0]);
    let c = assert_committed_exact(&j);
    assert!(c["retracted"].as_u64().unwrap() > 0, "{c}");
}

/// `--ab`: segments with checkpoints on, off and off again in a seeded
/// random order; each counted only once its switch took effect (200 ms
/// at least); committed latency for the on segments only.
#[test]
fn ab_segments_compare_checkpointing_on_and_off_inside_one_run() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ab.json");
    // Too short for 20 segments a group: refused before anything runs.
    let o = loadgen(&["--duration", "5", "--ab", "0.3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("20 segments a group need --duration 18 s"),
        "{}",
        text(&o)
    );
    let o = loadgen(&[
        "--duration",
        "18",
        "--warmup",
        "0",
        "--rate",
        "5000",
        "--checkpoint-interval-ms",
        "10",
        "--output",
        "committed",
        "--ab",
        "0.3",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("A/B:"), "{}", text(&o));
    let j = read_json(&json);
    let ab = &j["ab"];
    let groups = ab["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3);
    for g in groups {
        assert!(g["segments"].as_u64().unwrap() >= 15, "{g}");
        assert!(g["latency_ns"]["count"].as_u64().unwrap() > 0, "{g}");
        assert_eq!(
            g["committed_latency_ns"].is_null(),
            g["name"] != "on",
            "{g}"
        );
    }
    for s in ab["segments"].as_array().unwrap() {
        let (switch, from) = (
            s["switch_ns"].as_u64().unwrap(),
            s["counted_from_ns"].as_u64().unwrap(),
        );
        assert!(from == 0 || from >= switch + 200_000_000, "{s}");
    }
    let whats: Vec<&str> = ab["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["what"].as_str().unwrap())
        .collect();
    assert_eq!(whats, ["p50", "p99", "p99.9", "records/s"]);
    assert_committed_exact(&j);
}
