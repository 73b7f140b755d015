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
//! core until it blocks, yields, or the scheduler's next tick (4 ms at
//! the common `HZ=250`). `perf sched timehist` showed task threads kept
//! off their cores that way for milliseconds at a time
//! (docs/benchmarks-history.md, "Background threads yield").
//!
//! So a background thread calls [`yield_point`] between pieces of its
//! work (parts, key groups, chunks of a write); once it has run
//! [`YIELD_EVERY_NS`] since its last yield, the call gives the core to any
//! runnable thread, which is where a task thread waits after its own
//! yield. On any other thread the call costs one thread-local read.
//!
//! With a thread per task a snapshot thread keeps the tasks' priority, and
//! its yield points bound each of its turns (at `SCHED_IDLE` it starved
//! behind the tasks' spinning, docs/benchmarks-history.md).
//!
//! A yield costs the background thread a turn of the scheduler: short
//! where the tasks park soon after they run (an open loop such as W2: tens
//! of µs), milliseconds where every core is taken by task threads that
//! never park (a closed loop such as W1), where a checkpoint's few hundred
//! µs of work would take many turns. So a yield that kept the thread off
//! its core for [`SLOW_YIELD_NS`] or more stops its yields for
//! [`QUIET_AFTER_SLOW_NS`]: then nothing waits for the core that would not
//! have waited anyway, and the checkpoint is not held up. Measured on 2
//! cores with a thread per task (BENCHMARKS.md, "Background threads: yield
//! while it is cheap"). On cooperative
//! workers there is no snapshot thread: the worker runs a checkpoint's
//! asynchronous part itself, in its idle time, as [`Sliced`] work that the
//! same yield points cut into slices of at most [`YIELD_EVERY_NS`]. A
//! slice is a stackful coroutine (`corosensei`), so that every yield point
//! deep inside a state type's encoder can end a slice without that code
//! being written as a state machine.

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How long a background thread runs between two yields at most (as far
/// as its work has yield points), ns: 50 µs, about 2.5 thread wake-ups on
/// the 2-core reference machine (~20 µs each, `WaitStrategy`'s docs),
/// against the 4 ms a core could be held until the next scheduler tick. A
/// `sched_yield` with nothing else runnable costs ~0.5 µs, so the yields
/// cost a background thread at most ~1 % of its time.
pub const YIELD_EVERY_NS: u64 = 50_000;

/// A yield that kept a background thread off its core this long (300 µs,
/// some 15 task wake-ups on the reference machine) shows the cores taken
/// by threads that do not park: see the module docs.
pub(crate) const SLOW_YIELD_NS: u64 = 300_000;

/// How long a background thread runs without yielding after a slow yield
/// ([`SLOW_YIELD_NS`]): 100 ms, ten checkpoints at a 10 ms interval, then
/// it tries again.
pub(crate) const QUIET_AFTER_SLOW_NS: u64 = 100_000_000;

/// When a background thread's yield points yield: a pure rule over the
/// engine's clock, so that it is tested without a scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct YieldClock {
    /// When the last yield returned.
    last_ns: u64,
    /// No yield before this (after a slow one).
    quiet_until_ns: u64,
}

impl YieldClock {
    fn new(now: u64) -> Self {
        YieldClock {
            last_ns: now,
            quiet_until_ns: 0,
        }
    }

    /// True when a yield point at `now` yields.
    fn due(&self, now: u64) -> bool {
        now.saturating_sub(self.last_ns) >= YIELD_EVERY_NS && now >= self.quiet_until_ns
    }

    /// A yield began at `before` and returned at `back`.
    fn yielded(&mut self, before: u64, back: u64) {
        self.last_ns = back;
        if back.saturating_sub(before) >= SLOW_YIELD_NS {
            self.quiet_until_ns = back.saturating_add(QUIET_AFTER_SLOW_NS);
        }
    }

