//! Cost per element of the barrier handlers ([`Aligner`], [`Tracker`]) on
//! 2, 8 and 130 input channels, for three inputs:
//!
//! - `records`: record batches only, round-robin over the channels;
//! - `barriers_every_1000`: the same, and after every 1,000 record batches
//!   one barrier of the next checkpoint on every channel (round-robin input
//!   delivers them back to back, so every alignment completes at once and
//!   nothing is held; the cost measured is that of the barriers themselves);
//! - `one_blocked`: channel 0 delivered a barrier before the timed loop and
//!   stays blocked (aligner) or pending (tracker); records arrive on the
//!   other channels.
//!
//! # Method
//! An element is a batch of 64 `u64`s. The input is a pre-built script of
//! `(channel, what)` pairs; the batches themselves come from a pool of
//! `Vec<u64>` that is filled before timing: each record element takes a
//! batch from the pool (a `Vec` move, no allocation, no copy of the 64
//! records) and the batch the handler hands back is pushed back. So the
//! timed loop allocates nothing and clones nothing. `baseline/pool_loop`
//! runs the same loop with no handler (each element handed straight back):
//! its time is the harness's overhead, included in every handler figure.
//! Barrier ids keep growing across criterion iterations (the script holds
//! offsets from a base that advances per pass), so the handler state stays
//! realistic. Each script is run once before timing and its behaviour is
//! asserted (triggers per pass, nothing left held, no batch lost).
//!
//! One criterion iteration is one pass over the script; the element count
//! per pass is the criterion throughput, so ns/element = time per iteration
//! / elements. Results and the machine are in `docs/benchmarks-history.md`.

use criterion::{BenchmarkId, Criterion, Throughput};
use lockgate::{
    barrier::Aligner, barrier::BarrierHandler, barrier::BarrierSignal, barrier::CheckpointBarrier,
    barrier::HandlerConfig, barrier::StreamElement, barrier::Tracker, CheckpointId,
};

/// Records per batch (element).
const BATCH: usize = 64;
/// Record batches per pass over a script.
const RECORD_ELEMENTS: usize = 10_000;
/// Record batches between two checkpoints in `barriers_every_1000`.
const BARRIER_EVERY: usize = 1_000;

#[derive(Clone, Copy, Debug)]
enum What {
    Records,
    /// A barrier for checkpoint `base + offset`.
    Barrier(u64),
}

/// A pre-built input: what arrives on which channel, and how many
/// checkpoints one pass completes.
struct Script {
    items: Vec<(usize, What)>,
    checkpoints_per_pass: u64,
}

fn records_script(channels: usize, first_channel: usize) -> Script {
    let open = channels - first_channel;
    Script {
        items: (0..RECORD_ELEMENTS)
            .map(|i| (first_channel + i % open, What::Records))
            .collect(),
        checkpoints_per_pass: 0,
    }
}

fn barriers_script(channels: usize) -> Script {
    let mut items = Vec::new();
    let mut checkpoint = 0;
    for i in 0..RECORD_ELEMENTS {
        items.push((i % channels, What::Records));
        if (i + 1) % BARRIER_EVERY == 0 {
            checkpoint += 1;
            // Round-robin continues where the records left off.
            for k in 0..channels {
                items.push(((i + 1 + k) % channels, What::Barrier(checkpoint)));
            }
        }
    }
    Script {
        items,
        checkpoints_per_pass: checkpoint,
    }
}

/// The batch pool and the loop state of one benchmark.
struct Harness {
    pool: Vec<Vec<u64>>,
    signals: Vec<BarrierSignal>,
    /// Checkpoint ids of the next pass are `base + offset`.
    base: u64,
    triggers: u64,
}

impl Harness {
    fn new(base: u64) -> Self {
        Harness {
            // A few spare batches: the scripts never hold any, but a
            // replay would need them.
            pool: (0..8).map(|i| vec![i; BATCH]).collect(),
            signals: Vec::with_capacity(4),
            base,
            triggers: 0,
        }
    }

