//! `lockgate loadgen` and `lockgate report` driven as a user drives them:
//! the binary is spawned, its exit code, output and files checked.

use lockgate_workloads::latency::{histogram_from_base64, parse_hgrm, read_hlog};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
use common::{bin, checkpoint_ids, heavy, kill_after_checkpoints, loadgen, read_json};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn last_line(s: &str) -> &str {
    s.trim_end().lines().last().unwrap_or("")
}

/// A short W2 run: 20 000 records/s for 1 s, no warm-up.
const SHORT_W2: &[&str] = &["--duration", "1", "--warmup", "0", "--rate", "20000"];

fn assert_ok(o: &Output) {
    let (out, err) = text(o);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(last_line(&out), "result: ok", "{out}");
}

#[test]
fn w1_without_checkpoints_is_exact() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("w1.json");
    let hlog = dir.path().join("w1.hlog");
    let o = loadgen(&[
        "--workload",
        "w1",
        "--records",
        "100000",
        "--checkpoint",
        "none",
        "--json",
        json.to_str().unwrap(),
        "--hlog",
        hlog.to_str().unwrap(),
    ]);
    assert_ok(&o);
    let (out, _) = text(&o);
    assert!(out.contains("not a latency test"), "{out}");
    let j = read_json(&json);
    assert_eq!(j["workload"], "W1");
    assert_eq!(j["mode"], "none");
    assert_eq!(j["records"], 100_000);
    assert_eq!(j["lost"], 0);
    assert_eq!(j["duplicated"], 0);
    assert_eq!(j["fingerprint"], j["expected_fingerprint"]);
    assert!(j["requested_rate"].is_null());
    assert_eq!(j["config"]["records"], 100_000);
    assert!(j["config"]["rate"].is_null());
    assert_eq!(j["checkpoints"]["completed"], 0);
    // W1 keeps no per-second histograms: its interval log is one interval
    // holding the whole run.
    let intervals = read_hlog(&std::fs::read(&hlog).unwrap()).unwrap();
    assert_eq!(intervals.len(), 1);
    assert_eq!(intervals[0].histogram.len(), 100_000);
    let max_ms = j["latency_ns"]["max"].as_u64().unwrap() as f64 / 1e6;
    assert!((intervals[0].max - max_ms).abs() <= 0.001 + max_ms * 1e-3);
}

/// `page` is a whole HTML document with `charts` inline SVG charts and
/// nothing fetched or run: no script, no external link or source.
fn check_page(page: &str, charts: usize) {
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..100]);
    assert!(page.trim_end().ends_with("</html>"));
    assert_eq!(page.matches("<svg").count(), charts);
    assert_eq!(page.matches("</svg>").count(), charts);
    for banned in [
        "<script", "<link", "<img", "<iframe", "src=", "href=", "url(",
    ] {
        assert!(!page.contains(banned), "the page has {banned}");
    }
    // The only URL is SVG's namespace, which is never fetched.
    assert_eq!(
        page.matches("http").count(),
        page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    assert!(page.contains("<table class=\"checkpoints\">"));
    assert!(page.contains("<table class=\"config\">"));
    assert!(page.contains("<table class=\"environment\">"));
}

