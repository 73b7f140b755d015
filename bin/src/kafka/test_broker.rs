//! A Kafka-API broker for tests: tansu (<https://tansu.io>), started on a
//! free loopback port with a fresh SQLite data folder, stopped by its pid
//! when dropped.
//!
//! tansu is found on `PATH` or in `~/.cargo/bin` (`cargo install tansu
//! --version 0.6.0 --features libsql --locked`; `.ci/run` installs it).
//! Its SQLite engine is used, never `memory://`, which skips records when a
//! consumer seeks into the middle of a batch. tansu has no transactions
//! (`EndTxn`): the exactly-once sink is tested against
//! [`lockgate_kafka::FakeCluster`] and, when `LOCKGATE_KAFKA_BOOTSTRAP`
//! names a real Kafka, against it.

use lockgate_kafka::{connect_check, ClientSettings};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long tansu may take to answer its first metadata request.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running tansu broker (see the module docs).
#[derive(Debug)]
pub struct TestBroker {
    child: Child,
    bootstrap: String,
    /// Its data folder (`tansu.db`, `tansu.log`).
    path: PathBuf,
    /// The folder when it is the broker's own, removed with it.
    _dir: Option<tempfile::TempDir>,
}

/// The tansu binary, if installed.
fn find_tansu() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("tansu"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let home = std::env::var_os("HOME")?;
        let p = PathBuf::from(home).join(".cargo/bin/tansu");
        p.is_file().then_some(p)
    })
}

impl TestBroker {
    /// Starts tansu. `Ok(None)` when it is not installed and
    /// `LOCKGATE_REQUIRE_KAFKA` is not `1` (the caller skips and says so).
    ///
    /// # Errors
    /// tansu missing while `LOCKGATE_REQUIRE_KAFKA=1`; it does not start,
    /// or does not answer within 30 s (the message holds its log's tail).
    pub fn start() -> Result<Option<TestBroker>, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary folder: {e}"))?;
        Self::start_with(dir.path().to_path_buf(), Some(dir))
    }

    /// Starts tansu on the data of an earlier broker: `path` holds its
    /// `tansu.db` (topics, records, consumer groups), kept where it is.
    ///
    /// # Errors
    /// As [`TestBroker::start`].
    pub fn start_in(path: PathBuf) -> Result<Option<TestBroker>, String> {
        Self::start_with(path, None)
    }

    fn start_with(
        path: PathBuf,
        dir: Option<tempfile::TempDir>,
    ) -> Result<Option<TestBroker>, String> {
        let Some(tansu) = find_tansu() else {
            if std::env::var("LOCKGATE_REQUIRE_KAFKA").as_deref() == Ok("1") {
                return Err("LOCKGATE_REQUIRE_KAFKA=1 but tansu is not installed (cargo install tansu --version 0.6.0 --features libsql --locked)".into());
            }
            return Ok(None);
        };
        // A free port: bound by the OS, released, then given to tansu.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let log = std::fs::File::create(path.join("tansu.log"))
            .map_err(|e| format!("cannot create tansu's log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&tansu)
            .arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            // tansu reads the URL's path relative to its working folder.
            .arg("--storage-engine")
            .arg("sqlite://tansu.db")
            .current_dir(&path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", tansu.display()))?;
        let mut broker = TestBroker {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
            path,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = broker.child.try_wait() {
                return Err(format!("tansu exited ({status}): {}", broker.log_tail()));
            }
            if connect_check(&ClientSettings::new(&broker.bootstrap)).is_ok() {
                return Ok(Some(broker));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "tansu did not answer within {} s: {}",
                    START_TIMEOUT.as_secs(),
                    broker.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// For a test: the broker, or `None` after printing why the test
    /// skips (tansu not installed, `LOCKGATE_REQUIRE_KAFKA` not `1`).
    ///
    /// # Panics
    /// When [`TestBroker::start`] fails: the test fails with its message.
    pub fn for_test() -> Option<TestBroker> {
        match TestBroker::start() {
            Ok(Some(b)) => Some(b),
            Ok(None) => {
                eprintln!("skipped: tansu is not installed (LOCKGATE_REQUIRE_KAFKA=1 makes this a failure)");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// `HOST:PORT` of the broker.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The last 2,000 bytes of tansu's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.path.join("tansu.log")).unwrap_or_default();
        let cut = text.len().saturating_sub(2_000);
        let cut = (cut..=text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text[cut..].to_string()
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
