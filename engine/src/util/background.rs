//! Yield points for the engine's background threads (the tasks' snapshot
//! threads and the checkpoint publisher), so that their work never holds a
//! core for long while a task thread waits for it.
//!
//! Why this is needed: a task thread that waits for input spins briefly,
//! then calls `sched_yield` (ours, and crossbeam's backoff inside every
//! blocking `select`/`recv`: 4 yields before it parks) before it sleeps.
//! While it yields it stays *runnable*, so a background thread that the
//! yield let onto the core is not preempted when the task's input arrives
//! (only a *wake-up* preempts a `SCHED_IDLE` thread at once): it keeps the
//! core until it blocks, yields, or the scheduler's next tick, 4 ms at the
//! common `HZ=250`. Measured with `perf sched timehist` on the 2-core VM
//! (W2, exactly-once every 100 ms, 2 cooperative workers, 3 s): task
//! threads were off their cores 181-201 ms in gaps longer than 0.2 ms,
//! and snapshot threads ran 115-130 ms of that time, single turns up to
//! 4.8 ms (docs/benchmarks-history.md, "Background threads yield"; 68 ms and 10 ms
//! with the yield points).
//!
//! So a background thread calls [`yield_point`] between pieces of its
//! work (parts, key groups, chunks of a write); once it has run
//! [`YIELD_EVERY_NS`] since its last yield, the call gives the core to any
//! runnable thread, which is where a task thread waits after its own
//! yield. On any other thread the call costs one thread-local read.
//!
//! How a snapshot thread and the tasks share the cores then depends on
//! where the tasks run (measured on 2 cores, docs/benchmarks-history.md): on
//! cooperative workers it runs at `SCHED_IDLE` and idle workers nap while
//! it works ([`yield_or_nap`]), so it takes their idle time; with a thread
//! per task it keeps the tasks' priority, and its yield points bound each
//! of its turns (at `SCHED_IDLE` it starved behind the tasks' spinning).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How long a background thread runs between two yields at most (as far
/// as its work has yield points), ns: 50 µs, about 2.5 thread wake-ups on
/// the 2-core reference machine (~20 µs each, `WaitStrategy`'s docs),
/// against the 4 ms a core could be held until the next scheduler tick. A
/// `sched_yield` with nothing else runnable costs ~0.5 µs, so the yields
/// cost a background thread at most ~1 % of its time.
pub const YIELD_EVERY_NS: u64 = 50_000;

/// How long an idle cooperative worker sleeps instead of yielding while a
/// background thread has work ([`yield_or_nap`]), ns: 20 µs, two source
/// ticks of the reference workloads (10 µs), about one thread wake-up on
/// the 2-core reference machine; workers sleep with the job's timer slack
/// (1 µs by default), so the sleep ends on time.
pub(crate) const NAP_NS: u64 = 20_000;

/// Background threads of the process with work under way.
static BUSY: AtomicUsize = AtomicUsize::new(0);

/// Counts a background thread as busy until dropped ([`busy`]).
#[derive(Debug)]
pub(crate) struct Busy(());

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts the calling background thread as busy (a snapshot job or a
/// publication under way) until the guard drops: meanwhile waiting task
/// threads nap instead of yielding ([`yield_or_nap`]).
pub(crate) fn busy() -> Busy {
    BUSY.fetch_add(1, Ordering::Relaxed);
    Busy(())
}

/// What an idle cooperative worker (`runtime/worker.rs`) does where it
/// would yield: a yield, or, while a background thread has work, a nap of
/// [`NAP_NS`].
///
/// A yielding worker stays runnable, so the kernel sees no idle time: a
/// `SCHED_IDLE` snapshot thread then gets almost no CPU (its weight is 3
/// against 1024, and each of its own yields pushes its turn back), and its
/// checkpoint takes tens of ms on 2 cores where the workers leave the
/// cores idle most of the time (W2: one record every 10 µs per source).
/// A nap is idle time the snapshot thread takes at once, and the nap's end
/// is a wake-up, which preempts a `SCHED_IDLE` thread at once: the worker
/// gets its core back on time. The cost: a record that another thread
/// sends during a nap waits up to 20 µs, only while a checkpoint's
/// asynchronous part runs. Measured on 2 cores (docs/benchmarks-history.md,
/// "Background threads yield"): W2 on 2 workers, exactly-once, end-to-end
/// p50 8 ms with naps, 20-40 ms without. Tasks on threads of their own
/// keep yielding: a nap in the input gate delays every hop of a record
/// (W2's p50 went from 27 to 77-101 µs in that experiment).
pub(crate) fn yield_or_nap() {
    if BUSY.load(Ordering::Relaxed) > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(NAP_NS));
    } else {
        std::thread::yield_now();
    }
}

