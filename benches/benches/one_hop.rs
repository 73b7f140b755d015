//! The cost of one record's trip through lockgate's channels, beside the
//! same trip over bare crossbeam channels, for each wait strategy.
//!
//! # What is timed
//! One criterion iteration is one round trip of one `u64`:
//!
//! - `lockgate/<strategy>`: a job `ingest::<u64>` → `rebalance()` →
//!   `map("echo", 1, identity)` → `collect()`. The bench thread pushes the
//!   record into the ingest channel, the source task reads it and writes it
//!   through lockgate's channel writer (flushed when the source goes idle),
//!   the echo task's input gate receives it (the lockgate edge), the echo
//!   and the chained collect send it to the collect channel, and the bench
//!   thread receives it. Three thread hops: bench → source → echo → bench.
//!   `JobConfig::wait_strategy` sets how the two tasks wait; no checkpoints.
//! - `crossbeam/<strategy>`: the same three hops over bare crossbeam
//!   channels: bench → relay 1 → relay 2 → bench (a bounded channel of 64
//!   `u64`s per hop, each relay a thread that forwards what it receives).
//!   The relays wait as the tasks' analogues: `park` = blocking `recv`,
//!   `spin-park` = [`DEFAULT_SPINS`] `try_recv` polls, 2 yields, then a
//!   blocking `recv` (the engine's spin-park), `spin` = `try_recv` forever,
//!   yielding every [`SPIN_YIELD_EVERY`] polls (the engine's spin).
//!
//! In both, the bench thread waits for the echo with its strategy's
//! analogue too. The difference of the two is lockgate's cost per round
//! trip over bare channels (its source loop, channel writer, input gate,
//! stream elements, metrics).
//!
//! # Percentiles
//! Criterion reports a mean; latency wants percentiles. Every timed round
//! trip is also recorded (ns) into an HdrHistogram per configuration, and
//! the p50/p99/max of each are printed after criterion's output (every
//! iteration criterion ran, its warm-up included). On the
//! 2-core reference machine `spin` runs three spinning threads on two cores
//! (a spinning thread yields its core every `SPIN_YIELD_EVERY` polls), so
//! its tail shows scheduler time slices, not channel costs.
//!
//! Before timing, each configuration's echo is checked: 100 distinct values
//! pushed one at a time come back equal, in order. Total run time is about
//! 30 s (6 configurations × (1 s warm-up + 2 s measurement) plus set-up).

use criterion::Criterion;
use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use hdrhistogram::Histogram;
use lockgate::{config::WaitStrategy, CheckpointMode, JobBuilder, JobConfig};
use lockgate::{config::DEFAULT_SPINS, config::SPIN_YIELD_EVERY};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Values checked before timing each configuration.
const CHECKED_VALUES: u64 = 100;
/// Records an ingest or bare channel holds; one record is in flight at a
/// time, so any capacity above 1 behaves the same.
const CHANNEL_CAPACITY: usize = 64;
/// Yields between spinning and blocking in the spin-park analogue (the
/// engine's `YIELDS_BEFORE_PARK`).
const YIELDS_BEFORE_BLOCK: u32 = 2;
/// The longest a round trip may take before the bench gives up (a lost
/// record is a bug, not a slow trip).
const ROUND_TRIP_LIMIT: Duration = Duration::from_secs(10);
/// Histogram bounds: 1 ns .. 10 s, 3 significant digits.
const HIST_MAX_NS: u64 = 10_000_000_000;

/// A wait strategy of the bench and of the bare relays, named as lockgate's.
#[derive(Clone, Copy, Debug)]
enum Wait {
    Park,
    SpinPark,
    Spin,
}

impl Wait {
    const ALL: [Wait; 3] = [Wait::Park, Wait::SpinPark, Wait::Spin];

