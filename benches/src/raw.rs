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
use lockgate_operators::latency::LatencyRecorder;
use lockgate_operators::workload::{
    route, ExpectedResult, Generator, KeySpace, KeyedSum, SinkCheck, SumRecord,
};
use std::thread;
use std::time::Instant;

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
    let mut to_ks: Vec<Vec<Sender<Vec<lockgate_operators::workload::Event>>>> = vec![Vec::new(); p];
    let mut ks_in: Vec<Vec<Receiver<Vec<lockgate_operators::workload::Event>>>> =
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
            let t0 = lockgate::clock::now_ns();
            for (n, key) in gen {
                let ev = lockgate_operators::workload::Event::generated(n, key, t0).mapped();
                out.push(route(key, p), ev);
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
        let now = lockgate::clock::now_ns();
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_raw_pipeline_computes_the_closed_form() {
        let r = super::run_w1(50_000, 1_000, 2, 64, 4);
        assert_eq!(r.records, 50_000);
        assert!(r.exact);
        assert_eq!(r.latency_count, 50_000);
    }
}
