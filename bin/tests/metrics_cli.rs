//! `--metrics-addr`, `--metrics-linger` and `-v`/`-vv` as a user meets
//! them: `/metrics` and `/health` over HTTP while a loadgen run goes and
//! after its report, bad addresses refused before the job starts, the
//! recovery and checkpoint spans on stderr.

use lockgate_cli::metrics_http::http_get;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

mod common;
use common::{bin, heavy};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn lockgate(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

/// A short W2 run, exactly-once, 10 ms checkpoints.
const W2: &[&str] = &[
    "loadgen",
    "--workload",
    "w2",
    "--rate",
    "20000",
    "--warmup",
    "0",
    "--checkpoint",
    "exactly-once",
    "--checkpoint-interval-ms",
    "10",
];

/// Refused with exit 2 before any job: no report, `msg` on stderr.
fn assert_refused(o: &Output, msg: &str) {
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains(msg), "{err}");
    assert!(!out.contains("result:"), "a job ran: {out}");
    assert!(!err.contains("metrics: serving"), "{err}");
}

#[test]
fn a_bad_or_taken_metrics_address_exits_2_before_the_job_starts() {
    for (addr, msg) in [
        ("nonsense", "--metrics-addr 'nonsense': no port"),
        ("127.0.0.1:99999", "'99999' is not a port"),
        (":http", "'http' is not a port"),
        (
            "no-such-host.invalid:9249",
            "cannot resolve 'no-such-host.invalid'",
        ),
        // Not an address of this machine.
        ("192.0.2.1:9249", "cannot listen on 192.0.2.1:9249"),
    ] {
        let mut args = W2.to_vec();
        args.extend(["--duration", "1", "--metrics-addr", addr]);
        assert_refused(&lockgate(&args), msg);
    }
    // Taken: a listener of this test holds it.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut args = W2.to_vec();
    args.extend(["--duration", "1", "--metrics-addr", &port]);
    assert_refused(
        &lockgate(&args),
        &format!("cannot listen on 127.0.0.1:{port}"),
    );
    // The other commands that run a job refuse it the same way.
    let out = tempfile::tempdir().unwrap();
    let o = lockgate(&[
        "flights",
        "--out",
        out.path().to_str().unwrap(),
        "--metrics-addr",
        &port,
    ]);
    assert_refused(&o, "cannot listen on");
    assert!(std::fs::read_dir(out.path()).unwrap().next().is_none());
    let o = lockgate(&[
        "kafka",
        "run",
        "--bootstrap",
        "127.0.0.1:1",
        "--input",
        "in",
        "--output",
        "out",
        "--metrics-addr",
        "nonsense",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("--metrics-addr 'nonsense'"),
        "{}",
        text(&o.stderr)
    );
    // A linger with nothing to serve.
    let mut args = W2.to_vec();
    args.extend(["--duration", "1", "--metrics-linger", "2"]);
    assert_refused(&lockgate(&args), "--metrics-linger needs --metrics-addr");
}

/// stderr's lines as they come.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line holding `needle`; every line read goes to `seen`.
fn wait_line(rx: &Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push(l.clone());
            if l.contains(needle) {
                return l;
            }
        }
    }
    panic!("no line with {needle:?} in:\n{}", seen.join("\n"));
}