    /// Yields the core now if a yield is due; true when it did (the clock
    /// changed and is to be stored again).
    fn yield_if_due(&mut self) -> bool {
        let now = crate::util::clock::now_ns();
        if !self.due(now) {
            return false;
        }
        std::thread::yield_now();
        self.yielded(now, crate::util::clock::now_ns());
        true
    }
}

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
/// publication under way) until the guard drops: meanwhile idle
/// cooperative workers park instead of yielding ([`any_busy`]).
pub(crate) fn busy() -> Busy {
    BUSY.fetch_add(1, Ordering::Relaxed);
    Busy(())
}

/// Whether a background thread has work under way: an idle cooperative
/// worker then parks at once instead of yielding (`runtime/worker.rs`).
///
/// A yielding worker stays runnable, so the kernel sees no idle time: a
/// `SCHED_IDLE` snapshot thread then gets almost no CPU (its weight is 3
/// against 1024, and each of its own yields pushes its turn back), and its
/// checkpoint takes tens of ms on 2 cores where the workers leave the
/// cores idle most of the time (W2: one record every 10 µs per source).
/// A parked worker is idle time the background thread takes at once, and
/// the worker's wake-up (a record sent to it, or its sources' next send
/// due) preempts that thread at once. Measured on 2 cores
/// (docs/benchmarks-history.md, "Background threads yield"): W2 on 2
/// workers, exactly-once, end-to-end p50 8 ms with idle time left, 20-40
/// ms without. A nap of 20 µs in the park's place (the earlier way)
/// delayed every record sent or due during it: W2 at a 10 ms interval on
/// 2 workers, p50 with checkpoints on over off 1.50 with naps, 1.36 with
/// the park (medians of 6 alternated `loadgen --ab` runs,
/// docs/benchmarks-history.md, "Checkpoints every 10 ms").
pub(crate) fn any_busy() -> bool {
    BUSY.load(Ordering::Relaxed) > 0
}

thread_local! {
    /// On a background thread: when its yield points yield.
    static YIELDS: Cell<Option<YieldClock>> = const { Cell::new(None) };
    /// While [`Sliced`] work runs on this thread: its coroutine's yielder
    /// (null otherwise, also while the work is suspended).
    static SLICE_YIELDER: Cell<*const Yielder<(), SliceEnd>> = const { Cell::new(std::ptr::null()) };
    /// When the running slice began, ns (the engine's clock).
    static SLICE_START_NS: Cell<u64> = const { Cell::new(0) };
    /// On a task thread that runs its own checkpoint work: the function
    /// that runs one slice of it ([`set_idle_slice`]), and when it yields.
    static IDLE_SLICE: Cell<Option<IdleSlice>> = const { Cell::new(None) };
}

/// A task thread's idle work: one slice of it, and when it yields.
type IdleSlice = (fn() -> bool, YieldClock);

/// Gives the calling thread work for its idle time: `slice` runs one
/// slice of it (at most about [`YIELD_EVERY_NS`] at yield points) and
/// returns false when there was nothing to run. `None` takes it away.
pub(crate) fn set_idle_slice(slice: Option<fn() -> bool>) {
    let now = crate::util::clock::now_ns();
    IDLE_SLICE.with(|c| c.set(slice.map(|s| (s, YieldClock::new(now)))));
}

/// Where a task thread would wait for input: runs one slice of its idle
/// work, if it has any ready ([`set_idle_slice`]); false (at once) when
/// there was none, and the thread may wait.
///
/// After a slice the thread yields its core as a background thread's
/// yield point does (every [`YIELD_EVERY_NS`] of work, none for a while
/// after a slow yield): on 2 cores a source that ran its checkpoint work
/// kept the other source, woken for the same checkpoint on its core,
/// waiting for it, and the barrier alignment downstream with it. W2 at
/// 100 ms, a thread per task, 4 alternated rounds: records sent in the
/// first 0.2 ms after a trigger waited 346 µs (p50) with the yield, 531
/// µs without (docs/benchmarks-history.md).
pub(crate) fn run_idle_slice() -> bool {
    let Some((slice, mut clock)) = IDLE_SLICE.with(Cell::get) else {
        return false;
    };
    if !slice() {
        return false;
    }
    if clock.yield_if_due() {
        IDLE_SLICE.with(|c| c.set(Some((slice, clock))));
    }
    true
}

