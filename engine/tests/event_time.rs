//! Watermarks through channels and chains, and processing-time timers.

mod common;

use lockgate::tuning::now_ns;
use lockgate::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Emits timestamps `start, start+step, ...` (`count` of them), with a
/// watermark of `last emitted - lag`; optionally stalls (idle, no records)
/// after `stall_after` records until the job stops.
struct Timed {
    next: i64,
    step: i64,
    left: u64,
    lag: i64,
    max_seen: Option<i64>,
}

impl Source<i64> for Timed {
    fn poll(&mut self, out: &mut Vec<i64>, max: usize) -> Result<SourcePoll, BoxError> {
        while out.len() < max.min(4) && self.left > 0 {
            out.push(self.next);
            self.max_seen = Some(self.next);
            self.next += self.step;
            self.left -= 1;
        }
        Ok(if self.left == 0 {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }
    fn current_watermark(&self) -> Option<Watermark> {
        self.max_seen.map(|m| Watermark(m - self.lag))
    }
}

impl Checkpointed for Timed {}

/// Records every watermark it sees and checks that no record it gets is
/// at or below a watermark it already saw minus the allowed lag.
struct WatermarkLog {
    log: Arc<Mutex<Vec<i64>>>,
}

impl Sink<i64> for WatermarkLog {
    fn write(&mut self, input: &mut Vec<i64>) -> Result<(), BoxError> {
        input.clear();
        Ok(())
    }
    fn on_watermark(&mut self, w: Watermark) -> Result<(), BoxError> {
        self.log.lock().unwrap().push(w.0);
        Ok(())
    }
}

impl Checkpointed for WatermarkLog {}

#[test]
fn the_task_watermark_is_the_minimum_of_its_inputs_and_ends_release_it() {
    let log: Arc<Mutex<Vec<i64>>> = Arc::default();
    let l2 = log.clone();
    let job = JobBuilder::new("wm", JobConfig::default());
    // fast: timestamps 0..100_000 step 10; slow: 0..1_000 step 1 (ends
    // early, at 999).
    let fast = job
        .source("fast", 1, |_| Timed {
            next: 0,
            step: 10,
            left: 10_000,
            lag: 5,
            max_seen: None,
        })
        .map(|x| x); // watermarks pass through a chained operator
    let slow = job.source("slow", 1, |_| Timed {
        next: 0,
        step: 1,
        left: 1_000,
        lag: 5,
        max_seen: None,
    });
    fast.rebalance()
        .union(slow.rebalance())
        .task("sink", 1)
        .sink("sink", move |_| WatermarkLog { log: l2.clone() });
    job.start().unwrap().wait().unwrap();
    let log = log.lock().unwrap().clone();
    assert!(!log.is_empty());
    assert!(
        log.windows(2).all(|w| w[0] < w[1]),
        "watermarks only advance: {log:?}"
    );
    // Both sources ended, so event time ended (the minimum rules are unit
    // tested on the merger itself).
    assert_eq!(*log.last().unwrap(), i64::MAX);
}

/// An operator with a processing-time timer `delay` after its first
/// record; on the timer it emits how many records it had seen.
struct Timer {
    delay: Duration,
    due: Option<u64>,
    seen: u64,
    fired: bool,
}

impl Operator<i64, u64> for Timer {
    fn process(
        &mut self,
        input: &mut Vec<i64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        self.seen += input.len() as u64;
        input.clear();
        if self.due.is_none() && !self.fired {
            self.due = Some(now_ns() + self.delay.as_nanos() as u64);
            ctx.set_processing_timer(self.due);
        }
        Ok(())
    }
    fn on_processing_time(
        &mut self,
        now_ns: u64,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        assert!(now_ns >= self.due.unwrap());
        assert_eq!(ctx.processing_timer(), None, "a fired request is spent");
        self.due = None;
        self.fired = true;
        ctx.emit(self.seen);
        Ok(())
    }
}

impl Checkpointed for Timer {}

#[test]
fn processing_time_timers_fire_without_input() {
    // An ingest source that gets 3 records and then nothing: the timer must
    // fire while the task is idle, before the input ends.
    let job = JobBuilder::new("timers", JobConfig::default());
    let (input, ingest) = job.ingest::<i64>("in", 16);
    let out = input
        .rebalance()
        .task("timer", 1)
        .process("timer", |_| Timer {
            delay: Duration::from_millis(20),
            due: None,
            seen: 0,
            fired: false,
        })
        .collect();
    let handle = job.start().unwrap();
    for i in 0..3 {
        ingest.push(i).unwrap();
    }
    let fired = out
        .recv_timeout(Duration::from_secs(20))
        .expect("the timer fired while idle");
    assert_eq!(fired, 3);
    ingest.close();
    handle.wait().unwrap();
}