#[test]
fn w2_exactly_once_writes_json_hgrm_hlog_and_svg() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (json, hgrm, hlog, svg) = (p("r.json"), p("r.hgrm"), p("r.hlog"), p("r.svg"));
    let (timeline, html) = (p("t.svg"), p("r.html"));
    let mut args = SHORT_W2.to_vec();
    args.extend([
        "--json",
        &json,
        "--hgrm",
        &hgrm,
        "--hlog",
        &hlog,
        "--svg",
        &svg,
        "--timeline",
        &timeline,
        "--html",
        &html,
        "--checkpoint-interval-ms",
        "50",
    ]);
    let o = loadgen(&args);
    assert_ok(&o);
    let j = read_json(Path::new(&json));
    assert_eq!(j["schema_version"], 2);
    assert_eq!(j["mode"], "exactly-once");
    assert_eq!(j["workload"], "W2");
    assert_eq!(j["ok"], true);
    assert_eq!(j["records"], 20_000);
    assert_eq!(j["latency_ns"]["count"], 20_000);
    assert_eq!(j["requested_rate"], 20_000);
    assert!(j["achieved_rate"].as_f64().unwrap() > 0.0);
    assert!(j["checkpoints"]["completed"].as_u64().unwrap() >= 1);
    let list = j["checkpoints"]["list"].as_array().unwrap();
    assert!(!list.is_empty());
    // Schema 2: every completed checkpoint lists each subtask's part, and
    // its sizes add up (the metadata file is on top of the parts).
    let completed: Vec<_> = list.iter().filter(|c| c["status"] == "completed").collect();
    assert!(!completed.is_empty());
    for c in completed {
        let subtasks = c["subtasks"].as_array().unwrap();
        let mut names: Vec<&str> = subtasks
            .iter()
            .map(|t| t["task"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "keyed_sum[0]",
                "keyed_sum[1]",
                "sink[0]",
                "source[0]",
                "source[1]"
            ],
            "{c}"
        );
        let sum = |k: &str| subtasks.iter().map(|t| t[k].as_u64().unwrap()).sum::<u64>();
        assert_eq!(
            c["state_bytes"].as_u64().unwrap(),
            sum("state_bytes"),
            "{c}"
        );
        assert!(
            c["checkpointed_bytes"].as_u64().unwrap() > sum("checkpointed_bytes"),
            "{c}"
        );
        for t in subtasks {
            // A full part holds at least the whole state; a delta
            // (incremental) holds less than the state.
            let (written, state) = (
                t["checkpointed_bytes"].as_u64().unwrap(),
                t["state_bytes"].as_u64().unwrap(),
            );
            if t["incremental"] == true {
                assert!(written > 0, "{t}");
            } else {
                assert!(written >= state, "{t}");
            }
            assert_eq!(t["unaligned"], false);
            assert_eq!(t["persisted_bytes"], 0);
        }
        let start_delay = subtasks
            .iter()
            .map(|t| t["start_delay_ns"].as_u64().unwrap())
            .max();
        assert_eq!(c["start_delay_ns"].as_u64(), start_delay, "{c}");
    }
    assert!(
        list[0].get("alignments").is_none(),
        "schema 1's field is gone"
    );
    for key in ["cores", "cpu_model", "rustc", "git_commit", "host"] {
        assert!(!j["environment"][key].is_null(), "{key}");
    }
    assert!(!j["environment"]["host"].as_str().unwrap().is_empty());
    // RFC 3339 in UTC, e.g. 2026-12-01T14:03:07.123456789Z.
    let started = j["started_at"].as_str().unwrap();
    assert!(
        started.len() >= 20 && started.ends_with('Z') && started.as_bytes()[10] == b'T',
        "{started}"
    );
    assert!(humantime::parse_rfc3339(started).is_ok(), "{started}");
    assert!(j["peak_rss_bytes"].as_u64().unwrap() > 0);
    let lat = &j["latency_ns"];
    assert!(lat["p50"].as_u64() <= lat["p99"].as_u64());
    assert!(lat["p99"].as_u64() <= lat["max"].as_u64());
    let h = histogram_from_base64(j["latency_histogram"].as_str().unwrap()).unwrap();
    assert_eq!(h.len(), 20_000);
    assert_eq!(h.max(), lat["max"].as_u64().unwrap());
    // The .hgrm in ms: its last line is the max and the total count.
    let lines = parse_hgrm(&std::fs::read_to_string(&hgrm).unwrap()).unwrap();
    let last = lines.last().unwrap();
    assert_eq!(last.total_count, 20_000);
    let max_ms = lat["max"].as_u64().unwrap() as f64 / 1e6;
    assert!(
        (last.value - max_ms).abs() <= 0.001 + max_ms * 1e-3,
        "{last:?}"
    );
    // The interval log adds up to every recorded latency.
    let intervals = read_hlog(&std::fs::read(&hlog).unwrap()).unwrap();
    assert!(!intervals.is_empty());
    let total: u64 = intervals.iter().map(|i| i.histogram.len()).sum();
    assert_eq!(total, 20_000);
    // Its max column is in ms, as its header says; the largest is the run's
    // (to the 2 significant digits of an interval's histogram).
    let log_max = intervals.iter().map(|i| i.max).fold(0.0, f64::max);
    assert!(
        (log_max - max_ms).abs() <= 0.001 + max_ms * 1e-2,
        "{log_max} vs {max_ms}"
    );
    for i in &intervals {
        let ms = i.histogram.max() as f64 / 1e6;
        assert!((i.max - ms).abs() <= 0.001 + ms * 1e-3, "{} vs {ms}", i.max);
    }
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.contains("<svg") && chart.contains("log scale"),
        "{chart}"
    );
    assert!(chart.contains("W2") && chart.contains("parallelism 2"));
    // The timeline: every recorded latency in its 100 ms points, and every
    // checkpoint a band of the chart.
    let points = j["timeline"]["points"].as_array().unwrap();
    assert_eq!(j["timeline"]["interval_ns"], 100_000_000);
    let counted: u64 = points.iter().map(|p| p["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, 20_000);
    let t = std::fs::read_to_string(&timeline).unwrap();
    assert!(t.contains("latency over time") && t.contains("checkpoint (trigger to completion)"));
    // The page stands alone: no script, no external resource; both charts,
    // one checkpoint table row per checkpoint, the configuration.
    let page = std::fs::read_to_string(&html).unwrap();
    check_page(&page, 2);
    let rows = page
        .split("<table class=\"checkpoints\">")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap()
        .matches("<tr><td>")
        .count();
    assert_eq!(rows, list.len(), "one row per checkpoint");
    assert!(page.contains("<th>checkpoint_interval_ms</th><td>50</td>"));

    // report show prints the same run; compare puts two side by side.
    let show = bin().args(["report", "show", &json]).output().unwrap();
    let (out, err) = text(&show);
    assert_eq!(show.status.code(), Some(0), "{err}");
    assert!(
        out.contains("W2") && last_line(&out) == "result: ok",
        "{out}"
    );
    let (shown, compared) = (p("show.html"), p("compare.html"));
    let show = bin()
        .args(["report", "show", &json, "--html", &shown])
        .output()
        .unwrap();
    assert_eq!(show.status.code(), Some(0));
    check_page(&std::fs::read_to_string(&shown).unwrap(), 2);
    let cmp = bin()
        .args(["report", "compare", &json, &json, "--html", &compared])
        .output()
        .unwrap();
    let (out, err) = text(&cmp);
    assert_eq!(cmp.status.code(), Some(0), "{err}");
    assert!(out.contains("(1.00x)"), "{out}");
    // Two runs: the overlaid percentiles, then each run's timeline.
    check_page(&std::fs::read_to_string(&compared).unwrap(), 3);
    assert!(
        out.contains("latency p99 (µs) ↓") && out.contains("records/s ↑"),
        "{out}"
    );
    // The page of a comparison has its table too.
    assert!(std::fs::read_to_string(&compared)
        .unwrap()
        .contains("<pre class=\"comparison\">"));
    assert!(!err.contains("WARNING"), "{err}");
    // Runs of another mode are not like for like: a warning names them.
    let mut other = j.clone();
    other["mode"] = "none".into();
    let other_path = p("other.json");
    std::fs::write(&other_path, serde_json::to_vec(&other).unwrap()).unwrap();
    let cmp = bin()
        .args(["report", "compare", &json, &other_path])
        .output()
        .unwrap();
    let (_, err) = text(&cmp);
    assert_eq!(cmp.status.code(), Some(0), "{err}");
    assert!(
        err.contains("WARNING") && err.contains("other is W2 none"),
        "{err}"
    );
    // An --svg that cannot be written is refused before anything prints.
    for cmd in [
        vec!["report", "show", &json],
        vec!["report", "compare", &json, &json],
    ] {
        let mut args = cmd.clone();
        args.extend(["--svg", "/nonexistent-folder/x.svg"]);
        let o = bin().args(&args).output().unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains("/nonexistent-folder/x.svg"), "{err}");
    }
    let bad = bin().args(["report", "show", &hgrm]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    // An output on the saved run itself is refused: it would overwrite it.
    let o = bin()
        .args(["report", "show", &json, "--html", &json])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        out.is_empty() && err.contains("name the same file"),
        "{err}"
    );
    assert_eq!(read_json(Path::new(&json))["workload"], "W2");

    // A run saved by a schema-1 build (alignments instead of subtasks)
    // still reads; a newer schema is refused, naming the versions.
    let mut v1 = j.clone();
    v1["schema_version"] = 1.into();
    for c in v1["checkpoints"]["list"].as_array_mut().unwrap() {
        let c = c.as_object_mut().unwrap();
        c.remove("subtasks");
        c.remove("checkpointed_bytes");
        c.insert(
            "alignments".into(),
            serde_json::json!([{"task": "keyed_sum[0]", "alignment_ns": 5, "buffered_bytes": 0}]),
        );
    }
    let v1_path = p("v1.json");
    std::fs::write(&v1_path, serde_json::to_vec(&v1).unwrap()).unwrap();
    let show = bin().args(["report", "show", &v1_path]).output().unwrap();
    let (out, err) = text(&show);
    assert_eq!(show.status.code(), Some(0), "{err}");
    assert!(out.contains("checkpoints:"), "{out}");
    let mut v3 = j.clone();
    v3["schema_version"] = 3.into();
    let v3_path = p("v3.json");
    std::fs::write(&v3_path, serde_json::to_vec(&v3).unwrap()).unwrap();
    let show = bin().args(["report", "show", &v3_path]).output().unwrap();
    let (_, err) = text(&show);
    assert_eq!(show.status.code(), Some(2), "{err}");
    assert!(
        err.contains("schema version 3") && err.contains("1 to 2"),
        "{err}"
    );
}