thread_local! {
    /// `Some(time of the last yield)` on a background thread.
    static LAST_YIELD_NS: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Marks the calling thread as a background thread: its [`yield_point`]s
/// yield from now on.
pub(crate) fn mark_background_thread() {
    LAST_YIELD_NS.with(|c| c.set(Some(crate::util::clock::now_ns())));
}

/// A point where a background thread (a task's snapshot thread, the
/// checkpoint publisher) may give its core away: once it has run
/// [`YIELD_EVERY_NS`] (50 µs) since its last yield, it yields
/// (`sched_yield`), so that a task thread waiting for a core gets it
/// within about that time instead of at the scheduler's next tick (see
/// the module docs). On every other thread (task threads, the
/// application's) it does nothing and costs one thread-local read.
///
/// Long snapshot work of an operator's own, in
/// [`StateSnapshot`](crate::state::StateSnapshot)'s deferred part, can call it
/// every few tens of µs of work (e.g. every thousand entries encoded), as
/// lockgate's own state types and the checkpoint writer do.
///
/// # Examples
/// ```
/// // Off a background thread: a no-op.
/// for chunk in [1u64, 2, 3].chunks(1) {
///     let _sum: u64 = chunk.iter().sum();
///     lockgate::tuning::yield_point();
/// }
/// ```
#[inline]
pub fn yield_point() {
    LAST_YIELD_NS.with(|c| {
        if let Some(last) = c.get() {
            let now = crate::util::clock::now_ns();
            if now.saturating_sub(last) >= YIELD_EVERY_NS {
                std::thread::yield_now();
                c.set(Some(crate::util::clock::now_ns()));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_naps_while_a_background_thread_is_busy() {
        let busy = busy();
        assert!(BUSY.load(Ordering::Relaxed) >= 1);
        let start = std::time::Instant::now();
        yield_or_nap();
        // A sleep lasts at least what it asked for.
        assert!(start.elapsed() >= std::time::Duration::from_nanos(NAP_NS));
        drop(busy);
    }

    #[test]
    fn only_background_threads_yield_and_only_after_the_interval() {
        // Not marked: never records a yield.
        yield_point();
        assert_eq!(LAST_YIELD_NS.with(Cell::get), None);
        std::thread::spawn(|| {
            mark_background_thread();
            let marked = LAST_YIELD_NS.with(Cell::get).expect("marked");
            // Within the interval: no yield, the mark stays.
            yield_point();
            let after = LAST_YIELD_NS.with(Cell::get).unwrap();
            assert!(after == marked || crate::util::clock::now_ns() - marked >= YIELD_EVERY_NS);
            // Past the interval: the yield moves the mark forward.
            let start = crate::util::clock::now_ns();
            while crate::util::clock::now_ns() - start < 2 * YIELD_EVERY_NS {
                std::hint::spin_loop();
            }
            yield_point();
            assert!(LAST_YIELD_NS.with(Cell::get).unwrap() >= start + 2 * YIELD_EVERY_NS);
        })
        .join()
        .unwrap();
    }
}
