//! `lockgate kafka produce | run | verify` driven as a user drives them,
//! against tansu (a Kafka-API broker, see `lockgate_cli::kafka::TestBroker`):
//! several processes sharing a topic's partitions, one killed with
//! SIGKILL mid-run and restored from its folder. Skipped, saying so, when
//! tansu is not installed, unless `LOCKGATE_REQUIRE_KAFKA=1`. The input
//! errors that need no broker run everywhere.

use lockgate_cli::kafka::TestBroker;
use std::path::Path;
use std::process::{Child, Output, Stdio};

mod common;
use common::{bin, heavy, wait_for_checkpoints};

fn kafka(args: &[&str]) -> Output {
    bin()
        .arg("kafka")
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Asserts exit status 2 (bad input) with `why` in the output.
fn assert_refused(o: &Output, why: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    assert!(text(o).contains(why), "{}", text(o));
}

/// `lockgate kafka` with these whitespace-separated words.
fn kafka_words(words: &str) -> Output {
    kafka(&words.split_whitespace().collect::<Vec<_>>())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn run_args<'a>(
    bootstrap: &'a str,
    input: &'a str,
    output: &'a str,
    processes: &'a str,
    index: &'a str,
    dir: &'a str,
) -> Vec<&'a str> {
    vec![
        "run",
        "--bootstrap",
        bootstrap,
        "--input",
        input,
        "--output",
        output,
        "--processes",
        processes,
        "--index",
        index,
        "--sink",
        "at-least-once",
        "--checkpoint",
        "exactly-once",
        "--checkpoint-interval-ms",
        "100",
        "--checkpoint-dir",
        dir,
    ]
}

fn assert_ok(o: &Output, what: &str) {
    let t = text(o);
    assert!(o.status.success(), "{what}: {t}");
    assert!(t.contains("result: ok"), "{what}: {t}");
}

