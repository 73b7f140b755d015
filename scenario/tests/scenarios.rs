//! Runs every scenario file of `testdata/scenarios/` (translated from Apache
//! Flink's barrier handler tests, plus lockgate's own `lg_*` files for the
//! watermark extension of `EXTENSIONS.md`) through lockgate's handlers.

use lockgate_scenario::{CheckKind, OutputItem, Scenario};
use std::path::PathBuf;

/// The project's scenario files, sorted by name.
fn scenario_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_scenario_file_passes() {
    let files = scenario_files();
    // 18 files were translated from Flink's tests and 3 (`lg_*`) written for
    // lockgate's watermark extension when this test was written; fewer
    // means some went missing.
    assert!(files.len() >= 21, "only {} scenario files", files.len());
    let lockgate_files = files
        .iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lg_"))
        })
        .count();
    assert!(lockgate_files >= 3, "only {lockgate_files} lg_* files");
    let mut failures = Vec::new();
    for file in &files {
        match Scenario::from_file(file) {
            Ok(s) => {
                if let Some(d) = s.check().difference {
                    failures.push(format!("FAIL {}: {d}", s.name));
                }
            }
            Err(e) => failures.push(format!("ERROR {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_exact_scenario_also_passes_the_semantic_check() {
    for file in scenario_files() {
        let mut s = Scenario::from_file(&file).expect("valid scenario");
        s.check = CheckKind::Semantic;
        let result = s.check();
        assert!(result.passed(), "{}: {:?}", s.name, result.difference);
    }
}

#[test]
fn a_wrong_expectation_fails_with_its_first_difference() {
    let file = scenario_files()
        .into_iter()
        .find(|f| f.ends_with("bb18_multi_channel_abort_checkpoint.json"))
        .expect("the file exists");
    let mut s = Scenario::from_file(file).expect("valid scenario");
    s.expect_notifications[1].after_output += 1;
    let d = s.check().difference.expect("must fail");
    assert!(
        d.starts_with("notification[1]: expected aborted 2 (canceled)"),
        "{d}"
    );
}

#[test]
fn a_held_watermark_expected_too_early_fails() {
    let file = scenario_files()
        .into_iter()
        .find(|f| f.ends_with("lg_watermark_held_while_blocked.json"))
        .expect("the file exists");
    let mut s = Scenario::from_file(file).expect("valid scenario");
    // Expect watermark 20 of ch 0 (held behind barrier 1) where it arrived,
    // before ch 1's watermark 15, as if it had not been held.
    let at = s
        .expect_output
        .iter()
        .position(|o| {
            *o == OutputItem::Watermark {
                ch: 0,
                watermark: 20,
            }
        })
        .expect("watermark 20 is expected");
    let held = s.expect_output.remove(at);
    s.expect_output.insert(2, held);
    let d = s.check().difference.expect("must fail");
    assert_eq!(
        d,
        "output[2]: expected watermark 20 of ch 0, got watermark 15 of ch 1"
    );
    // The semantic check finds it too: ch 0's order is broken.
    s.check = CheckKind::Semantic;
    let mut run = s.run();
    let at = run
        .output
        .iter()
        .position(|o| {
            *o == OutputItem::Watermark {
                ch: 0,
                watermark: 20,
            }
        })
        .expect("handed on");
    let wm = run.output.remove(at);
    run.output.insert(0, wm);
    let d = s.check_run(&run).difference.expect("must fail");
    assert!(
        d.contains("watermark 20 of ch 0 where ch 0 must hand on buffer 1"),
        "{d}"
    );
}
