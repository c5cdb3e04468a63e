//! Scratch memory that sessions borrow only while they run.
//!
//! A session's arena holds two kinds of tensors: those that outlive a run (graph
//! inputs and outputs, recurrent state), which the session keeps, and the
//! intermediates, which are dead between runs. Sessions that do not run at the same
//! time can take the intermediates' memory from one pool: each run borrows a buffer,
//! and gives it back when it ends. The pool makes a new buffer only when every one it
//! has is lent, so it holds as many as there were runs at once, and never more than
//! it has member sessions.
//!
//! The lock is held only to take or return a buffer, never while a kernel or a
//! caller's callback runs; buffers are found by size, never by address.

use crate::memory::Line;
use std::sync::{Arc, Mutex, MutexGuard};

/// A pool of scratch arenas shared by sessions (see [`crate::SessionOptions::shared_arena`]).
///
/// [`Model::shared_arena`](crate::Model::shared_arena) gives the pool of a model's
/// sessions; [`SharedArena::new`] makes one for any group of sessions (of several
/// models run one after another, say). Cloning gives another handle to the same pool.
#[derive(Clone, Default)]
pub struct SharedArena(Arc<Pool>);

#[derive(Default)]
struct Pool(Mutex<PoolState>);

#[derive(Default)]
struct PoolState {
    /// Buffers not lent now.
    idle: Vec<Vec<Line>>,
    /// Buffers lent now.
    lent: usize,
    /// Sessions using the pool: the most buffers it may keep.
    members: usize,
    /// Bytes of every buffer, idle or lent.
    bytes: usize,
}

impl std::fmt::Debug for SharedArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.lock();
        f.debug_struct("SharedArena").field("members", &s.members).field("buffers", &(s.idle.len() + s.lent)).field("bytes", &s.bytes).finish()
    }
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Every update below completes before the guard drops (no call that can
        // panic in between), so a poisoned lock holds a consistent state.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SharedArena {
    /// An empty pool, for sessions of any models.
    pub fn new() -> SharedArena {
        SharedArena::default()
    }

    /// Buffers the pool holds now, idle or lent: at most the number of its sessions
    /// that ran at the same time.
    pub fn buffers(&self) -> usize {
        let s = self.0.lock();
        s.idle.len() + s.lent
    }

    /// Bytes of those buffers.
    pub fn bytes(&self) -> usize {
        self.0.lock().bytes
    }

    /// Sessions using the pool now.
    pub fn sessions(&self) -> usize {
        self.0.lock().members
    }

    /// Whether two handles are the same pool.
    pub fn same_pool(&self, other: &SharedArena) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A handle that does not keep the pool alive.
    pub(crate) fn downgrade(&self) -> WeakArena {
        WeakArena(Arc::downgrade(&self.0))
    }

    /// Registers a session; it leaves when the returned membership drops.
    pub(crate) fn join(&self) -> Membership {
        let mut s = self.0.lock();
        s.members += 1;
        // Room for every member's buffer, so giving one back never allocates in a run.
        let want = s.members;
        let have = s.idle.len();
        s.idle.reserve(want - have);
        drop(s);
        Membership(self.clone())
    }

    /// A buffer of at least `bytes` bytes for one run, returned to the pool when the
    /// lease drops. Takes the smallest idle buffer that is large enough; when none is,
    /// the largest idle one is replaced by a larger one (so sizes follow the largest
    /// need instead of multiplying), and with none idle a new one is made. A session
    /// that runs with the same plan again finds its size and allocates nothing.
    pub(crate) fn lend(&self, bytes: usize) -> Lease<'_> {
        let words = bytes.div_ceil(crate::memory::ALIGN);
        let mut s = self.0.lock();
        let fits = s.idle.iter().enumerate().filter(|(_, b)| b.len() >= words).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
        let pick = fits.or_else(|| s.idle.iter().enumerate().max_by_key(|(_, b)| b.len()).map(|(i, _)| i));
        let taken = pick.map(|i| s.idle.swap_remove(i));
        s.lent += 1;
        let old = taken.as_ref().map_or(0, Vec::len);
        if old < words {
            s.bytes = s.bytes - old * crate::memory::ALIGN + words * crate::memory::ALIGN;
        }
        drop(s);
        let buf = match taken {
            Some(b) if b.len() >= words => b,
            // Dropped before the new one is made: both never exist at once.
            small => {
                drop(small);
                vec![Line::default(); words]
            }
        };
        Lease { pool: &self.0, buf, bytes }
    }
}

