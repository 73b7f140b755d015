//! The hand-written baseline: the reference topology of `docs/workloads.md`
//! with raw crossbeam channels and threads, no engine (no barriers, no
//! metrics, no operator abstraction), batching records exactly as lockgate
//! does (same batch size, same channel capacity in batches).
//!
//! ```text
//! source[0] ─┐            ┌─ keyed_sum[0] ─┐
//!            ├─ hash(key) ┤                ├─ sink
//! source[1] ─┘            └─ keyed_sum[1] ─┘
//! ```
//!
//! It is what lockgate's throughput and latency are measured against: the
//! cost of the engine is the ratio of the two.

use crossbeam_channel::{bounded, Receiver, Select, Sender};
use lockgate_workloads::latency::{LatencyRecorder, Percentiles};
use lockgate_workloads::refjob::RefJobConfig;
use lockgate_workloads::workload::{
    due_until, key_to_subtask, scheduled_offset_ns, Event, ExpectedResult, Generator, KeySpace,
    KeyedSum, SinkCheck, SumRecord, Workload, DEFAULT_KEYS,
};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// What a raw run measured.
#[derive(Debug, Clone)]
pub struct RawReport {
    /// Records that reached the sink.
    pub records: u64,
    /// From the first record emitted to the last at the sink, s.
    pub seconds: f64,
    /// `records / seconds`.
    pub records_per_s: f64,
    /// True when count, per-key sums and fingerprint match the closed form.
    pub exact: bool,
    /// Records whose latency was recorded.
    pub latency_count: u64,
}

/// Sends full batches of one producer to its consumers, as lockgate's
/// channel writer does.
struct Batcher<T> {
    out: Vec<Sender<Vec<T>>>,
    bufs: Vec<Vec<T>>,
    batch: usize,
}

impl<T> Batcher<T> {
    fn new(out: Vec<Sender<Vec<T>>>, batch: usize) -> Self {
        let bufs = out.iter().map(|_| Vec::with_capacity(batch)).collect();
        Batcher { out, bufs, batch }
    }

    #[inline]
    fn push(&mut self, ch: usize, r: T) {
        self.bufs[ch].push(r);
        if self.bufs[ch].len() >= self.batch {
            let b = std::mem::replace(&mut self.bufs[ch], Vec::with_capacity(self.batch));
            self.out[ch].send(b).expect("consumer alive");
        }
    }

    fn flush(&mut self) {
        for ch in 0..self.out.len() {
            if !self.bufs[ch].is_empty() {
                let b = std::mem::take(&mut self.bufs[ch]);
                self.out[ch].send(b).expect("consumer alive");
            }
        }
    }
}

/// Receives from several channels until all are disconnected, blocking on
/// a `Select` when none is ready.
fn drain_all<T>(inputs: Vec<Receiver<Vec<T>>>, mut f: impl FnMut(Vec<T>)) {
    let mut open: Vec<Receiver<Vec<T>>> = inputs;
    while !open.is_empty() {
        let mut sel = Select::new();
        for r in &open {
            sel.recv(r);
        }
        let op = sel.select();
        let i = op.index();
        match op.recv(&open[i]) {
            Ok(batch) => f(batch),
            Err(_) => {
                open.remove(i);
            }
        }
    }
}

