//! A small persistent thread pool for intra-op parallelism.
//!
//! A session owns one pool (never a global or thread-local one). `run(n, f)`
//! calls `f(0..n)` across the calling thread and the workers and returns when all
//! calls are done, so `f` may borrow from the caller's stack. Work is split by
//! the caller into contiguous chunks of output, which keeps results identical
//! for any thread count.
//!
//! While tracing is on ([`ThreadPool::set_tracing`]) each thread records one
//! [`WorkSpan`] per parallel region it worked in; off, the only cost is one relaxed
//! atomic load per thread per region.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// One thread's share of one parallel region: from its first task's start to its
/// last task's end. Recorded only while tracing is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkSpan {
    /// 0 for the thread that called [`ThreadPool::run`], `i` for worker `i`
    /// (named `ferrite-worker-{i}`).
    pub thread: usize,
    /// When the thread started its first task of the region.
    pub start: Instant,
    /// When it finished its last one.
    pub end: Instant,
    /// Tasks it ran.
    pub tasks: usize,
}

/// A borrowed task function with its lifetime erased; only dereferenced while
/// `ThreadPool::run` that installed it is still waiting for it.
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn(usize) + Sync));

// SAFETY: the pointee is `Sync`, and `run` keeps it alive until every task that
// could call it has finished (see `run`).
unsafe impl Send for Job {}

/// Iterations a worker spins on the job word before sleeping; consecutive ops of
/// one run then start without a sleep/wake round trip.
const SPIN: u32 = 1 << 15;

struct Shared {
    /// (generation << 32) | next task index. Claiming a task is a compare-and-swap
    /// on the whole word, so a worker can never take a task of a newer job with an
    /// older job's function.
    word: AtomicU64,
    /// Tasks in the current job.
    n: AtomicUsize,
    /// Tasks not finished yet.
    remaining: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Record a [`WorkSpan`] per thread and region.
    tracing: AtomicBool,
    /// Spans recorded and not yet taken.
    spans: Mutex<Vec<WorkSpan>>,
    job: Mutex<Option<Job>>,
    sleep: Mutex<()>,
    wake: Condvar,
    /// Workers that have started running their loop.
    started: AtomicUsize,
}

/// A pool of `threads - 1` workers; the caller of [`ThreadPool::run`] is the last thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` calls (one parallel region at a time).
    region: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool").field("threads", &self.threads()).finish()
    }
}

