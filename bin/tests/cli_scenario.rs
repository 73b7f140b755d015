//! `lockgate scenario`, run as a process: the bundled scenarios (Flink's and
//! lockgate's `lg_*` watermark files), a failing file, unreadable files,
//! `--emit`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lockgate(args: &[&str]) -> Output {
    // Run from a directory without testdata, so that the bundled copies and
    // only they can be found.
    let cwd = tempfile::tempdir().expect("temp dir");
    Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(args)
        .current_dir(cwd.path())
        .output()
        .expect("the lockgate binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("UTF-8 stderr")
}

fn scenario_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/scenarios")
}

/// The names of the project's scenario files, sorted.
fn scenario_file_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(scenario_dir())
        .expect("testdata/scenarios exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

fn scenario_path(name: &str) -> String {
    scenario_dir().join(name).to_string_lossy().into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

#[test]
fn with_no_file_every_bundled_scenario_passes() {
    let o = lockgate(&["scenario"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let files = scenario_file_names();
    let lines: Vec<&str> = out.lines().collect();
    // One PASS line per file of testdata/scenarios (the bundled list must
    // name them all), then the summary.
    assert_eq!(lines.len(), files.len() + 1, "{out}");
    for (line, file) in lines.iter().zip(&files) {
        assert_eq!(*line, format!("PASS {}", file.trim_end_matches(".json")));
    }
    assert_eq!(
        lines.last().copied(),
        Some(format!("{} passed, 0 failed", files.len()).as_str())
    );
}

#[test]
fn a_wrong_expectation_fails_with_exit_code_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let name = "bb18_multi_channel_abort_checkpoint.json";
    let text = std::fs::read_to_string(scenario_dir().join(name)).expect("readable");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    json["expect_notifications"][0]["after_output"] = serde_json::json!(99);
    let wrong = dir.path().join("wrong.json");
    std::fs::write(&wrong, json.to_string()).expect("written");

    let o = lockgate(&["scenario", path_str(&wrong), &scenario_path(name)]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        vec![
            "FAIL bb18_multi_channel_abort_checkpoint: notification[0]: expected triggered 1 \
             after 99 outputs, got triggered 1 after 3 outputs",
            "PASS bb18_multi_channel_abort_checkpoint",
            "1 passed, 1 failed",
        ]
    );
}

#[test]
fn unreadable_files_are_reported_and_the_others_still_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "this is not JSON").expect("written");
    let missing = dir.path().join("missing.json");
    let bad_channel = dir.path().join("bad_channel.json");
    let name = "cbt120_single_channel_with_barriers.json";
    let text = std::fs::read_to_string(scenario_dir().join(name)).expect("readable");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    json["input"][0]["ch"] = serde_json::json!(5);
    std::fs::write(&bad_channel, json.to_string()).expect("written");

    let o = lockgate(&[
        "scenario",
        path_str(&garbage),
        &scenario_path(name),
        path_str(&missing),
        path_str(&bad_channel),
    ]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![
            "PASS cbt120_single_channel_with_barriers",
            "1 passed, 0 failed"
        ]
    );
    let err_lines: Vec<&str> = err.lines().collect();
    assert_eq!(err_lines.len(), 4, "{err}");
    assert_eq!(
        err_lines[3],
        "3 files could not be read or parsed (see above)"
    );
    assert!(err_lines[0].starts_with(&format!("{}: bad scenario JSON", garbage.display())));
    assert!(err_lines[1].starts_with(&format!("{}: cannot read", missing.display())));
    assert!(err_lines[2].starts_with(&format!(
        "{}: input[0]: channel 5 out of range",
        bad_channel.display()
    )));
}

#[test]
fn emit_prints_what_the_handler_did_in_the_files_shapes() {
    // For a scenario that passes the exact check, the emitted run is the
    // file's own expectation.
    let name = "bb18_ignore_cancel_barrier_if_checkpoint_subsumed.json";
    let o = lockgate(&["scenario", "--emit", &scenario_path(name)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let emitted: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(scenario_dir().join(name)).unwrap()).unwrap();
    assert_eq!(emitted["output"], file["expect_output"]);
    assert_eq!(emitted["notifications"], file["expect_notifications"]);
    assert_eq!(emitted.as_object().map(|m| m.len()), Some(2));

    // A file with watermark and idle items: they are emitted in their
    // shapes, among the buffers, as the file expects them.
    let name = "lg_watermark_held_while_blocked.json";
    let o = lockgate(&["scenario", "--emit", &scenario_path(name)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(r#"{"ch":0,"watermark":20}"#), "{out}");
    assert!(out.contains(r#"{"ch":1,"idle":true}"#), "{out}");
    let emitted: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(scenario_dir().join(name)).unwrap()).unwrap();
    assert_eq!(emitted["output"], file["expect_output"]);
    assert_eq!(emitted["notifications"], file["expect_notifications"]);

    let o = lockgate(&["scenario", "--emit", "/nonexistent/x.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/x.json: cannot read"));
    assert!(stdout(&o).is_empty());
}