/// How a slice of [`Sliced`] work ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SliceEnd {
    /// At a yield point, its time used up: more work is ready.
    Working,
    /// The work waits for input ([`wait_in_slice`]).
    Waiting,
    /// The work returned (or panicked, the panic passed on to the caller).
    Done,
}

/// The stack of a slice's coroutine: as a spawned thread's default, 2 MiB
/// (reserved address space; pages are touched only as deep as the work
/// goes).
const SLICE_STACK_BYTES: usize = 2 << 20;

/// Work that runs on the calling thread in slices: [`Sliced::run_slice`]
/// runs it until its next [`yield_point`] past [`YIELD_EVERY_NS`] since
/// the slice began, until it waits ([`wait_in_slice`]), or until it ends.
/// A cooperative worker runs its tasks' checkpoint work so, between
/// rounds over its tasks: a record that arrives meanwhile waits at most
/// about one slice. Code between two yield points runs whole.
///
/// Not `Send`: a slice's stack holds whatever the work holds, so the work
/// starts, runs and ends (or is dropped, which unwinds it) on one thread.
pub(crate) struct Sliced {
    co: Coroutine<(), SliceEnd, (), DefaultStack>,
}

/// Work for [`Sliced`] (or, should slices be refused, a thread).
pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// Clears the thread's yielder when the work returns or unwinds.
struct LeaveSlice;

impl Drop for LeaveSlice {
    fn drop(&mut self) {
        SLICE_YIELDER.with(|c| c.set(std::ptr::null()));
    }
}

impl Sliced {
    /// Prepares `work` to run in slices on the calling thread.
    ///
    /// # Errors
    /// When the OS refuses the coroutine's stack (`mmap`); `work` comes
    /// back with the error, to run some other way.
    pub(crate) fn new(work: Work) -> Result<Self, (std::io::Error, Work)> {
        let stack = match DefaultStack::new(SLICE_STACK_BYTES) {
            Ok(s) => s,
            Err(e) => return Err((e, work)),
        };
        let co = Coroutine::with_stack(stack, move |y: &Yielder<(), SliceEnd>, ()| {
            let _leave = LeaveSlice;
            SLICE_YIELDER.with(|c| c.set(y));
            work();
        });
        Ok(Sliced { co })
    }

    /// Runs the work for one slice; says how the slice ended. A panic of
    /// the work passes on to the caller (the work is then done).
    pub(crate) fn run_slice(&mut self) -> SliceEnd {
        if self.co.done() {
            return SliceEnd::Done;
        }
        SLICE_START_NS.with(|c| c.set(crate::util::clock::now_ns()));
        match self.co.resume(()) {
            CoroutineResult::Yield(end) => end,
            CoroutineResult::Return(()) => SliceEnd::Done,
        }
    }
}

/// Ends the running slice with `end`; returns when the next slice begins.
/// Only while [`Sliced`] work runs on this thread.
fn suspend(end: SliceEnd) {
    let y = SLICE_YIELDER.with(|c| c.replace(std::ptr::null()));
    debug_assert!(!y.is_null());
    // SAFETY: `y` was set from the `&Yielder` that the running coroutine's
    // body received, and that body has not returned (its `LeaveSlice`
    // nulls the pointer when it returns or unwinds, and a suspended
    // slice's pointer is null, as now): the yielder lives on that
    // coroutine's stack for as long as the body runs, and this code runs
    // on that stack (only the coroutine's own code sees the pointer set,
    // and a coroutine never leaves its thread, `Sliced` being !Send).
    let y = unsafe { &*y };
    y.suspend(end);
    SLICE_YIELDER.with(|c| c.set(y));
}

/// True while [`Sliced`] work runs on the calling thread.
pub(crate) fn in_slice() -> bool {
    SLICE_YIELDER.with(|c| !c.get().is_null())
}

/// Inside [`Sliced`] work: ends the slice as [`SliceEnd::Waiting`] (the
/// work has nothing to do until its input changes) and returns when the
/// next slice begins; returns false at once (and does nothing) outside.
pub(crate) fn wait_in_slice() -> bool {
    if !in_slice() {
        return false;
    }
    suspend(SliceEnd::Waiting);
    true
}