    #[inline]
    fn element(&mut self, what: What) -> StreamElement<u64> {
        match what {
            What::Records => {
                StreamElement::Records(self.pool.pop().unwrap_or_else(|| vec![0; BATCH]))
            }
            What::Barrier(offset) => {
                StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(self.base + offset), 0))
            }
        }
    }

    #[inline]
    fn take_back(&mut self, passed: Option<StreamElement<u64>>) {
        if let Some(StreamElement::Records(batch)) = passed {
            self.pool.push(batch);
        }
        for s in self.signals.drain(..) {
            if matches!(s, BarrierSignal::Trigger { .. }) {
                self.triggers += 1;
            }
        }
    }

    /// One pass of `script` through `handler`, as an input gate drives it.
    #[inline]
    fn pass<H: BarrierHandler<u64>>(&mut self, handler: &mut H, script: &Script) {
        for &(ch, what) in &script.items {
            let el = self.element(what);
            let passed = handler.on_element(ch, el, 0, &mut self.signals);
            self.take_back(passed);
            while let Some((ch, el)) = handler.next_replay() {
                let passed = handler.on_element(ch, el, 0, &mut self.signals);
                self.take_back(passed);
            }
        }
        self.base += script.checkpoints_per_pass;
    }

    /// The same loop with no handler: the harness's own cost.
    #[inline]
    fn pass_baseline(&mut self, script: &Script) {
        for &(_, what) in &script.items {
            // No black_box: it would force the element through memory,
            // which the handler loops do not do either.
            let el = self.element(what);
            self.take_back(Some(el));
        }
    }
}

#[derive(Clone, Copy)]
enum Input {
    Records,
    BarriersEvery1000,
    OneBlocked,
}

impl Input {
    fn name(self) -> &'static str {
        match self {
            Input::Records => "records",
            Input::BarriersEvery1000 => "barriers_every_1000",
            Input::OneBlocked => "one_blocked",
        }
    }

    fn script(self, channels: usize) -> Script {
        match self {
            Input::Records => records_script(channels, 0),
            Input::BarriersEvery1000 => barriers_script(channels),
            Input::OneBlocked => records_script(channels, 1),
        }
    }
}

/// Prepares `handler` for `input`, runs one checked pass, then times passes.
fn bench_handler<H: BarrierHandler<u64>>(c: &mut Criterion, kind: &str, make: impl Fn(usize) -> H) {
    for input in [Input::Records, Input::BarriersEvery1000, Input::OneBlocked] {
        let mut group = c.benchmark_group(format!("barrier_handlers/{kind}/{}", input.name()));
        for channels in [2usize, 8, 130] {
            let script = input.script(channels);
            let mut handler = make(channels);
            let mut h = Harness::new(1);
            if let Input::OneBlocked = input {
                // Checkpoint 1 starts on channel 0 only and never completes.
                let el = StreamElement::Barrier(CheckpointBarrier::new(CheckpointId(1), 0));
                let passed = handler.on_element(0, el, 0, &mut h.signals);
                h.take_back(passed);
                h.base = 2;
            }
            // Behaviour check before timing.
            let pool_before = h.pool.len();
            h.pass(&mut handler, &script);
            assert_eq!(h.triggers, script.checkpoints_per_pass, "{kind} {channels}");
            assert_eq!(h.pool.len(), pool_before, "every batch came back");
            assert_eq!(handler.held_bytes(), 0);
            assert!(!handler.has_replay());
            if let Input::OneBlocked = input {
                assert_eq!(handler.is_blocked(0), kind == "aligner");
            } else {
                assert!(handler.blocked().is_empty());
            }

            group.throughput(Throughput::Elements(script.items.len() as u64));
            group.bench_function(BenchmarkId::from_parameter(channels), |b| {
                b.iter(|| h.pass(&mut handler, &script))
            });
        }
        group.finish();
    }
}

fn barrier_handlers(c: &mut Criterion) {
    let config = HandlerConfig {
        max_alignment_bytes: None,
        blocker_capacity_bytes: u64::MAX,
    };
    bench_handler(c, "aligner", |n| Aligner::<u64>::new(n, config));
    bench_handler(c, "tracker", Tracker::new);

    let script = records_script(2, 0);
    let mut h = Harness::new(1);
    let mut group = c.benchmark_group("barrier_handlers/baseline");
    group.throughput(Throughput::Elements(script.items.len() as u64));
    group.bench_function("pool_loop", |b| b.iter(|| h.pass_baseline(&script)));
    group.finish();
}

/// What `criterion_group!`/`criterion_main!` would generate (written out so
/// that no undocumented public function is generated).
fn main() {
    let mut c = Criterion::default().configure_from_args();
    barrier_handlers(&mut c);
    c.final_summary();
}
