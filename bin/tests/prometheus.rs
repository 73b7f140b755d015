//! A real Prometheus (Debian's `prometheus`, `.ci/run` installs it)
//! scrapes a loadgen run every 100 ms with `docs/prometheus.yml`, as
//! README's "Metrics, traces and health" shows; its HTTP API must return
//! the run's figures as the report gives them.
//!
//! Without a `prometheus` on `PATH` the test says so and passes, unless
//! `LOCKGATE_REQUIRE_PROMETHEUS=1` (set by `.ci/run`) makes that a
//! failure.

use lockgate::telemetry::SECONDS_BUCKETS;
use lockgate_cli::metrics_http::http_get;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{bin, heavy};

/// Kills Prometheus when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `s` percent-encoded for a URL's query.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's single value (`None`: no series).
fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let (code, body) = http_get(prom, &format!("/api/v1/query?query={}", encode(q))).unwrap();
    assert_eq!(code, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {body}");
    let result = v["data"]["result"].as_array().unwrap();
    assert!(result.len() <= 1, "{q}: {body}");
    result
        .first()
        .map(|r| r["value"][1].as_str().unwrap().parse().unwrap())
}

fn prometheus_present() -> bool {
    Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const JOB: &str = "job_name=\"lockgate-reference\"";

#[test]
fn a_real_prometheus_scrapes_a_loadgen_run_and_its_api_matches_the_report() {
    if !prometheus_present() {
        let msg = "prometheus not found on PATH (Debian: apt-get install prometheus)";
        assert!(
            std::env::var("LOCKGATE_REQUIRE_PROMETHEUS").as_deref() != Ok("1"),
            "{msg}, and LOCKGATE_REQUIRE_PROMETHEUS=1"
        );
        eprintln!("skipped: {msg}");
        return;
    }
    let _g = heavy();
    let dir = tempfile::tempdir().unwrap();
    let (port, prom_port) = (free_port(), free_port());
    // README's configuration, with this test's port.
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/prometheus.yml"
    ))
    .unwrap();
    assert!(config.contains("127.0.0.1:9249"));
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(
        &config_path,
        config.replace("127.0.0.1:9249", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let prom_addr: SocketAddr = ([127, 0, 0, 1], prom_port).into();
    let _prom = Killed(
        Command::new("prometheus")
            .arg("--config.file")
            .arg(&config_path)
            .arg("--storage.tsdb.path")
            .arg(dir.path().join("data"))
            .arg("--web.listen-address")
            .arg(prom_addr.to_string())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let log_text = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http_get(prom_addr, "/-/ready").is_ok_and(|(c, _)| c == 200) {
        assert!(
            Instant::now() < deadline,
            "Prometheus not ready:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Prometheus starts scraping its targets a few seconds after it is
    // ready: once it has tried this one (nothing listens yet, so `up` is
    // 0), it scrapes the run from its start.
    while query(prom_addr, "up{job=\"lockgate\"}").is_none() {
        assert!(Instant::now() < deadline, "no scrape:\n{}", log_text());
        std::thread::sleep(Duration::from_millis(100));
    }

    // README's loadgen command, with this test's port and a JSON report.
    let json = dir.path().join("run.json");
    let addr = format!("127.0.0.1:{port}");
    let mut run = bin()
        .args([
            "loadgen",
            "--workload",
            "w2",
            "--rate",
            "20000",
            "--duration",
            "3",
            "--warmup",
            "0",
            "--checkpoint",
            "exactly-once",
            "--checkpoint-interval-ms",
            "10",
            "--metrics-addr",
            &addr,
            "--metrics-linger",
            "5",
            "--json",
        ])
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the report: the linger's line.
    let (tx, rx) = std::sync::mpsc::channel();
    let err = run.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut stderr = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(60)) {
        let lingering = l.contains("(--metrics-linger)");
        stderr.push(l);
        if lingering {
            break;
        }
    }
    let j: Value = serde_json::from_str(
        &std::fs::read_to_string(&json)
            .unwrap_or_else(|e| panic!("{e}; stderr:\n{}", stderr.join("\n"))),
    )
    .unwrap();
    let completed = j["checkpoints"]["completed"].as_u64().unwrap() as f64;
    assert!(completed > 10.0, "{j}");

    // Prometheus has scraped the final figures within a few scrapes.
    let q_completed = format!("lockgate_checkpoints_completed_total{{{JOB}}}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while query(prom_addr, &q_completed) != Some(completed) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        query(prom_addr, &q_completed),
        Some(completed),
        "{}",
        log_text()
    );
    assert_eq!(query(prom_addr, "up{job=\"lockgate\"}"), Some(1.0));
    // Every record the sources produced.
    assert_eq!(
        query(
            prom_addr,
            &format!("sum(lockgate_records_in_total{{{JOB},task=\"source\"}})")
        ),
        Some(j["records"].as_u64().unwrap() as f64)
    );
    assert_eq!(
        query(
            prom_addr,
            &format!("lockgate_checkpoint_duration_seconds_count{{{JOB}}}")
        ),
        Some(completed)
    );
    // The median checkpoint duration, from the histogram's buckets, in the
    // bucket of the report's p50 (or a neighbour: the report's figure is
    // HdrHistogram's, rounded to 3 digits).
    let p50 = query(
        prom_addr,
        &format!(
            "histogram_quantile(0.5, sum by (le) (lockgate_checkpoint_duration_seconds_bucket{{{JOB}}}))"
        ),
    )
    .unwrap();
    let report_p50 = j["checkpoints"]["duration_ns"]["p50"].as_f64().unwrap() / 1e9;
    let bucket = SECONDS_BUCKETS
        .iter()
        .position(|&b| report_p50 <= b)
        .unwrap();
    let low = if bucket >= 2 {
        SECONDS_BUCKETS[bucket - 2]
    } else {
        0.0
    };
    let high = SECONDS_BUCKETS[(bucket + 1).min(SECONDS_BUCKETS.len() - 1)];
    assert!(
        (low..=high).contains(&p50),
        "Prometheus's p50 {p50} s, the report's {report_p50} s"
    );
    // Seen while the job ran: some scrape had records flowing.
    assert!(
        query(
            prom_addr,
            &format!("max_over_time(sum(rate(lockgate_records_in_total{{{JOB},task=\"source\"}}[1s]))[1m:100ms])")
        )
        .unwrap()
            > 1000.0
    );
    assert_eq!(
        query(prom_addr, &format!("lockgate_job_healthy{{{JOB}}}")),
        Some(0.0),
        "the job finished"
    );
    assert!(run.wait().unwrap().success(), "{}", stderr.join("\n"));
}