/// Moves the calling thread to the idle scheduling class (`SCHED_IDLE`):
/// it then runs only where a core has nothing else to run, and a task
/// thread that wakes up takes its core at once. For an application's
/// housekeeping beside a low-latency job (the load generator's latency
/// bookkeeping runs so); when every core stays busy it still gets a
/// little CPU (a weight of 3 against 1024), so its work is late, not lost.
/// A lock it shares with a task is best held only for moments: while it
/// waits for a core, so does a task that waits for that lock.
///
/// Returns false, and the thread keeps its priority, where the OS refuses
/// or on a system other than Linux.
///
/// ```
/// std::thread::spawn(|| {
///     let _idle = lockgate::tuning::idle_priority();
///     // ... work that may wait for idle time ...
/// })
/// .join()
/// .unwrap();
/// ```
#[cfg(target_os = "linux")]
pub fn idle_priority() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that lives across the call;
    // pid 0 is the calling thread, whose policy alone changes.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0 }
}

/// See the Linux version: a no-op elsewhere.
#[cfg(not(target_os = "linux"))]
pub fn idle_priority() -> bool {
    false
}

/// Marks the calling thread as a background thread: its [`yield_point`]s
/// yield from now on.
pub(crate) fn mark_background_thread() {
    YIELDS.with(|c| c.set(Some(YieldClock::new(crate::util::clock::now_ns()))));
}