    fn name(self) -> &'static str {
        match self {
            Wait::Park => "park",
            Wait::SpinPark => "spin-park",
            Wait::Spin => "spin",
        }
    }

    fn engine(self) -> WaitStrategy {
        match self {
            Wait::Park => WaitStrategy::Park,
            Wait::SpinPark => WaitStrategy::SpinPark {
                spins: DEFAULT_SPINS,
            },
            Wait::Spin => WaitStrategy::Spin,
        }
    }

    /// Receives one value as this strategy waits; `None` when the channel
    /// is disconnected or nothing came within [`ROUND_TRIP_LIMIT`].
    fn recv<T, R: RecvEnd<T>>(self, rx: &R) -> Option<T> {
        match self {
            Wait::Park => rx.take_timeout(ROUND_TRIP_LIMIT),
            Wait::SpinPark => {
                for _ in 0..DEFAULT_SPINS {
                    match rx.take_now() {
                        Ok(v) => return Some(v),
                        Err(TryRecvError::Disconnected) => return None,
                        Err(TryRecvError::Empty) => std::hint::spin_loop(),
                    }
                }
                for _ in 0..YIELDS_BEFORE_BLOCK {
                    std::thread::yield_now();
                    match rx.take_now() {
                        Ok(v) => return Some(v),
                        Err(TryRecvError::Disconnected) => return None,
                        Err(TryRecvError::Empty) => {}
                    }
                }
                rx.take_timeout(ROUND_TRIP_LIMIT)
            }
            Wait::Spin => {
                let start = Instant::now();
                let mut polls: u32 = 0;
                loop {
                    match rx.take_now() {
                        Ok(v) => return Some(v),
                        Err(TryRecvError::Disconnected) => return None,
                        Err(TryRecvError::Empty) => {
                            polls = polls.wrapping_add(1);
                            if polls % SPIN_YIELD_EVERY == 0 {
                                if start.elapsed() > ROUND_TRIP_LIMIT {
                                    return None;
                                }
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What the waits need of a receiving end: crossbeam's `Receiver` (the
/// bare ring) and lockgate's `Output` (the job's end).
trait RecvEnd<T> {
    fn take_now(&self) -> Result<T, TryRecvError>;
    fn take_timeout(&self, limit: Duration) -> Option<T>;
}

impl<T> RecvEnd<T> for Receiver<T> {
    fn take_now(&self) -> Result<T, TryRecvError> {
        self.try_recv()
    }
    fn take_timeout(&self, limit: Duration) -> Option<T> {
        self.recv_timeout(limit).ok()
    }
}

impl<T> RecvEnd<T> for lockgate::Output<T> {
    fn take_now(&self) -> Result<T, TryRecvError> {
        self.try_recv().map_err(|e| match e {
            lockgate::ingest::TryRecvError::Empty => TryRecvError::Empty,
            lockgate::ingest::TryRecvError::Ended => TryRecvError::Disconnected,
        })
    }
    fn take_timeout(&self, limit: Duration) -> Option<T> {
        self.recv_timeout(limit).ok()
    }
}

/// One round trip: sends `v`, waits for the echo.
trait Echo {
    fn round_trip(&mut self, v: u64) -> u64;
}

/// The lockgate job of the module doc.
struct LockgateEcho {
    ingest: Option<lockgate::Ingest<u64>>,
    out: lockgate::Output<u64>,
    wait: Wait,
    handle: Option<lockgate::JobHandle>,
}

impl LockgateEcho {
    fn start(wait: Wait) -> Self {
        let mut config = JobConfig::default();
        config.wait_strategy = wait.engine();
        config.checkpoint.mode = CheckpointMode::None;
        let job = JobBuilder::new("one-hop", config);
        let (stream, ingest) = job.ingest::<u64>("in", CHANNEL_CAPACITY);
        let out = stream.rebalance().task("echo", 1).map(|v: u64| v).collect();
        let handle = job.start().expect("the one-hop job starts");
        LockgateEcho {
            ingest: Some(ingest),
            out,
            wait,
            handle: Some(handle),
        }
    }
}

impl Echo for LockgateEcho {
    fn round_trip(&mut self, v: u64) -> u64 {
        self.ingest
            .as_ref()
            .expect("open until dropped")
            .push(v)
            .expect("the job runs");
        self.wait
            .recv(&self.out)
            .expect("the echo comes back within the limit")
    }
}

impl Drop for LockgateEcho {
    fn drop(&mut self) {
        // Closing the ingest ends the source, and with it the job.
        drop(self.ingest.take());
        if let Some(h) = self.handle.take() {
            if let Err(e) = h.wait() {
                eprintln!("one_hop: the job ended with an error: {e}");
            }
        }
    }
}

/// The bare three-hop ring of the module doc.
struct CrossbeamEcho {
    tx: Option<Sender<u64>>,
    rx: Receiver<u64>,
    wait: Wait,
    relays: Vec<std::thread::JoinHandle<()>>,
}

impl CrossbeamEcho {
    fn start(wait: Wait) -> Self {
        let (tx, mut prev) = bounded::<u64>(CHANNEL_CAPACITY);
        let mut relays = Vec::new();
        for _ in 0..2 {
            let (next_tx, next_rx) = bounded::<u64>(CHANNEL_CAPACITY);
            let input = prev;
            relays.push(std::thread::spawn(move || {
                while let Some(v) = wait.recv(&input) {
                    if next_tx.send(v).is_err() {
                        return;
                    }
                }
            }));
            prev = next_rx;
        }
        CrossbeamEcho {
            tx: Some(tx),
            rx: prev,
            wait,
            relays,
        }
    }
}

impl Echo for CrossbeamEcho {
    fn round_trip(&mut self, v: u64) -> u64 {
        self.tx
            .as_ref()
            .expect("open until dropped")
            .send(v)
            .expect("the relays run");
        self.wait
            .recv(&self.rx)
            .expect("the echo comes back within the limit")
    }
}

impl Drop for CrossbeamEcho {
    fn drop(&mut self) {
        // Disconnecting the first channel ends the relays one by one.
        drop(self.tx.take());
        for r in self.relays.drain(..) {
            let _ = r.join();
        }
    }
}

/// Checks the echo, then times round trips into criterion and `hist`.
fn bench_one(c: &mut Criterion, name: &str, echo: &mut dyn Echo, hist: &mut Histogram<u64>) {
    for v in 1..=CHECKED_VALUES {
        // Distinct, non-trivial values: an echo of a stale or wrong record
        // would not match.
        let sent = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let got = echo.round_trip(sent);
        assert_eq!(got, sent, "{name}: the echo differs from the record pushed");
    }
    let echo = RefCell::new(echo);
    let hist = RefCell::new(hist);
    let mut next: u64 = 0;
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut echo = echo.borrow_mut();
            let mut hist = hist.borrow_mut();
            for _ in 0..iters {
                next = next.wrapping_add(1);
                let t = Instant::now();
                let got = echo.round_trip(next);
                let d = t.elapsed();
                assert_eq!(got, next, "{name}: the echo differs");
                total += d;
                hist.saturating_record(d.as_nanos() as u64);
            }
            total
        })
    });
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut results: Vec<(String, Histogram<u64>)> = Vec::new();
    for wait in Wait::ALL {
        for system in ["crossbeam", "lockgate"] {
            let name = format!("one_hop/{system}/{}", wait.name());
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid bounds");
            if system == "lockgate" {
                let mut echo = LockgateEcho::start(wait);
                bench_one(&mut c, &name, &mut echo, &mut hist);
            } else {
                let mut echo = CrossbeamEcho::start(wait);
                bench_one(&mut c, &name, &mut echo, &mut hist);
            }
            results.push((name, hist));
        }
    }
    c.final_summary();
    println!("\nround trip (3 thread hops), ns, over every iteration (warm-up included):");
    println!(
        "{:<32}{:>12}{:>12}{:>12}{:>12}",
        "configuration", "count", "p50", "p99", "max"
    );
    for (name, h) in &results {
        if h.is_empty() {
            continue;
        }
        println!(
            "{:<32}{:>12}{:>12}{:>12}{:>12}",
            name,
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
    }
}