impl Shared {
    /// Claims the next task of generation `gen`, if any is left.
    fn claim(&self, gen: u64) -> Option<usize> {
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            let (g, i) = (w >> 32, (w & 0xffff_ffff) as usize);
            if g != gen || i >= self.n.load(Ordering::Acquire) {
                return None;
            }
            match self.word.compare_exchange_weak(w, w + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(i),
                Err(now) => w = now,
            }
        }
    }

    /// Runs tasks of generation `gen` until none are left, on thread `thread`.
    fn work(&self, gen: u64, job: Job, thread: usize) {
        let tracing = self.tracing.load(Ordering::Relaxed);
        let mut started: Option<Instant> = None;
        let mut tasks = 0;
        let mut next = self.claim(gen);
        while let Some(i) = next {
            if tracing && started.is_none() {
                started = Some(Instant::now());
            }
            // SAFETY: `run` keeps the function alive until `remaining` reaches 0,
            // which cannot happen before this task decrements it below.
            let ok = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)(i) })).is_ok();
            if !ok {
                self.panicked.store(true, Ordering::Relaxed);
            }
            tasks += 1;
            // The next task is claimed before this one is counted finished, so the span
            // is stored before the last decrement: once `run` sees no task remaining,
            // every span of the region is there for `take_spans`.
            next = self.claim(gen);
            if let (None, Some(start)) = (next, started) {
                let span = WorkSpan { thread, start, end: Instant::now(), tasks };
                self.spans.lock().unwrap_or_else(|e| e.into_inner()).push(span);
            }
            self.remaining.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl ThreadPool {
    /// A pool running work on `threads` threads in total (the caller included).
    pub fn new(threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            word: AtomicU64::new(0),
            n: AtomicUsize::new(0),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            tracing: AtomicBool::new(false),
            spans: Mutex::new(Vec::new()),
            job: Mutex::new(None),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            started: AtomicUsize::new(0),
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new().name(format!("ferrite-worker-{i}")).spawn(move || worker(&s, i)).expect("spawning a worker thread")
            })
            .collect::<Vec<_>>();
        // The pool is ready when `new` returns: a thread's start-up (the runtime's
        // per-thread state, which allocates) happens here and not during a later run,
        // where it would show as an allocation of a steady-state run on a loaded machine
        // whose scheduler started the worker late.
        while shared.started.load(Ordering::Acquire) < workers.len() {
            std::thread::yield_now();
        }
        ThreadPool { shared, workers, region: Mutex::new(()) }
    }

    /// Threads that run work, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Starts (or stops) recording a [`WorkSpan`] per thread and parallel region.
    /// Stopping keeps the spans recorded so far for [`ThreadPool::take_spans`].
    pub fn set_tracing(&self, on: bool) {
        self.shared.tracing.store(on, Ordering::Relaxed);
    }

    /// Moves the spans recorded since the last call to the end of `out`. After a
    /// [`ThreadPool::run`] returns, its spans are all there.
    pub fn take_spans(&self, out: &mut Vec<WorkSpan>) {
        out.append(&mut self.shared.spans.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Calls `f(i)` for every `i` in `0..n`, on the pool's threads, and returns when
    /// all have finished. A panic in `f` is re-raised here after the others finish.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() || n <= 1 {
            (0..n).for_each(f);
            return;
        }
        let _region = self.region.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased. This function does not return until
        // `remaining` is 0, i.e. until every claimed task has finished, and tasks of
        // this generation can no longer be claimed after that (all are taken), so
        // the pointer is never used after the borrow ends.
        let job = Job(unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync + 'static)>(f as *const _) });
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        s.panicked.store(false, Ordering::Relaxed);
        s.n.store(n, Ordering::Release);
        s.remaining.store(n, Ordering::Release);
        let gen = (s.word.load(Ordering::Acquire) >> 32) + 1;
        s.word.store(gen << 32, Ordering::Release);
        {
            // Taking the lock orders this publication before any sleeper's re-check.
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
        }
        s.wake.notify_all();
        s.work(gen, job, 0);
        let mut spins = 0u32;
        while s.remaining.load(Ordering::Acquire) > 0 {
            if spins < SPIN {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        if s.panicked.load(Ordering::Relaxed) {
            panic!("a parallel task panicked");
        }
    }
}

fn worker(s: &Shared, thread: usize) {
    s.started.fetch_add(1, Ordering::Release);
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        let gen = loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = s.word.load(Ordering::Acquire) >> 32;
            if g != seen {
                break g;
            }
            if spins < SPIN {
                std::hint::spin_loop();
                spins += 1;
            } else {
                let guard = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                if s.word.load(Ordering::Acquire) >> 32 == seen && !s.shutdown.load(Ordering::Acquire) {
                    drop(s.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
                }
                spins = 0;
            }
        };
        seen = gen;
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            s.work(gen, job, thread);
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Splits `0..total` into at most `parts` contiguous, nearly equal ranges.
pub fn chunk(total: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    let (base, extra) = (total / parts, total % parts);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_every_task_once_and_borrows_the_stack() {
        let pool = ThreadPool::new(3);
        for n in [0, 1, 2, 7, 100] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn tracing_records_one_span_per_thread_and_region() {
        let pool = ThreadPool::new(3);
        let work = |_| std::thread::sleep(std::time::Duration::from_millis(2));
        pool.run(6, &work);
        let mut spans = Vec::new();
        pool.take_spans(&mut spans);
        assert!(spans.is_empty(), "nothing is recorded while tracing is off");
        pool.set_tracing(true);
        let before = Instant::now();
        pool.run(6, &work);
        pool.take_spans(&mut spans);
        // Every task is in exactly one span, each thread has at most one span, and
        // every span lies within the region.
        assert_eq!(spans.iter().map(|s| s.tasks).sum::<usize>(), 6);
        let mut threads: Vec<usize> = spans.iter().map(|s| s.thread).collect();
        threads.sort_unstable();
        threads.dedup();
        assert_eq!(threads.len(), spans.len());
        assert!(threads.iter().all(|&t| t < 3));
        assert!(spans.iter().all(|s| before <= s.start && s.start <= s.end && s.end <= Instant::now()));
        pool.take_spans(&mut spans);
        assert_eq!(spans.iter().map(|s| s.tasks).sum::<usize>(), 6, "taking moves the spans out");
        pool.set_tracing(false);
    }

    #[test]
    fn chunks_cover_the_range() {
        for (total, parts) in [(10, 3), (2, 4), (0, 2), (7, 1)] {
            let v: Vec<usize> = (0..parts).flat_map(|i| chunk(total, parts, i)).collect();
            assert_eq!(v, (0..total).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_panicking_task_is_reported_and_the_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(4, &|i| assert!(i != 2))));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(4, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 4);
    }
}