/// A point where a background thread (a task's snapshot thread, the
/// checkpoint publisher) may give its core away: once it has run
/// [`YIELD_EVERY_NS`] (50 µs) since its last yield, it yields
/// (`sched_yield`, unless a slow yield paused its yields), so that a task
/// thread waiting for a core gets it
/// within about that time instead of at the scheduler's next tick (see
/// the module docs). In a checkpoint's asynchronous part on a cooperative
/// worker, it ends the worker's slice of that work once the slice has run
/// 50 µs, and the worker goes back to its records. On every other thread
/// (task threads, the application's) it does nothing and costs two
/// thread-local reads.
///
/// Long snapshot work of an operator's own, in
/// [`StateSnapshot`](crate::state::StateSnapshot)'s deferred part, can call it
/// every few tens of µs of work (e.g. every thousand entries encoded), as
/// lockgate's own state types and the checkpoint writer do; on a worker,
/// such work without yield points runs whole in one slice.
///
/// On a worker, work suspended at a yield point keeps every lock it holds
/// until its next slice, which comes only when the worker is free: hold
/// no lock across a yield point that a task of the job, or a thread a
/// task waits for, may take (the worker would wait for a lock that only
/// the worker itself can release).
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
    if in_slice() {
        let start = SLICE_START_NS.with(Cell::get);
        if crate::util::clock::now_ns().saturating_sub(start) >= YIELD_EVERY_NS {
            suspend(SliceEnd::Working);
        }
        return;
    }
    YIELDS.with(|c| {
        if let Some(mut clock) = c.get() {
            if clock.yield_if_due() {
                c.set(Some(clock));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs until `ns` have passed, at yield points.
    fn spin_for(ns: u64) {
        let start = crate::util::clock::now_ns();
        while crate::util::clock::now_ns() - start < ns {
            yield_point();
        }
    }

    #[test]
    fn sliced_work_ends_slices_at_yield_points_and_waits() {
        let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = steps.clone();
        let mut work = Sliced::new(Box::new(move || {
            spin_for(4 * YIELD_EVERY_NS);
            s2.lock().unwrap().push("spun");
            assert!(wait_in_slice());
            s2.lock().unwrap().push("woke");
        }))
        .map_err(|(e, _)| e)
        .unwrap();
        assert!(!in_slice());
        let mut ends = Vec::new();
        loop {
            let end = work.run_slice();
            // Never inside a slice once it returned.
            assert!(!in_slice());
            ends.push(end);
            if end == SliceEnd::Done {
                break;
            }
        }
        // 200 µs of work at yield points: cut at least once, then a wait,
        // then the end.
        let n = ends.len();
        assert!(n >= 4, "{ends:?}");
        assert!(ends[..n - 2].iter().all(|e| *e == SliceEnd::Working));
        assert_eq!(ends[n - 2..], [SliceEnd::Waiting, SliceEnd::Done]);
        assert_eq!(*steps.lock().unwrap(), ["spun", "woke"]);
        assert_eq!(work.run_slice(), SliceEnd::Done);
        // Off a slice, waiting is refused.
        assert!(!wait_in_slice());
    }

    #[test]
    fn a_panic_in_sliced_work_reaches_the_caller_and_a_dropped_one_unwinds() {
        let mut work = Sliced::new(Box::new(|| panic!("in a slice")))
            .map_err(|(e, _)| e)
            .unwrap();
        let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.run_slice()));
        assert!(p.is_err());
        assert!(!in_slice());
        assert_eq!(work.run_slice(), SliceEnd::Done);

        struct SetOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let guard = SetOnDrop(dropped.clone());
        let mut work = Sliced::new(Box::new(move || {
            let _guard = guard;
            loop {
                assert!(wait_in_slice());
            }
        }))
        .map_err(|(e, _)| e)
        .unwrap();
        assert_eq!(work.run_slice(), SliceEnd::Waiting);
        assert!(!dropped.load(Ordering::Relaxed));
        drop(work);
        assert!(
            dropped.load(Ordering::Relaxed),
            "dropping suspended work unwinds it"
        );
        assert!(!in_slice());
    }

    #[test]
    fn background_threads_count_as_busy_while_their_guard_lives() {
        // Other tests may take and drop guards meanwhile: only what this
        // guard makes true is certain.
        let busy = busy();
        assert!(any_busy());
        drop(busy);
    }

    #[test]
    fn only_background_threads_yield_and_only_after_the_interval() {
        let last = || YIELDS.with(Cell::get).map(|c| c.last_ns);
        // Not marked: never records a yield.
        yield_point();
        assert_eq!(last(), None);
        std::thread::spawn(move || {
            mark_background_thread();
            let marked = last().expect("marked");
            // Within the interval: no yield, the mark stays.
            yield_point();
            let after = last().unwrap();
            assert!(after == marked || crate::util::clock::now_ns() - marked >= YIELD_EVERY_NS);
            // Past the interval: the yield moves the mark forward. Marked
            // again first: a slow first yield on a loaded machine would
            // have paused the yields (tested below).
            mark_background_thread();
            let start = crate::util::clock::now_ns();
            while crate::util::clock::now_ns() - start < 2 * YIELD_EVERY_NS {
                std::hint::spin_loop();
            }
            yield_point();
            assert!(last().unwrap() >= start + 2 * YIELD_EVERY_NS);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_slow_yield_stops_the_yields_for_a_while_then_they_resume() {
        let t0 = 1_000_000_000;
        let mut c = YieldClock::new(t0);
        assert!(!c.due(t0 + YIELD_EVERY_NS - 1));
        assert!(c.due(t0 + YIELD_EVERY_NS));
        // A quick yield: the next is due one interval after it returned.
        let back = t0 + YIELD_EVERY_NS + 20_000;
        c.yielded(t0 + YIELD_EVERY_NS, back);
        assert!(!c.due(back + YIELD_EVERY_NS - 1));
        assert!(c.due(back + YIELD_EVERY_NS));
        // A yield that kept the thread off its core for SLOW_YIELD_NS:
        // no yield until QUIET_AFTER_SLOW_NS after it returned.
        let before = back + YIELD_EVERY_NS;
        let slow_back = before + SLOW_YIELD_NS;
        c.yielded(before, slow_back);
        assert!(!c.due(slow_back + YIELD_EVERY_NS));
        assert!(!c.due(slow_back + QUIET_AFTER_SLOW_NS - 1));
        assert!(c.due(slow_back + QUIET_AFTER_SLOW_NS));
        // Just under the threshold is not slow.
        let mut d = YieldClock::new(t0);
        d.yielded(t0, t0 + SLOW_YIELD_NS - 1);
        assert!(d.due(t0 + SLOW_YIELD_NS - 1 + YIELD_EVERY_NS));
    }
}
