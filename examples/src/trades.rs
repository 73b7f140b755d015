//! A trade aggregator, as an application embeds lockgate: trades pushed
//! from a feed into the job, per-symbol volume and VWAP in 1-second
//! event-time tumbling windows, exactly-once output handed back to the
//! application. README's Embedding section is this file.

use lockgate::source::WatermarkStrategy;
use lockgate::{
    CheckpointConfig, CheckpointId, Committed, Ingest, IngestConfig, JobBuilder, JobConfig, Output,
    RecordSize, RestoreMode,
};
use lockgate_operators::window::{AggregateFn, WindowAssigner, WindowOperator, WindowOutput};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// A trade from the feed; `seq` numbers the feed from 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, RecordSize)]
pub struct Trade {
    /// Position in the feed.
    pub seq: u64,
    /// The instrument.
    pub symbol: u64,
    /// Price, in cents.
    pub price: i64,
    /// Shares.
    pub qty: u64,
    /// Event time, ms.
    pub ts_ms: i64,
}

/// One symbol's second: its volume and volume-weighted average price.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, RecordSize)]
pub struct Bar {
    /// The instrument.
    pub symbol: u64,
    /// The window's first ms.
    pub start_ms: i64,
    /// Shares traded.
    pub volume: u64,
    /// Σ price × qty (cents): VWAP = notional / volume, exactly.
    pub notional: i128,
}

/// The aggregator's job on `config`, with checkpoints every 50 ms in
/// `checkpoint_dir` (resumed from there if it holds one), `after`: the
/// newest checkpoint whose bars the application already has. Returns the
/// job (to start), the feed's input and the committed bars.
pub fn job(
    mut config: JobConfig,
    checkpoint_dir: PathBuf,
    parallelism: usize,
    after: Option<CheckpointId>,
) -> (JobBuilder, Ingest<Trade>, Output<Committed<Bar>>) {
    config.checkpoint =
        CheckpointConfig::exactly_once(Duration::from_millis(50), Some(checkpoint_dir))
            .with_restore_mode(RestoreMode::IfPresent);
    let job = JobBuilder::new("trades", config);
    // Event time on pushed records: watermarks 100 ms behind the newest
    // trade, so windows fire while the feed runs.
    let strategy = WatermarkStrategy::bounded_out_of_orderness(100)
        .with_timestamps(|t: &Trade| t.ts_ms)
        .with_idleness(Duration::from_millis(500));
    let (trades, feed) = job.ingest_event_time("feed", IngestConfig::default(), strategy);
    let bars = trades
        .key_by(|t: &Trade| t.symbol)
        .task("vwap", parallelism)
        .process("window", |_| {
            WindowOperator::new(
                WindowAssigner::tumbling(1000).expect("a valid size"),
                AggregateFn::new(
                    || (0u64, 0i128),
                    |acc: &mut (u64, i128), t: &Trade| {
                        acc.0 += t.qty;
                        acc.1 += i128::from(t.price) * i128::from(t.qty);
                    },
                    |acc: &(u64, i128)| *acc,
                ),
                |t: &Trade| t.symbol,
                |t: &Trade| t.ts_ms,
            )
            .with_routing_key(|symbol: &u64| *symbol)
        })
        .flat_map(|out: WindowOutput<u64, (u64, i128), Trade>| {
            out.fired().map(|r| Bar {
                symbol: r.key,
                start_ms: r.window.start,
                volume: r.value.0,
                notional: r.value.1,
            })
        })
        // Exactly once: each checkpoint's bars, once it completed.
        .collect_committed(after);
    (job, feed, bars)
}

/// The feed: trade `seq`, the same in every run (a feed that can be
/// replayed from a sequence number). 8 symbols, ~4 trades a ms of event
/// time, up to 30 ms out of order.
pub fn trade(seq: u64) -> Trade {
    let h = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    Trade {
        seq,
        symbol: h % 8,
        price: 10_000 + (h >> 8) as i64 % 500,
        qty: 1 + (h >> 20) % 100,
        ts_ms: (seq / 4) as i64 - ((h >> 32) % 30) as i64,
    }
}

/// The bars of trades `0..n`, computed without lockgate (the check).
pub fn expected_bars(n: u64) -> Vec<Bar> {
    let mut bars = std::collections::BTreeMap::<(u64, i64), (u64, i128)>::new();
    for t in (0..n).map(trade) {
        let e = bars
            .entry((t.symbol, t.ts_ms.div_euclid(1000) * 1000))
            .or_default();
        e.0 += t.qty;
        e.1 += i128::from(t.price) * i128::from(t.qty);
    }
    bars.into_iter()
        .map(|((symbol, start_ms), (volume, notional))| Bar {
            symbol,
            start_ms,
            volume,
            notional,
        })
        .collect()
}