/// Creates topic `in` (4 partitions), then starts writing `records`
/// records into it at 20,000 records/s (so a run reading it is surely
/// mid-run for a while).
fn start_producer(bs: &str, records: &str) -> Child {
    let o = kafka_words(&format!(
        "produce --bootstrap {bs} --topic in --partitions 4 --records 0"
    ));
    assert!(o.status.success(), "{}", text(&o));
    bin()
        .args(["kafka", "produce", "--bootstrap", bs, "--topic", "in"])
        .args(["--partitions", "4", "--records", records, "--rate", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `processes` processes on a 4-partition topic of `records` records,
/// process 0 killed with SIGKILL mid-run (while the input is still being
/// produced, so that it is surely mid-run) and restored from its folder;
/// then `verify --guarantee at-least-once`.
fn killed_and_restored(processes: u32, records: u64) {
    let Some(b) = TestBroker::for_test() else {
        return;
    };
    let _g = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let bs = b.bootstrap();
    let procs = processes.to_string();
    let recs = records.to_string();
    // The topic first, then the records at a rate, beside the victim.
    let mut producer = start_producer(bs, &recs);
    let dir0 = tmp.path().join("p0");
    let d0 = dir0.to_str().unwrap();
    // Unbounded: it reads as the records arrive.
    let mut victim = bin()
        .arg("kafka")
        .args(run_args(bs, "in", "out", &procs, "0", d0))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_checkpoints(&dir0, &mut victim, 3, 120);
    assert!(
        producer.try_wait().unwrap().is_none(),
        "the input was all produced before the kill: not mid-run"
    );
    victim.kill().unwrap(); // SIGKILL
    let _ = victim.wait();
    let produced = producer.wait_with_output().unwrap();
    assert!(produced.status.success(), "{}", text(&produced));
    // The victim's restore (`--restore DIR` alone: the rest is the
    // checkpoint's; bounded now) and the other processes, bounded.
    let o = kafka_words(&format!("run --bootstrap {bs} --restore {d0} --bounded"));
    assert_ok(&o, "the restored process 0");
    assert!(text(&o).contains("restored: chk-"), "{}", text(&o));
    for i in 1..processes {
        let dir = tmp.path().join(format!("p{i}"));
        let idx = i.to_string();
        let mut args = run_args(bs, "in", "out", &procs, &idx, dir.to_str().unwrap());
        args.push("--bounded");
        assert_ok(&kafka(&args), &format!("process {i}"));
    }
    let o = kafka_words(&format!(
        "verify --bootstrap {bs} --topic out --records {recs} --guarantee at-least-once"
    ));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("lost: 0\n") && t.contains("sums: ok\n") && t.ends_with("result: ok\n"),
        "{t}"
    );
    // The same output fails the exactly-once check only by its duplicates.
    let o = kafka_words(&format!(
        "verify --bootstrap {bs} --topic out --records {recs}"
    ));
    let t = text(&o);
    if t.contains("duplicated: 0\n") {
        assert!(o.status.success(), "{t}");
    } else {
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(
            t.contains("result: FAILED (") && t.contains("duplicated)"),
            "{t}"
        );
    }
}

/// `produce --records 0` creates the topic and writes nothing.
fn assert_ok_or_produced(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

#[test]
fn two_processes_one_killed_and_restored_lose_nothing() {
    killed_and_restored(2, 60_000);
}

#[test]
fn one_process_killed_and_restored_loses_nothing() {
    killed_and_restored(1, 30_000);
}

#[test]
fn four_processes_one_killed_and_restored_lose_nothing() {
    killed_and_restored(4, 40_000);
}

#[test]
fn verify_finds_lost_records_and_bad_input_is_refused() {
    let Some(b) = TestBroker::for_test() else {
        return;
    };
    let _g = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let bs = b.bootstrap();
    assert_ok_or_produced(&kafka_words(&format!(
        "produce --bootstrap {bs} --topic in --partitions 2 --records 1000 --keys 10"
    )));
    // Another partition count for an existing topic.
    let o = kafka_words(&format!(
        "produce --bootstrap {bs} --topic in --partitions 3 --records 1"
    ));
    assert_refused(&o, "exists with 2 partitions, not 3");
    // A missing input topic.
    let o = kafka_words(&format!("run --bootstrap {bs} --input nope --output o"));
    assert_refused(&o, "topic `nope` does not exist");
    // Only process 0 of 2 runs: verify finds the other half missing.
    let dir = tmp.path().join("p0");
    let mut args = run_args(bs, "in", "out", "2", "0", dir.to_str().unwrap());
    args.push("--bounded");
    assert_ok(&kafka(&args), "process 0");
    let o = kafka_words(&format!(
        "verify --bootstrap {bs} --topic out --records 1000 --keys 10"
    ));
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        !t.contains("lost: 0\n") && t.contains("result: FAILED ("),
        "{t}"
    );
    // Its folder restored as another process, or with another count.
    for (procs, index, why) in [
        ("2", "1", "index: 0 → 1"),
        ("4", "0", "the folders of old processes [1] are missing"),
    ] {
        let mut args = run_args(bs, "in", "out", procs, index, dir.to_str().unwrap());
        args.retain(|a| !a.starts_with("--checkpoint-dir") && *a != dir.to_str().unwrap());
        args.extend(["--restore", dir.to_str().unwrap()]);
        let o = kafka(&args);
        assert_refused(&o, why);
    }
}

#[test]
fn bad_flags_are_refused_before_anything_is_written() {
    assert_refused(
        &kafka_words("run --bootstrap 127.0.0.1:1 --input t --output t"),
        "--input and --output are both `t`",
    );
    assert_refused(
        &kafka_words("produce --bootstrap 127.0.0.1:1 --topic bad/name --partitions 1 --records 1"),
        "a topic name has only ASCII letters",
    );
    assert_refused(
        &kafka_words("run --bootstrap 127.0.0.1:1 --output o"),
        "--input is needed",
    );
    let o = kafka_words("run --bootstrap 127.0.0.1:1 --input a --output b --processes 2 --index 2");
    assert_refused(&o, "--index 2 is not below --processes 2");
    let o = kafka_words("produce --bootstrap 127.0.0.1:1 --topic t --partitions 0 --records 1");
    assert_refused(&o, "--partitions must be between 1");
    // No broker: refused within the connect timeout (5 s) and a little.
    let o = kafka_words("verify --bootstrap 127.0.0.1:1 --topic t --records 1");
    assert_refused(&o, "no Kafka broker reachable at 127.0.0.1:1 within 5 s");
}

/// Starts process `index` of `processes`, unbounded, checkpointing to
/// `dir`.
fn spawn_run(bs: &str, processes: &str, index: &str, dir: &Path) -> Child {
    bin()
        .arg("kafka")
        .args(run_args(
            bs,
            "in",
            "out",
            processes,
            index,
            dir.to_str().unwrap(),
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn two_killed_processes_restart_as_four_from_both_folders() {
    let Some(b) = TestBroker::for_test() else {
        return;
    };
    let _g = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let bs = b.bootstrap();
    let records = "60000";
    let mut producer = start_producer(bs, records);
    let old: Vec<_> = (0..2).map(|i| tmp.path().join(format!("old{i}"))).collect();
    let mut runs: Vec<Child> = (0..2)
        .map(|i| spawn_run(bs, "2", &i.to_string(), &old[i]))
        .collect();
    for (dir, child) in old.iter().zip(runs.iter_mut()) {
        wait_for_checkpoints(dir, child, 3, 120);
    }
    assert!(
        producer.try_wait().unwrap().is_none(),
        "not mid-run: the input was all produced"
    );
    for mut c in runs {
        c.kill().unwrap(); // SIGKILL
        let _ = c.wait();
    }
    let produced = producer.wait_with_output().unwrap();
    assert!(produced.status.success(), "{}", text(&produced));
    let from = format!("{},{}", old[0].display(), old[1].display());
    // Three processes do not divide the four partitions.
    let new0 = tmp.path().join("new0");
    let o = kafka_words(&format!("run --bootstrap {bs} --input in --output out --processes 3 --index 0 --restore {from} --checkpoint-dir {}", new0.display()));
    assert_refused(&o, "--processes 3: it must divide the 4 partitions");
    // Writing on into an old folder is refused.
    let o = kafka_words(&format!("run --bootstrap {bs} --input in --output out --processes 4 --index 0 --restore {from} --checkpoint-dir {}", old[0].display()));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for i in 0..4 {
        let dir = tmp.path().join(format!("new{i}"));
        let idx = i.to_string();
        let o = kafka_words(&format!("run --bootstrap {bs} --input in --output out --processes 4 --index {idx} --bounded --restore {from} --checkpoint-dir {}", dir.display()));
        assert_ok(&o, &format!("new process {i}"));
        assert!(
            text(&o).contains("restoring from the 2 folders of 2 processes"),
            "{}",
            text(&o)
        );
    }
    let o = kafka_words(&format!(
        "verify --bootstrap {bs} --topic out --records {records} --guarantee at-least-once"
    ));
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("lost: 0\n") && t.contains("sums: ok\n"),
        "{t}"
    );
    // The new folders restore as their own processes' (nothing left).
    let new1 = tmp.path().join("new1");
    let o = kafka_words(&format!("run --bootstrap {bs} --input in --output out --processes 4 --index 1 --bounded --restore {}", new1.display()));
    assert_ok(&o, "new process 1 again");
}

/// Ctrl-C (SIGINT) during an unbounded run: it drains, takes a final
/// checkpoint, says it was interrupted (exit 130), and a restore of its
/// folder goes on from there.
#[test]
fn ctrl_c_stops_an_unbounded_run_that_a_restore_resumes() {
    use std::io::{BufRead, BufReader};
    let Some(b) = TestBroker::for_test() else {
        return;
    };
    let _g = heavy();
    let tmp = tempfile::tempdir().unwrap();
    let bs = b.bootstrap();
    let o = kafka_words(&format!(
        "produce --bootstrap {bs} --topic in --partitions 2 --records 2000"
    ));
    assert!(o.status.success(), "{}", text(&o));
    let dir = tmp.path().join("k");
    let mut child = bin()
        .arg("kafka")
        .args(run_args(bs, "in", "out", "1", "0", dir.to_str().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("first records read") {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("first records read")),
        "{seen:?}"
    );
    let st = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.starts_with("result: interrupted")),
        "{rest:?}"
    );
    let o = kafka_words(&format!(
        "run --bootstrap {bs} --restore {} --bounded",
        dir.display()
    ));
    assert_ok(&o, "the restore");
    let o = kafka_words(&format!(
        "verify --bootstrap {bs} --topic out --records 2000 --guarantee at-least-once"
    ));
    assert!(o.status.success(), "{}", text(&o));
}