/// A pool held without keeping it alive (a model's link to its sessions' pool).
#[derive(Default)]
pub(crate) struct WeakArena(std::sync::Weak<Pool>);

impl WeakArena {
    /// The pool, while someone holds it.
    pub(crate) fn upgrade(&self) -> Option<SharedArena> {
        self.0.upgrade().map(SharedArena)
    }
}

/// A session's place in a pool: the pool keeps at most one buffer per member.
pub(crate) struct Membership(SharedArena);

impl Membership {
    /// The pool.
    pub(crate) fn pool(&self) -> &SharedArena {
        &self.0
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut s = (self.0).0.lock();
        s.members = s.members.saturating_sub(1);
        // Idle buffers beyond what the remaining members may hold go now.
        let mut freed = Vec::new();
        while s.idle.len() + s.lent > s.members {
            let Some(smallest) = s.idle.iter().enumerate().min_by_key(|(_, b)| b.len()).map(|(i, _)| i) else { break };
            let b = s.idle.swap_remove(smallest);
            s.bytes -= b.len() * crate::memory::ALIGN;
            freed.push(b);
        }
        drop(s);
        drop(freed);
    }
}

/// A buffer lent for one run.
pub(crate) struct Lease<'p> {
    pool: &'p Pool,
    buf: Vec<Line>,
    bytes: usize,
}

impl Lease<'_> {
    /// The lent bytes (exactly the size asked for).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.buf)[..self.bytes]
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut s = self.pool.lock();
        s.lent -= 1;
        if s.idle.len() + s.lent < s.members {
            // Capacity was reserved when the member joined: no allocation here.
            s.idle.push(buf);
            return;
        }
        // More buffers than sessions (members left while this one was lent).
        s.bytes -= buf.len() * crate::memory::ALIGN;
        drop(s);
        drop(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_follow_concurrency_and_members() {
        let pool = SharedArena::new();
        let (a, b, c) = (pool.join(), pool.join(), pool.join());
        {
            let _one = pool.lend(100);
        }
        {
            let _again = pool.lend(64);
        }
        assert_eq!(pool.buffers(), 1, "runs one after another share one buffer");
        // Buffers are whole cache lines: 100 bytes take 128.
        assert_eq!(pool.bytes(), 128);
        {
            let (_x, _y) = (pool.lend(100), pool.lend(1000));
            assert_eq!(pool.buffers(), 2);
        }
        assert_eq!(pool.buffers(), 2);
        // The small request takes the small buffer, the large one the large.
        {
            let mut x = pool.lend(1000);
            assert_eq!(x.bytes_mut().len(), 1000);
            let _y = pool.lend(8);
            assert_eq!(pool.bytes(), 128 + 1024);
        }
        drop((a, b));
        assert_eq!(pool.buffers(), 1, "one member left keeps one buffer");
        assert_eq!(pool.bytes(), 1024, "the larger one");
        drop(c);
        assert_eq!((pool.buffers(), pool.bytes(), pool.sessions()), (0, 0, 0));
    }

    #[test]
    fn a_buffer_lent_while_its_member_leaves_is_freed_on_return() {
        let pool = SharedArena::new();
        let m = pool.join();
        let lease = pool.lend(256);
        drop(m);
        assert_eq!(pool.buffers(), 1);
        drop(lease);
        assert_eq!((pool.buffers(), pool.bytes()), (0, 0));
    }

    #[test]
    fn a_larger_need_replaces_the_largest_idle_buffer() {
        let pool = SharedArena::new();
        let _m = pool.join();
        drop(pool.lend(80));
        drop(pool.lend(800));
        assert_eq!((pool.buffers(), pool.bytes()), (1, 832));
    }
}