/// W4: closed-loop sources for a time behind a slow sink (short: its sink
/// spins a core).
#[test]
fn w4_runs_under_backpressure_and_checks_what_was_emitted() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("w4.json");
    let o = loadgen(&[
        "--workload",
        "w4",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--checkpoint-interval-ms",
        "50",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_ok(&o);
    let (out, _) = text(&o);
    assert!(out.contains("not a latency test"), "{out}");
    let j = read_json(&json);
    assert_eq!(j["workload"], "W4");
    assert_eq!(
        (j["lost"].as_u64(), j["duplicated"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(j["fingerprint"], j["expected_fingerprint"]);
    // What the sources emitted in their time, below the check's bound.
    let total = j["total_records"].as_u64().unwrap();
    assert!(total > 0 && total < 200_000 + (1 << 22), "{total}");
    assert_eq!(j["config"]["duration"], 0.5);
    assert!(j["config"]["rate"].is_null());
    // W4 has no rate, no record count, no timeline.
    for (args, needle) in [
        (
            vec!["--workload", "w4", "--rate", "1000"],
            "--rate does not apply to w4",
        ),
        (
            vec!["--workload", "w4", "--records", "10"],
            "--records applies to w1 only",
        ),
        (
            vec!["--workload", "w4", "--timeline", "/tmp/x.svg"],
            "--timeline is for W2/W3",
        ),
    ] {
        let o = loadgen(&args);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn w3_at_least_once_runs_and_quiet_prints_one_line() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("alo.json");
    let mut args = SHORT_W2.to_vec();
    args.extend([
        "--workload",
        "w3",
        "--checkpoint",
        "at-least-once",
        "--checkpoint-interval-ms",
        "20",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    let o = loadgen(&args);
    assert_ok(&o);
    let (out, _) = text(&o);
    assert_eq!(out.trim_end().lines().count(), 1, "{out}");
    // At-least-once blocks no channel: no alignment, only the spread of
    // each subtask's barriers (as Flink's BarrierTracker).
    let j = read_json(&json);
    assert_eq!(
        j["config"]["tick_us"], 10,
        "a thread per task's default tick"
    );
    assert_eq!(j["checkpoints"]["alignment_ns"]["max"], 0);
    let subtasks: Vec<&Value> = j["checkpoints"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "completed")
        .flat_map(|c| c["subtasks"].as_array().unwrap())
        .collect();
    assert!(!subtasks.is_empty());
    assert!(subtasks.iter().all(|t| t["alignment_ns"] == 0));
    assert!(
        subtasks
            .iter()
            .any(|t| t["barrier_spread_ns"].as_u64().unwrap() > 0),
        "the sink's two inputs deliver their barriers at different times"
    );
}

#[test]
fn injected_failures_recover_exactly_once() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("f.json");
    let mut args = SHORT_W2.to_vec();
    args.extend([
        "--inject-failures",
        "2",
        "--checkpoint-interval-ms",
        "20",
        "--json",
        json.to_str().unwrap(),
    ]);
    let o = loadgen(&args);
    assert_ok(&o);
    let j = read_json(&json);
    assert_eq!(j["failures_injected"], 2);
    assert_eq!(j["recoveries"], 2);
    assert_eq!(j["lost"], 0);
    assert_eq!(j["duplicated"], 0);
    // Each failure with its time and recovery, on the checkpoints' clock.
    let failures = j["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2, "{failures:?}");
    let started = j["started_ns"].as_u64().unwrap();
    for f in failures {
        assert!(f["task"].as_str().unwrap().contains('['), "{f}");
        assert!(f["at_ns"].as_u64().unwrap() > started, "{f}");
        assert!(f["recovery_ns"].as_u64().unwrap() > 0, "{f}");
    }
    let (out, _) = text(&o);
    assert_eq!(out.matches("recovered in").count(), 2, "{out}");
}

#[test]
fn injected_failures_at_least_once_lose_nothing() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("f.json");
    let o = loadgen(&[
        "--workload",
        "w1",
        "--records",
        "200000",
        "--checkpoint",
        "at-least-once",
        "--checkpoint-interval-ms",
        "10",
        "--inject-failures",
        "2",
        "--seed",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_ok(&o);
    let j = read_json(&json);
    assert_eq!(j["recoveries"], 2);
    assert_eq!(j["lost"], 0);
}

/// The id of the newest checkpoint in `chk`.
fn newest_checkpoint(chk: &Path) -> u64 {
    *checkpoint_ids(chk).last().expect("no checkpoint")
}

#[test]
fn restore_after_a_killed_run_finishes_exactly() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let chk_s = chk.to_str().unwrap();
    let run_args = [
        "--duration",
        "3",
        "--warmup",
        "0",
        "--rate",
        "20000",
        "--checkpoint-interval-ms",
        "50",
    ];
    kill_after_checkpoints(&run_args, &chk, 2);
    // Other flags than the run's are refused, each difference named; the
    // outputs and the failure plan may differ.
    let o = loadgen(&[
        "--rate",
        "30000",
        "--workload",
        "w3",
        "--seed",
        "9",
        "--restore",
        chk_s,
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("rate: 20000 → 30000") && err.contains("workload: w2 → w3"),
        "{err}"
    );
    assert!(!err.contains("seed"), "{err}");
    // A newest checkpoint that does not load is skipped, said on stderr
    // even with --quiet, and kept aside (not deleted by retention).
    let newest = newest_checkpoint(&chk);
    common::flip_last_byte_of_part(&chk, newest, "source", 0);
    // --restore alone is enough: the flags come from the checkpoint.
    let json = dir.path().join("r.json");
    let o = loadgen(&[
        "--restore",
        chk_s,
        "--json",
        json.to_str().unwrap(),
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert_eq!(out.trim(), "result: ok", "{err}");
    assert!(
        err.contains(&format!("warning: chk-{newest} does not load"))
            && err.contains(&format!("corrupt-chk-{newest}")),
        "{err}"
    );
    assert!(chk.join(format!("corrupt-chk-{newest}")).exists());
    let show = bin()
        .args(["report", "show", json.to_str().unwrap()])
        .output()
        .unwrap();
    let (out, _) = text(&show);
    let j = read_json(&json);
    assert!(j["restored_checkpoint"].as_u64().unwrap() < newest);
    assert_eq!(j["config"]["rate"], 20_000);
    assert_eq!(j["config"]["checkpoint_interval_ms"], 50);
    let id = j["restored_checkpoint"]
        .as_u64()
        .expect("restored from a checkpoint");
    let before = j["restored_records"].as_u64().unwrap();
    assert!(before > 0 && before < 60_000, "{before}");
    assert!(
        out.contains(&format!(
            "restored:    from chk-{id} ({before} records before it)"
        )),
        "{out}"
    );
    // Restoring the finished run's final checkpoint: nothing left to do.
    let o = loadgen(&["--restore", chk_s]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.trim()
            .starts_with("nothing left to do: the run had finished (chk-"),
        "{out}"
    );
    assert_eq!(out.trim().lines().count(), 1, "{out}");
}

/// An unaligned W4 run (its channels full, so every checkpoint holds
/// records in flight) killed with SIGKILL, then restored: the channel state
/// is replayed, nothing lost or duplicated.
#[test]
fn an_unaligned_w4_run_killed_then_restored_is_exact() {
    let _g = heavy();
    // Unaligned, and aligned with a timeout that W4's backpressure passes
    // (rule 19: the checkpoints switch to unaligned).
    for mode in [
        &["--checkpoint", "unaligned"][..],
        &[
            "--checkpoint",
            "exactly-once",
            "--aligned-checkpoint-timeout-ms",
            "5",
        ],
    ] {
        unaligned_w4_killed_then_restored(mode);
    }
}

fn unaligned_w4_killed_then_restored(mode: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let mut run_args = vec![
        "--workload",
        "w4",
        "--duration",
        "2",
        "--warmup",
        "0",
        "--checkpoint-interval-ms",
        "50",
    ];
    run_args.extend(mode);
    kill_after_checkpoints(&run_args, &chk, 3);
    // Corrupt the channel state in the newest checkpoint: it travels in its
    // task's CRC32C-checked part, so the checkpoint does not load and
    // the restore falls back to an earlier one (a second or later
    // unaligned checkpoint, taken back to back with the one before it).
    let newest = newest_checkpoint(&chk);
    let victim = chk.join(format!("chk-{newest}"));
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes
        .windows(b"#channel-state".len())
        .position(|w| w == b"#channel-state")
        .expect("no part of the newest checkpoint holds channel state");
    let payload = (at + 64).min(bytes.len() - 1);
    bytes[payload] ^= 0x5a;
    std::fs::write(&victim, bytes).unwrap();
    let json = dir.path().join("r.json");
    let o = loadgen(&[
        "--restore",
        chk.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert_eq!(last_line(&out), "result: ok", "{out}\n{err}");
    assert!(out.contains(" 0 lost, 0 duplicated"), "{out}");
    assert!(
        err.contains(&format!("warning: chk-{newest} does not load")),
        "{err}"
    );
    let j = read_json(&json);
    let restored = j["restored_checkpoint"].as_u64().unwrap();
    assert!(
        (2..newest).contains(&restored),
        "restored {restored} of {newest}"
    );
    if mode[1] == "unaligned" {
        assert_eq!(j["mode"], "unaligned");
    } else {
        // An aligned run with a timeout stays exactly-once (issue 11 §2).
        assert_eq!(j["mode"], "exactly-once");
        assert_eq!(j["config"]["aligned_checkpoint_timeout_ms"], 5, "{j}");
    }
    let list = j["checkpoints"]["list"].as_array().unwrap();
    assert!(
        list.iter()
            .any(|c| c["unaligned"] == true && c["persisted_bytes"].as_u64() > Some(0)),
        "no checkpoint persisted records in flight"
    );
}

#[test]
fn an_at_least_once_restore_after_a_kill_may_duplicate_but_not_lose() {
    // At-least-once: what the killed run delivered after its last checkpoint
    // is delivered again after the restore. Duplicates are allowed, as after
    // an in-process restart; a loss would fail the run.
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let chk_s = chk.to_str().unwrap();
    let run_args = [
        "--duration",
        "3",
        "--warmup",
        "0",
        "--rate",
        "20000",
        "--checkpoint",
        "at-least-once",
        "--checkpoint-interval-ms",
        "200",
    ];
    kill_after_checkpoints(&run_args, &chk, 1);
    let json = dir.path().join("r.json");
    let mut args = run_args.to_vec();
    args.extend(["--restore", chk_s, "--json", json.to_str().unwrap()]);
    let o = loadgen(&args);
    assert_ok(&o);
    let report = read_json(&json);
    assert_eq!(report["lost"], 0, "{report}");
}

/// Restores `dir/chk` with `args` and two injected failures into
/// `dir/r.json`: `result: ok`, 0 lost, 0 duplicated. Returns the JSON
/// report and the run's output.
fn restored_exactly(dir: &Path, args: &[&str]) -> (Value, Output) {
    let chk = dir.join("chk");
    let json = dir.join("r.json");
    let mut all = vec!["--restore", chk.to_str().unwrap()];
    all.extend_from_slice(args);
    all.extend(["--inject-failures", "2", "--json", json.to_str().unwrap()]);
    let o = loadgen(&all);
    assert_ok(&o);
    let report = read_json(&json);
    assert_eq!(
        (&report["lost"], &report["duplicated"]),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "{report}"
    );
    (report, o)
}

#[test]
fn a_killed_run_restores_at_another_parallelism_exactly_across_failures() {
    // Issue 14: sources (128 splits) and keyed_sum (key groups) rescale
    // from 2 to 3, with two failures after the rescale.
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let run_args = [
        "--workload",
        "w1",
        "--records",
        "10000000",
        "--parallelism",
        "2",
        "--checkpoint-interval-ms",
        "50",
    ];
    kill_after_checkpoints(&run_args, &chk, 1);
    let (report, o) = restored_exactly(dir.path(), &["--parallelism", "3"]);
    assert_eq!(report["config"]["parallelism"], 3, "{report}");
    assert_eq!(report["rescaled_from"], 2, "{report}");
    assert_eq!(
        report["failures"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    let (out, _) = text(&o);
    assert!(out.contains("rescaled from parallelism 2 to 3"), "{out}");
}

#[test]
fn w4_is_not_restored_at_another_parallelism() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let o = loadgen(&[
        "--workload",
        "w4",
        "--duration",
        "0.3",
        "--warmup",
        "0",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
    ]);
    assert_ok(&o);
    let o = loadgen(&["--restore", chk.to_str().unwrap(), "--parallelism", "3"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("W4 cannot be restored at another parallelism"),
        "{err}"
    );
}

/// The child's stderr, read up to its first progress line (`[  1.0 s] …`):
/// the run is under way.
fn after_progress(child: &mut std::process::Child) -> BufReader<std::process::ChildStderr> {
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr closed");
        if line.starts_with('[') {
            return err;
        }
    }
}

#[test]
fn ctrl_c_stops_cleanly_with_a_report() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("i.json");
    let mut child = bin()
        .args([
            "loadgen",
            "--duration",
            "60",
            "--warmup",
            "0",
            "--rate",
            "20000",
            "--progress",
            "always",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first progress line says the run is under way.
    // Kept open to the end: a closed pipe would end the child.
    let _err = after_progress(&mut child);
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(130), "{out}");
    assert!(out.contains("INTERRUPTED"), "{out}");
    assert!(last_line(&out).starts_with("result: interrupted"), "{out}");
    assert!(out.contains("not sent (interrupted)"), "{out}");
    let j = read_json(&json);
    assert_eq!(j["interrupted"], true);
    assert_eq!(j["ok"], false);
    // No duplicate and nothing wrong in what was delivered; what the stop
    // cut off was never sent, not lost.
    assert_eq!(j["duplicated"], 0);
    assert_eq!(j["lost"], 0);
    let not_sent = j["not_sent"].as_u64().unwrap();
    assert!(not_sent > 0);
    let check = j["check"].as_str().unwrap();
    assert!(
        check.starts_with("interrupted:") && !check.contains("MISMATCH"),
        "{check}"
    );
    // report show and report compare use the same word.
    for cmd in [&["show"][..], &["compare", "-"]] {
        let mut args = vec!["report"];
        args.extend(cmd.iter().filter(|a| **a != "-"));
        args.push(json.to_str().unwrap());
        if cmd.len() > 1 {
            args.push(json.to_str().unwrap());
        }
        let o = bin().args(&args).output().unwrap();
        let (out, err) = text(&o);
        assert!(
            out.contains("interrupted") && !out.contains("FAILED"),
            "{args:?}: {out}{err}"
        );
    }
}

#[test]
fn a_second_ctrl_c_quits_at_once_and_removes_the_temporary_folder() {
    let _g = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = bin()
        .env("TMPDIR", tmp.path())
        .args([
            "loadgen",
            "--duration",
            "60",
            "--warmup",
            "0",
            "--rate",
            "20000",
            "--progress",
            "always",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = after_progress(&mut child);
    let mut line = String::new();
    // The run's temporary checkpoint folder is under TMPDIR.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    let int = || {
        let st = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    };
    int();
    // The first one is seen (the stop begins) before the second is sent.
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr closed");
        if line.starts_with("interrupted") {
            break;
        }
    }
    int();
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{rest}");
    // Either the stop finished first (a normal interrupted report) or the
    // second Ctrl-C quit at once with its one line; the folder is gone
    // in both cases.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        rest.contains("interrupted twice: quit at once") || out.contains("result: interrupted"),
        "{rest}{out}"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the temporary checkpoint folder is left behind: {:?} {rest} {out}",
        std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_run_killed_on_threads_restores_exactly_on_cooperative_workers() {
    // Threading is not state: a checkpoint of a thread-per-task run
    // restores on workers. 5 workers asked, parallelism 2: 2 run.
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let run_args = [
        "--workload",
        "w1",
        "--records",
        "10000000",
        "--checkpoint-interval-ms",
        "50",
    ];
    kill_after_checkpoints(&run_args, &chk, 1);
    let (report, o) = restored_exactly(dir.path(), &["--workers", "5"]);
    assert_eq!(report["config"]["workers"], 2, "{report}");
    // W1 paces no source: no tick recorded.
    assert!(report["config"]["tick_us"].is_null(), "{report}");
    let (out, err) = text(&o);
    assert!(out.contains("2 cooperative workers"), "{out}");
    assert!(
        err.contains("--workers 5 with parallelism 2") && err.contains("so 2 workers run"),
        "{err}"
    );
}

/// On cooperative workers the paced sources' tick defaults to
/// `WORKERS_TICK_US` (2 µs); `--tick-us` still sets it.
#[test]
fn the_source_tick_defaults_to_2_us_on_workers() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    for (extra, tick) in [(&[][..], 2), (&["--tick-us", "7"][..], 7)] {
        let json = dir.path().join(format!("tick{tick}.json"));
        let mut args = SHORT_W2.to_vec();
        args.extend([
            "--workers",
            "2",
            "--checkpoint",
            "none",
            "--quiet",
            "--json",
        ]);
        args.push(json.to_str().unwrap());
        args.extend(extra);
        let o = loadgen(&args);
        assert_ok(&o);
        let j = read_json(&json);
        assert_eq!(j["config"]["tick_us"], tick, "{}", j["config"]);
        assert_eq!(j["config"]["workers"], 2);
    }
}

#[test]
fn spinning_with_more_task_threads_than_cores_is_warned_about() {
    let _g = heavy();
    let o = loadgen(&[
        "--wait-strategy",
        "spin",
        "--parallelism",
        "2",
        "--rate",
        "2000",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--checkpoint",
        "none",
    ]);
    assert_ok(&o);
    let (_, err) = text(&o);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // 2 sources, 2 keyed sums, 1 sink.
    assert_eq!(
        err.contains("--wait-strategy spin with 5 task threads"),
        cores < 5,
        "{err}"
    );
}

/// Every bad input is refused before the run, with exit code 2 and a
/// message naming the problem.
#[test]
fn bad_inputs_are_refused_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("something"), b"x").unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let full_s = full.to_str().unwrap().to_string();
    let empty_s = empty.to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--rate", "0"], "--rate"),
        (
            vec!["--workers", "0"],
            "--workers must be between 1 and 1024",
        ),
        (
            vec!["--workers", "1025"],
            "--workers must be between 1 and 1024",
        ),
        (vec!["--rate", "-5"], "invalid value '-5' for '--rate"),
        (
            vec!["--json", "/tmp/lg-same.json", "--hlog", "/tmp/lg-same.json"],
            "--json and --hlog name the same file",
        ),
        (vec!["--duration", "-1"], "--duration"),
        (
            vec!["--parallelism", "18446744073709551615"],
            "--parallelism",
        ),
        (vec!["--parallelism", "65"], "--parallelism"),
        (vec!["--batch-size", "18446744073709551615"], "--batch-size"),
        (
            vec!["--channel-capacity", "100000000"],
            "--channel-capacity",
        ),
        (vec!["--duration", "0"], "--duration"),
        (vec!["--duration", "-1"], "--duration"),
        (vec!["--workload", "w1", "--rate", "1000"], "--rate"),
        (vec!["--workload", "w1", "--duration", "1"], "--duration"),
        (vec!["--workload", "w1", "--warmup", "1"], "--warmup"),
        (
            vec!["--workload", "w1", "--tick-us", "5"],
            "--tick-us applies to the paced workloads (w2, w3) only; w1",
        ),
        (
            vec!["--workload", "w4", "--tick-us", "5"],
            "--tick-us applies to the paced workloads (w2, w3) only; w4",
        ),
        (vec!["--tick-us", "0"], "--tick-us must be at least 1"),
        (vec!["--records", "10"], "--records"),
        (vec!["--workload", "w1", "--records", "0"], "--records"),
        (
            vec!["--workload", "w1", "--timeline", "/tmp/x.svg"],
            "--timeline is for W2/W3",
        ),
        (
            vec!["--inject-failures", "1", "--checkpoint", "none"],
            "--inject-failures",
        ),
        (
            vec!["--checkpoint", "none", "--checkpoint-interval-ms", "10"],
            "--checkpoint-interval-ms",
        ),
        (
            vec![
                "--checkpoint",
                "at-least-once",
                "--max-alignment-bytes",
                "10",
            ],
            "--max-alignment-bytes",
        ),
        (
            vec!["--checkpoint", "unaligned", "--max-alignment-bytes", "10"],
            "unaligned checkpoints do not align",
        ),
        (
            vec![
                "--checkpoint",
                "unaligned",
                "--aligned-checkpoint-timeout-ms",
                "5",
            ],
            "exactly-once only",
        ),
        (
            vec![
                "--checkpoint",
                "none",
                "--aligned-checkpoint-timeout-ms",
                "5",
            ],
            "--aligned-checkpoint-timeout-ms",
        ),
        (
            vec![
                "--aligned-checkpoint-timeout-ms",
                "5",
                "--max-alignment-bytes",
                "10",
            ],
            "does not apply",
        ),
        (
            vec!["--aligned-checkpoint-timeout-ms", "-1"],
            "--aligned-checkpoint-timeout-ms",
        ),
        (
            vec!["--aligned-checkpoint-timeout-ms", "18446744073709551615"],
            "--aligned-checkpoint-timeout-ms must be at most 9223372036854 ms",
        ),
        (
            vec!["--checkpoint-interval-ms", "0"],
            "--checkpoint-interval-ms",
        ),
        (vec!["--json", "/nonexistent-folder/x.json"], "--json"),
        (vec!["--hgrm", &empty_s], "--hgrm"),
        (vec!["--restore", &empty_s], "--restore"),
        (vec!["--restore", "/nonexistent-folder"], "--restore"),
        (vec!["--checkpoint-dir", &full_s], "not empty"),
        (vec!["--keys", "0"], "--keys"),
        (vec!["--key-dist", "zipf:-1"], "--key-dist"),
        (vec!["--key-dist", "pareto"], "--key-dist"),
        (vec!["--pin", "banana"], "--pin"),
        (vec!["--pin", "4096"], "--pin"),
        (vec!["--parallelism", "0"], "--parallelism"),
        (vec!["--batch-size", "0"], "--batch-size"),
        (vec!["--channel-capacity", "0"], "--channel-capacity"),
        (vec!["--payload-bytes", "100000000"], "--payload-bytes"),
        (vec!["--workload", "w5"], "w5"),
        (vec!["--quiet", "--progress", "always"], "--quiet"),
        (vec!["--rate", "abc"], "--rate"),
        (vec!["--full-every", "0"], "--full-every"),
        (vec!["--max-chain-ratio=-1"], "--max-chain-ratio"),
        (vec!["--max-chain-ratio", "0"], "--max-chain-ratio"),
        (vec!["--max-chain-ratio", "NaN"], "--max-chain-ratio"),
        (vec!["--incremental", "maybe"], "--incremental"),
        (
            vec!["--checkpoint", "none", "--incremental", "false"],
            "--incremental needs checkpoints",
        ),
        (
            vec!["--checkpoint", "none", "--full-every", "3"],
            "--full-every needs checkpoints",
        ),
    ];
    for (args, needle) in cases {
        let o = loadgen(&args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}{err}");
        assert!(
            err.contains(needle),
            "{args:?}: stderr does not name {needle}: {err}"
        );
        assert!(out.is_empty(), "{args:?} printed: {out}");
    }
    // Nothing was left behind by the path checks.
    assert!(!Path::new("/nonexistent-folder").exists());
}

#[test]
fn version_is_printed() {
    for args in [&["--version"][..], &["loadgen", "--version"]] {
        let o = bin().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0));
        // `lockgate 0.1.0 (commit abcdef1)`: the commit the JSON names too.
        let out = String::from_utf8_lossy(&o.stdout);
        let (name, rest) = out.trim().split_once(' ').unwrap();
        assert!(name.starts_with("lockgate"), "{out}");
        let commit = rest
            .strip_prefix(concat!(env!("CARGO_PKG_VERSION"), " (commit "))
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(!commit.is_empty() && !commit.contains(' '), "{out}");
    }
}

/// With many keys and a low rate few keys change between two checkpoints:
/// incremental checkpoints write deltas, smaller than the state, and the
/// run is still exact; `--incremental false` writes full ones only.
#[test]
fn incremental_checkpoints_write_deltas_and_can_be_turned_off() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    for incremental in ["true", "false"] {
        let json = dir.path().join(format!("{incremental}.json"));
        let mut args = SHORT_W2.to_vec();
        args.extend([
            "--keys",
            "200000",
            "--checkpoint-interval-ms",
            "50",
            "--incremental",
            incremental,
            "--json",
            json.to_str().unwrap(),
        ]);
        let o = loadgen(&args);
        assert_ok(&o);
        let j = read_json(&json);
        assert_eq!(
            j["config"]["incremental"]["incremental"],
            incremental == "true"
        );
        let done: Vec<&Value> = j["checkpoints"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["status"] == "completed")
            .collect();
        let deltas: Vec<&&Value> = done.iter().filter(|c| c["incremental"] == true).collect();
        if incremental == "false" {
            assert!(deltas.is_empty(), "{deltas:?}");
            continue;
        }
        assert!(
            !deltas.is_empty(),
            "no delta among {} checkpoints",
            done.len()
        );
        // A subtask's delta is smaller than its state; how much smaller
        // depends on how many keys changed since the base, which lags when
        // a checkpoint is slow: at least one checkpoint writes less than
        // half its state.
        let mut smallest = f64::MAX;
        for c in deltas {
            for t in c["subtasks"].as_array().unwrap() {
                let (written, state) = (
                    t["checkpointed_bytes"].as_u64().unwrap(),
                    t["state_bytes"].as_u64().unwrap(),
                );
                // A delta is smaller than the full state; the part on disk
                // adds its 18-byte frame header (MAGIC, version, length, CRC).
                if t["incremental"] == true {
                    assert!(
                        written < state + 18,
                        "a delta of {written} B for {state} B: {t}"
                    );
                }
            }
            let ratio =
                c["checkpointed_bytes"].as_f64().unwrap() / c["state_bytes"].as_f64().unwrap();
            smallest = smallest.min(ratio);
        }
        assert!(
            smallest < 0.5,
            "no checkpoint wrote less than half its state: {smallest}"
        );
    }
}
