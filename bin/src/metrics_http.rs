//! `--metrics-addr` and `--metrics-linger`: serves a job's Prometheus
//! metrics (`/metrics`) and health (`/health`) over HTTP from a small std
//! TCP listener, around `metrics-exporter-prometheus`'s recorder. No
//! async runtime: a scrape is a request a second or so, and each
//! connection gets a thread of its own.

use lockgate::telemetry::{process_health, Health, SECONDS_BUCKETS};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The flags of the commands that run a job (`loadgen`, `flights`,
/// `kafka run`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// Serves Prometheus metrics at http://HOST:PORT/metrics and the job's
    /// health at /health (200 while it runs with fewer checkpoints failed
    /// in a row than tolerated; 503 and a one-line reason at that count,
    /// while it restarts, and once it ended), from before the job starts
    /// until the process exits. `:PORT` or `PORT` listens on 127.0.0.1;
    /// port 0 takes a free one (the address is printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// With --metrics-addr: keeps serving this many seconds after the
    /// report, so that a last scrape sees the final figures.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0, value_parser = parse_linger)]
    pub metrics_linger: f64,
}

fn parse_linger(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds from 0 to 86400")),
    }
}

impl MetricsArgs {
    /// Starts serving when `--metrics-addr` was given, and says where on
    /// stderr.
    ///
    /// # Errors
    /// A bad address, one that cannot be listened on (taken, not this
    /// machine's), `--metrics-linger` without `--metrics-addr`, or a
    /// recorder already installed: the caller exits with code 2 before the
    /// job starts.
    pub fn start(&self) -> Result<Option<MetricsServer>, String> {
        let Some(spec) = &self.metrics_addr else {
            if self.metrics_linger > 0.0 {
                return Err("--metrics-linger needs --metrics-addr".into());
            }
            return Ok(None);
        };
        let server = MetricsServer::start(spec, process_health)?;
        eprintln!(
            "metrics: serving http://{0}/metrics and http://{0}/health",
            server.local_addr()
        );
        Ok(Some(
            server.with_linger(Duration::from_secs_f64(self.metrics_linger)),
        ))
    }
}

/// The address `spec` names: `HOST:PORT` (a name or an address; IPv6 in
/// brackets), or `:PORT` or `PORT` for 127.0.0.1.
///
/// # Errors
/// What is wrong with it, naming `--metrics-addr`.
pub fn parse_addr(spec: &str) -> Result<SocketAddr, String> {
    let bad = |why: &str| {
        format!("--metrics-addr '{spec}': {why} (expected HOST:PORT, :PORT or PORT, e.g. 127.0.0.1:9249)")
    };
    let port_of = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| bad(&format!("'{p}' is not a port (0-65535)")))
    };
    if let Some(p) = spec.strip_prefix(':') {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port_of(p)?)));
    }
    if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port_of(spec)?)));
    }
    if let Ok(a) = spec.parse::<SocketAddr>() {
        return Ok(a);
    }
    let Some((host, port)) = spec.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let port = port_of(port)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve '{host}': {e}")))?
        .next()
        .ok_or_else(|| bad(&format!("'{host}' has no address")))
}

/// The process's Prometheus recorder, installed as the global `metrics`
/// recorder on first use (with [`SECONDS_BUCKETS`] for every `_seconds`
/// histogram), and a thread that runs its upkeep every 5 s.
///
/// # Errors
/// Another recorder was installed first.
pub fn prometheus_handle() -> Result<PrometheusHandle, String> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .map_err(|e| e.to_string())?;
            let handle = builder
                .install_recorder()
                .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
            let h = handle.clone();
            std::thread::Builder::new()
                .name("lg-metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(Duration::from_secs(5));
                    h.run_upkeep();
                })
                .map_err(|e| format!("cannot start the metrics upkeep thread: {e}"))?;
            Ok(handle)
        })
        .clone()
}

/// Connections served at once; more are answered 503 at once.
const MAX_CONNECTIONS: usize = 32;

/// A request's head must arrive within this time and size.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_HEAD_BYTES: usize = 8192;

/// The listener: serves until the process exits.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    linger: Duration,
}

impl MetricsServer {
    /// Listens on `spec` (see [`parse_addr`]) and serves `/metrics` from
    /// the process's recorder ([`prometheus_handle`]) and `/health` from
    /// `health`, on a thread of its own, until the process exits.
    ///
    /// # Errors
    /// A bad address, one that cannot be listened on, or no recorder.
    pub fn start(
        spec: &str,
        health: impl Fn() -> Health + Send + Sync + 'static,
    ) -> Result<MetricsServer, String> {
        let addr = parse_addr(spec)?;
        let listener = TcpListener::bind(addr)
            .map_err(|e| format!("--metrics-addr {spec}: cannot listen on {addr}: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("--metrics-addr {spec}: {e}"))?;
        let handle = prometheus_handle()?;
        let health: Arc<dyn Fn() -> Health + Send + Sync> = Arc::new(health);
        std::thread::Builder::new()
            .name("lg-metrics-http".into())
            .spawn(move || accept_loop(&listener, &handle, &health))
            .map_err(|e| format!("cannot start the metrics listener thread: {e}"))?;
        Ok(MetricsServer {
            addr,
            linger: Duration::ZERO,
        })
    }

    /// Keeps serving `linger` after [`MetricsServer::finish`] is called.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// After the report: serves on for the linger given, then returns
    /// (the process then exits, and the listener with it).
    pub fn finish(&self) {
        if !self.linger.is_zero() {
            eprintln!(
                "metrics: serving http://{}/metrics for {:.1} s more (--metrics-linger)",
                self.addr,
                self.linger.as_secs_f64()
            );
            std::thread::sleep(self.linger);
        }
    }
}

type HealthFn = Arc<dyn Fn() -> Health + Send + Sync>;

fn accept_loop(listener: &TcpListener, handle: &PrometheusHandle, health: &HealthFn) {
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            let _ = respond(
                &mut stream,
                "503 Service Unavailable",
                "text/plain",
                b"busy\n",
                false,
            );
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (handle, health, count) = (handle.clone(), health.clone(), active.clone());
        let spawned = std::thread::Builder::new()
            .name("lg-metrics-conn".into())
            .spawn(move || {
                let _ = serve(&mut stream, &handle, &health);
                count.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Answers one request (and closes the connection).
fn serve(
    stream: &mut TcpStream,
    handle: &PrometheusHandle,
    health: &HealthFn,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD_BYTES {
            return respond(
                stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
                false,
            );
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split('?').next().unwrap_or_default();
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
            false,
        );
    }
    match path {
        "/metrics" => {
            let body = handle.render();
            respond(
                stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body.as_bytes(),
                head_only,
            )
        }
        "/health" => {
            let h = health();
            let status = if h.ok {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let body = format!("{}\n", h.reason);
            respond(
                stream,
                status,
                "text/plain; charset=utf-8",
                body.as_bytes(),
                head_only,
            )
        }
        _ => respond(
            stream,
            "404 Not Found",
            "text/plain",
            b"not found: /metrics or /health\n",
            head_only,
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

/// A GET of `path` on `addr`, for tests and scripts: the status code and
/// the body.
///
/// # Errors
/// The connection failed, or the answer is not HTTP.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer");
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    Ok((code, body.to_string()))
}
