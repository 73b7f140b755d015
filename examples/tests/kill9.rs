//! A job killed with SIGKILL restarts from its checkpoint folder and its
//! committed output is exactly that of a run that was never killed.

use lockgate_examples::demo::expected_lines;
use lockgate_operators::file_sink::read_committed;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lockgate-txn-demo");

fn committed(dir: &std::path::Path) -> Vec<String> {
    let text = String::from_utf8(read_committed(dir).unwrap()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn has_checkpoint(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("chk-"))
        })
        .unwrap_or(false)
}

#[test]
fn a_killed_job_resumes_from_its_checkpoints_with_exact_output() {
    let n = 60_000; // ~0.5 s at 2 × 64 records per ms
    let out = tempfile::tempdir().unwrap();
    let chk = tempfile::tempdir().unwrap();
    let args = |restore: bool| {
        let mut c = Command::new(BIN);
        c.arg("--out")
            .arg(out.path())
            .arg("--checkpoint-dir")
            .arg(chk.path());
        c.arg("--records").arg(n.to_string());
        if restore {
            c.arg("--restore");
        }
        c
    };
    let mut child = args(false).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !has_checkpoint(chk.path()) {
        assert!(Instant::now() < deadline, "no checkpoint was written");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the job must still be running when killed"
    );
    child.kill().unwrap(); // SIGKILL on Unix
    let _ = child.wait();
    assert!(
        committed(out.path()).len() < n as usize,
        "killed before the end"
    );
    let status = args(true).status().unwrap();
    assert!(status.success(), "the restored run failed: {status}");
    let got = committed(out.path());
    let want = expected_lines(n);
    assert_eq!(got.len(), want.len(), "records lost or duplicated");
    assert!(
        got == want,
        "committed output differs from a failure-free run"
    );
}

#[test]
fn bad_arguments_are_refused_with_exit_code_2() {
    let out = Command::new(BIN)
        .arg("--records")
        .arg("many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--records"));
}