/// Runs W1 (closed loop, `records` in total, `keys` uniform keys) on the
/// raw pipeline with `parallelism` sources and keyed_sums, batches of
/// `batch` records and channels of `capacity` batches.
///
/// # Panics
/// When a thread of the pipeline panics (a bug).
pub fn run_w1(
    records: u64,
    keys: u64,
    parallelism: usize,
    batch: usize,
    capacity: usize,
) -> RawReport {
    let space = KeySpace::uniform(keys).expect("keys > 0");
    let p = parallelism;
    // channels source[i] -> keyed_sum[j]
    let mut to_ks: Vec<Vec<Sender<Vec<lockgate_workloads::workload::Event>>>> = vec![Vec::new(); p];
    let mut ks_in: Vec<Vec<Receiver<Vec<lockgate_workloads::workload::Event>>>> =
        vec![Vec::new(); p];
    for senders in to_ks.iter_mut() {
        for inputs in ks_in.iter_mut() {
            let (tx, rx) = bounded(capacity);
            senders.push(tx);
            inputs.push(rx);
        }
    }
    let mut to_sink = Vec::new();
    let mut sink_in = Vec::new();
    for _ in 0..p {
        let (tx, rx) = bounded::<Vec<SumRecord>>(capacity);
        to_sink.push(tx);
        sink_in.push(rx);
    }
    let start = Instant::now();
    let mut threads = Vec::new();
    for (i, senders) in to_ks.into_iter().enumerate() {
        let space = space.clone();
        threads.push(thread::spawn(move || {
            let gen = Generator::new(&space, i, p, records).expect("valid source");
            let mut out = Batcher::new(senders, batch);
            let t0 = lockgate::tuning::now_ns();
            for (n, key) in gen {
                let ev = lockgate_workloads::workload::Event::generated(n, key, t0).mapped();
                out.push(key_to_subtask(key, p), ev);
            }
            out.flush();
        }));
    }
    for inputs in ks_in.into_iter() {
        let tx = to_sink.remove(0);
        threads.push(thread::spawn(move || {
            let mut state = KeyedSum::new();
            let mut out = Batcher::new(vec![tx], batch);
            drain_all(inputs, |b| {
                for ev in &b {
                    out.push(0, state.apply(ev));
                }
            });
            out.flush();
        }));
    }
    let mut check = SinkCheck::new(records, keys).expect("within limits");
    // The same sink work as lockgate's reference sink: check every record
    // and record its latency from the emission time (one clock read per
    // batch).
    let mut latency = LatencyRecorder::new();
    drain_all(sink_in, |b| {
        let now = lockgate::tuning::now_ns();
        for r in &b {
            check.observe(r);
            latency.record(now, r.ts_ns);
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    for t in threads {
        t.join().expect("pipeline thread");
    }
    let expected = ExpectedResult::compute(records, &space);
    let report = check.verify(&expected);
    RawReport {
        records: check.received(),
        seconds,
        records_per_s: check.received() as f64 / seconds,
        exact: report.is_exact(),
        latency_count: latency.count(),
    }
}

/// The parameters of a paced (W2/W3) raw run.
#[derive(Debug, Clone)]
pub struct PacedConfig {
    /// W2 or W3 (in W3 the odd-numbered sources burst).
    pub workload: Workload,
    /// Records/s of all sources together.
    pub rate: u64,
    /// Recorded time after the warm-up.
    pub duration: Duration,
    /// Warm-up, not recorded.
    pub warmup: Duration,
    /// Distinct (uniform) keys.
    pub keys: u64,
    /// Sources and keyed_sums.
    pub parallelism: usize,
    /// Records per batch at most.
    pub batch: usize,
    /// Batches a channel holds.
    pub capacity: usize,
    /// The shortest sleep of a source between two polls (loadgen's
    /// `--tick-us`, default [`lockgate_workloads::refjob::DEFAULT_TICK`]).
    pub tick: Duration,
}

impl PacedConfig {
    /// `workload` at `rate` records/s for `warmup + duration`, with
    /// loadgen's defaults for the rest (10,000 keys, parallelism 2,
    /// batches of 1,024 records, 64 batches a channel, loadgen's tick).
    pub fn new(workload: Workload, rate: u64, duration: Duration, warmup: Duration) -> Self {
        PacedConfig {
            workload,
            rate,
            duration,
            warmup,
            keys: DEFAULT_KEYS,
            parallelism: 2,
            batch: 1024,
            capacity: 64,
            tick: lockgate_workloads::refjob::DEFAULT_TICK,
        }
    }
}

/// What a paced raw run measured.
#[derive(Debug, Clone)]
pub struct PacedReport {
    /// Records the run emitted (`floor(rate × (warmup + duration))`).
    pub total_records: u64,
    /// Records that reached the sink.
    pub delivered: u64,
    /// Latency from the intended (schedule) time to the sink, over the
    /// records after the warm-up, ns.
    pub latency: Percentiles,
    /// First to last recorded delivery, s.
    pub seconds: f64,
    /// True when count, per-key sums and fingerprint match the closed form.
    pub exact: bool,
}

/// Receives from several channels until all are disconnected, calling
/// `on_dry` whenever no channel has anything ready (before blocking), as
/// lockgate's tasks flush their output when their input gate runs dry.
fn drain_flushing<T>(
    inputs: Vec<Receiver<Vec<T>>>,
    mut f: impl FnMut(Vec<T>),
    mut on_dry: impl FnMut(),
) {
    let mut open: Vec<Receiver<Vec<T>>> = inputs;
    while !open.is_empty() {
        let mut sel = Select::new();
        for r in &open {
            sel.recv(r);
        }
        let op = match sel.try_select() {
            Ok(op) => op,
            Err(_) => {
                on_dry();
                sel.select()
            }
        };
        let i = op.index();
        match op.recv(&open[i]) {
            Ok(batch) => f(batch),
            Err(_) => {
                open.remove(i);
            }
        }
    }
}

/// Runs W2 or W3 (`docs/workloads.md`) on the raw pipeline, paced as
/// lockgate's reference sources are (`lockgate_workloads::refjob`): record
/// `n` is due at `t0 + scheduled_offset_ns(n, rate, burst)` and carries
/// that intended time; a source emits everything due, sends its partial
/// batches (the raw analogue of lockgate's flush when a source goes idle),
/// then sleeps until its next record is due but at least `tick`. `t0` is
/// the first poll of any source. `keyed_sum` sends its partial batch when
/// its inputs run dry (lockgate flushes when its input gate is dry). The
/// sink reads the clock once per batch and records `now - ts_ns` for the
/// records at or after the warm-up (`RefJobConfig::first_recorded_n`).
///
/// # Errors
/// A message naming the bad value: a workload that is not paced, a rate or
/// duration of 0, no keys or too many, a parallelism, batch, capacity or
/// tick of 0.
///
/// # Panics
/// When a thread of the pipeline panics (a bug).
pub fn run_paced(cfg: &PacedConfig) -> Result<PacedReport, String> {
    if !cfg.workload.is_paced() {
        return Err(format!(
            "{} is not a paced workload (w2 or w3)",
            cfg.workload
        ));
    }
    if cfg.rate == 0 || cfg.duration.is_zero() {
        return Err("the rate and the duration must be positive".into());
    }
    if cfg.parallelism == 0 || cfg.batch == 0 || cfg.capacity == 0 || cfg.tick.is_zero() {
        return Err("parallelism, batch, capacity and tick must be positive".into());
    }
    let reference = RefJobConfig::paced(cfg.workload, cfg.rate, cfg.duration, cfg.warmup);
    let records = reference.total_records();
    let first_recorded = reference.first_recorded_n();
    let space = KeySpace::uniform(cfg.keys).map_err(|e| format!("keys: {e}"))?;
    let mut check = SinkCheck::new(records, cfg.keys).map_err(|e| e.to_string())?;
    let p = cfg.parallelism;
    let mut to_ks: Vec<Vec<Sender<Vec<Event>>>> = vec![Vec::new(); p];
    let mut ks_in: Vec<Vec<Receiver<Vec<Event>>>> = vec![Vec::new(); p];
    for senders in to_ks.iter_mut() {
        for inputs in ks_in.iter_mut() {
            let (tx, rx) = bounded(cfg.capacity);
            senders.push(tx);
            inputs.push(rx);
        }
    }
    let mut to_sink = Vec::new();
    let mut sink_in = Vec::new();
    for _ in 0..p {
        let (tx, rx) = bounded::<Vec<SumRecord>>(cfg.capacity);
        to_sink.push(tx);
        sink_in.push(rx);
    }
    let t0_cell = Arc::new(OnceLock::new());
    let mut threads = Vec::new();
    for (i, senders) in to_ks.into_iter().enumerate() {
        let space = space.clone();
        let t0_cell = t0_cell.clone();
        let (rate, batch, tick) = (cfg.rate, cfg.batch, cfg.tick.as_nanos() as u64);
        let burst = cfg.workload.source_bursts(i);
        threads.push(thread::spawn(move || {
            let mut gen = Generator::new(&space, i, p, records).expect("valid source");
            let mut out = Batcher::new(senders, batch);
            let t0 = *t0_cell.get_or_init(lockgate::tuning::now_ns);
            while let Some(mut next) = gen.next_n() {
                let now = lockgate::tuning::now_ns();
                let due = due_until(now.saturating_sub(t0), rate, burst);
                while next < due {
                    let Some((n, key)) = gen.next() else { break };
                    let ts = t0 + scheduled_offset_ns(n, rate, burst);
                    out.push(
                        key_to_subtask(key, p),
                        Event::generated(n, key, ts).mapped(),
                    );
                    match gen.next_n() {
                        Some(m) => next = m,
                        None => break,
                    }
                }
                out.flush();
                if gen.next_n().is_none() {
                    break;
                }
                let next_due = t0 + scheduled_offset_ns(next, rate, burst);
                let now = lockgate::tuning::now_ns();
                let wake = next_due.max(now + tick);
                thread::sleep(Duration::from_nanos(wake - now));
            }
            out.flush();
        }));
    }
    for inputs in ks_in.into_iter() {
        let tx = to_sink.remove(0);
        let batch = cfg.batch;
        threads.push(thread::spawn(move || {
            let mut state = KeyedSum::new();
            let out = RefCell::new(Batcher::new(vec![tx], batch));
            drain_flushing(
                inputs,
                |b| {
                    let mut out = out.borrow_mut();
                    for ev in &b {
                        out.push(0, state.apply(ev));
                    }
                },
                || out.borrow_mut().flush(),
            );
            out.borrow_mut().flush();
        }));
    }
    let mut latency = LatencyRecorder::new();
    let (mut first_ns, mut last_ns) = (0u64, 0u64);
    drain_flushing(
        sink_in,
        |b| {
            let now = lockgate::tuning::now_ns();
            for r in &b {
                check.observe(r);
                if r.n >= first_recorded {
                    latency.record(now, r.ts_ns);
                    if first_ns == 0 {
                        first_ns = now;
                    }
                    last_ns = now;
                }
            }
        },
        || {},
    );
    for t in threads {
        t.join().expect("pipeline thread");
    }
    let expected = ExpectedResult::compute(records, &space);
    let report = check.verify(&expected);
    Ok(PacedReport {
        total_records: records,
        delivered: check.received(),
        latency: Percentiles::from_histogram(latency.histogram()),
        seconds: last_ns.saturating_sub(first_ns) as f64 / 1e9,
        exact: report.is_exact(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_raw_pipeline_computes_the_closed_form() {
        let r = super::run_w1(50_000, 1_000, 2, 64, 4);
        assert_eq!(r.records, 50_000);
        assert!(r.exact);
        assert_eq!(r.latency_count, 50_000);
    }

    #[test]
    fn the_paced_raw_pipeline_computes_the_closed_form() {
        use super::{run_paced, PacedConfig};
        use lockgate_workloads::workload::Workload;
        use std::time::Duration;
        for w in [Workload::W2, Workload::W3] {
            // 20,000 records/s for 0.3 s: 6,000 records, 2,000 recorded.
            let cfg = PacedConfig::new(
                w,
                20_000,
                Duration::from_millis(100),
                Duration::from_millis(200),
            );
            let r = run_paced(&cfg).expect("valid config");
            assert_eq!(r.total_records, 6_000);
            assert_eq!(r.delivered, 6_000);
            assert!(r.exact, "{w}: result differs from the closed form");
            assert_eq!(r.latency.count, 2_000);
        }
    }

    #[test]
    fn the_paced_raw_pipeline_refuses_w1_and_a_zero_rate() {
        use super::{run_paced, PacedConfig};
        use lockgate_workloads::workload::Workload;
        use std::time::Duration;
        let d = Duration::from_millis(10);
        let e = run_paced(&PacedConfig::new(Workload::W1, 1, d, d)).unwrap_err();
        assert!(e.contains("not a paced workload"), "{e}");
        let e = run_paced(&PacedConfig::new(Workload::W2, 0, d, d)).unwrap_err();
        assert!(e.contains("rate"), "{e}");
    }
}