/// The value of the series `name{labels}` in Prometheus text.
fn series(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

const JOB: &str = "job_name=\"lockgate-reference\"";

#[test]
fn metrics_and_health_are_served_while_the_job_runs_and_after_its_report() {
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut args = W2.to_vec();
    args.extend([
        "--duration",
        "2",
        // The reference sink commits at each checkpoint and sets the
        // committed-output lag.
        "--output",
        "committed",
        "--metrics-addr",
        "127.0.0.1:0",
        "--metrics-linger",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut child = bin()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut child);
    let mut seen = Vec::new();
    let line = wait_line(&rx, "metrics: serving http://", &mut seen);
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(addr.ip().is_loopback(), "{addr}");

    // While it runs: healthy, and the task counters grow.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut health = (0, String::new());
    while Instant::now() < deadline {
        health = http_get(addr, "/health").unwrap();
        if health.0 == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(health, (200, "running\n".to_string()));
    let records = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("lockgate_records_in_total{") && l.contains(JOB))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let (code, first) = http_get(addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    // Polled until the sampler (every 100 ms) has published more records.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut second = first.clone();
    while records(&second) <= records(&first) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        second = http_get(addr, "/metrics").unwrap().1;
    }
    assert!(
        records(&second) > records(&first),
        "{} then {}",
        records(&first),
        records(&second)
    );
    assert!(second.contains("# TYPE lockgate_checkpoint_duration_seconds histogram"));
    assert_eq!(http_get(addr, "/nothing").unwrap().0, 404);

    // After the report, during the linger: not healthy, the final figures.
    wait_line(&rx, "(--metrics-linger)", &mut seen);
    let (code, body) = http_get(addr, "/health").unwrap();
    assert_eq!((code, body.as_str()), (503, "the job finished\n"));
    let (_, text) = http_get(addr, "/metrics").unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let completed = j["checkpoints"]["completed"].as_u64().unwrap();
    assert!(completed > 10, "{j}");
    assert_eq!(
        series(&text, "lockgate_checkpoints_completed_total", JOB),
        Some(completed as f64),
        "{text}"
    );
    assert_eq!(
        series(&text, "lockgate_checkpoint_duration_seconds_count", JOB),
        Some(completed as f64)
    );
    assert_eq!(series(&text, "lockgate_job_healthy", JOB), Some(0.0));
    assert_eq!(series(&text, "lockgate_job_state", JOB), Some(3.0));
    assert!(records(&text) > 0.0);
    // The last commit's lag: the oldest record it committed, in seconds
    // (not ns), no later than the run's largest committed latency.
    let lag = series(
        &text,
        "lockgate_committed_output_lag_seconds",
        &format!("{JOB},task=\"sink\",subtask=\"0\""),
    )
    .unwrap_or_else(|| panic!("no committed-output lag: {text}"));
    let max_s = j["committed_latency_ns"]["max"].as_f64().unwrap() / 1e9;
    assert!(
        lag > 0.0 && lag <= max_s * 1.01,
        "lag {lag} s, max {max_s} s"
    );

    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{out}\n{}", seen.join("\n"));
    assert!(out.trim_end().ends_with("result: ok"), "{out}");
    // The linger ended with the process: nothing listens any more.
    assert!(http_get(addr, "/health").is_err());
}

#[test]
fn v_prints_the_recovery_span_and_vv_the_checkpoint_spans() {
    let _g = heavy();
    let run = |verbose: Option<&str>| {
        let mut args = W2.to_vec();
        args.extend(["--duration", "1", "--inject-failures", "1", "--seed", "3"]);
        if let Some(v) = verbose {
            args.push(v);
        }
        let o = lockgate(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stderr)
    };
    let quiet = run(None);
    assert!(!quiet.contains("recovery{"), "{quiet}");
    assert!(!quiet.contains("checkpoint{"), "{quiet}");

    let info = run(Some("-v"));
    let recovery: Vec<&str> = info
        .lines()
        .filter(|l| l.contains("recovery{") && l.contains("close"))
        .collect();
    assert_eq!(recovery.len(), 1, "{info}");
    let r = recovery[0];
    assert!(r.contains("INFO"), "{r}");
    for field in ["restart=1", "checkpoint=", "state_bytes=", "duration_ms="] {
        assert!(r.contains(field), "{field}: {r}");
    }
    assert!(!info.contains("checkpoint{"), "{info}");

    let debug = run(Some("-vv"));
    let checkpoints = debug
        .lines()
        .filter(|l| l.contains("checkpoint{") && l.contains("close"))
        .count();
    assert!(checkpoints > 10, "{debug}");
    assert!(debug.contains("subtask part"), "{debug}");
    assert!(debug.contains("recovery{"), "{debug}");
}
