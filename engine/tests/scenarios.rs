//! Runs every scenario file of `testdata/scenarios/` (translated from Apache
//! Flink's barrier handler tests) through lockgate's handlers.

use lockgate::scenario::Scenario;
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
    // 18 files were translated from Flink's tests when this test was written;
    // fewer means some went missing.
    assert!(files.len() >= 18, "only {} scenario files", files.len());
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
        s.check = lockgate::scenario::CheckKind::Semantic;
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
