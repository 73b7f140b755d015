//! Event-time windows in running jobs: out-of-order records within the
//! watermark bound, late records beyond it, and an ended input that
//! releases the watermark of a two-input task.

use lockgate::ingest::{ingest_channel, IngestReceiver, TryRecvError};
use lockgate::*;
use lockgate_operators::window::{Count, WindowAssigner, WindowOperator, WindowOutput};
use std::time::Duration;

/// Emits the given timestamps one per poll, with a watermark of `max seen
/// - bound - 1` (as the CSV source computes it).
struct Timestamps {
    ts: Vec<i64>,
    next: usize,
    bound: i64,
    max: Option<i64>,
}

impl Source<i64> for Timestamps {
    fn poll(&mut self, out: &mut Vec<i64>, _max: usize) -> Result<SourcePoll, BoxError> {
        if let Some(&t) = self.ts.get(self.next) {
            out.push(t);
            self.max = Some(self.max.map_or(t, |m| m.max(t)));
            self.next += 1;
        }
        Ok(if self.next == self.ts.len() {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }
    fn current_watermark(&self) -> Option<Watermark> {
        self.max.map(|m| Watermark(m - self.bound - 1))
    }
}

impl Checkpointed for Timestamps {}

/// Emits what the test sends it; ends when the sender is dropped.
struct Fed {
    rx: IngestReceiver<i64>,
    max: Option<i64>,
    done: bool,
}

impl Source<i64> for Fed {
    fn poll(&mut self, out: &mut Vec<i64>, max: usize) -> Result<SourcePoll, BoxError> {
        while out.len() < max {
            match self.rx.try_recv() {
                Ok(t) => {
                    self.max = Some(self.max.map_or(t, |m| m.max(t)));
                    out.push(t);
                }
                Err(TryRecvError::Empty) => {
                    return Ok(SourcePoll::Idle { wake_at_ns: None });
                }
                Err(TryRecvError::Ended) => {
                    self.done = true;
                    return Ok(SourcePoll::Finished);
                }
            }
        }
        Ok(SourcePoll::Ready)
    }
    fn wake_on<'a>(&'a self, on: &mut lockgate::source::WakeOn<'a>) {
        on.channel(&self.rx);
    }
    fn current_watermark(&self) -> Option<Watermark> {
        self.max.map(|m| Watermark(m - 1))
    }
}

impl Checkpointed for Fed {}

type Out = WindowOutput<u8, u64, i64>;

/// Tumbling 10 ms windows counting records, one key, late side output.
fn windows() -> impl Fn(&lockgate::task::SubtaskInfo) -> WindowOperator<i64, u8, Count> + Send + Sync
{
    |_| {
        WindowOperator::new(
            WindowAssigner::tumbling(10).unwrap(),
            Count,
            |_: &i64| 0u8,
            |t: &i64| *t,
        )
        .with_late_side_output()
    }
}

#[test]
fn out_of_order_records_within_the_bound_count_and_later_ones_are_late() {
    let job = JobBuilder::new("windows", JobConfig::default());
    // bound 5: 3 after 7 is on time (watermark 7-5-1 = 1); 2 after 18 is
    // late (watermark 12 passed window [0,10)); 14 after 18 is on time.
    let ts = vec![1, 7, 3, 12, 18, 2, 14, 25];
    let rx = job
        .source("ts", 1, move |_| Timestamps {
            ts: ts.clone(),
            next: 0,
            bound: 5,
            max: None,
        })
        .key_by(|_| 0)
        .task("windows", 1)
        .process("windows", windows())
        .collect();
    job.start().unwrap().wait().unwrap();
    let outs: Vec<Out> = rx.try_iter().collect();
    let mut fired: Vec<(i64, u64)> = Vec::new();
    let mut late = Vec::new();
    for o in outs {
        match o {
            WindowOutput::Fired(r) => fired.push((r.window.start, r.value)),
            WindowOutput::Late(t) => late.push(t),
        }
    }
    assert_eq!(fired, [(0, 3), (10, 3), (20, 1)]);
    assert_eq!(late, [2]);
}

#[test]
fn an_ended_input_releases_the_watermark_of_a_two_input_task() {
    let job = JobBuilder::new("ended", JobConfig::default());
    let short = job.source("short", 1, |_| Timestamps {
        ts: vec![1, 2, 3],
        next: 0,
        bound: 0,
        max: None,
    });
    let (tx, feed) = ingest_channel::<i64>(1024);
    let long = job.source("long", 1, move |_| Fed {
        rx: feed.clone(),
        max: None,
        done: false,
    });
    let rx = short
        .key_by(|_| 0)
        .union(long.key_by(|_| 0))
        .task("windows", 1)
        .process("windows", windows())
        .collect();
    let handle = job.start().unwrap();
    tx.push(5).unwrap();
    tx.push(25).unwrap();
    // The short input ended (its channel no longer holds the watermark) and
    // the long one is at 24: window [0,10) fires while the job still runs.
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the window fired before the long input ended");
    match first {
        WindowOutput::Fired(r) => {
            assert_eq!((r.window.start, r.value), (0, 4));
        }
        WindowOutput::Late(t) => panic!("late {t}"),
    }
    assert!(!handle.is_finished());
    drop(tx);
    handle.wait().unwrap();
    let rest: Vec<(i64, u64)> = rx
        .try_iter()
        .filter_map(|o| o.fired().map(|r| (r.window.start, r.value)))
        .collect();
    assert_eq!(rest, [(20, 1)]);
}
