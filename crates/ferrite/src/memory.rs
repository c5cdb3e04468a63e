//! Static memory planning: every non-constant tensor gets an offset in one
//! arena, assigned from tensor lifetimes so tensors that are never alive at
//! the same step share memory. Plus the safe arena splitting the executor uses.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// Arena offsets are aligned to a cache line.
pub const ALIGN: usize = 64;

/// The unit arenas are allocated in: one cache line, aligned as one, so that an
/// arena starts on a line boundary and, with offsets multiples of [`ALIGN`], so does
/// every tensor in it. (Arenas of 8-byte words started wherever the allocator put
/// them, 16 bytes into a line for large blocks: every 64-byte vector load of a
/// float kernel then spanned two lines, which cost the depthwise kernels a third
/// of their speed.)
#[derive(Clone, Copy, Default, Debug)]
#[repr(C, align(64))]
pub struct Line(pub [u64; 8]);

impl Line {
    /// Lines holding at least `bytes` bytes, all zero. Allocated zeroed, as the
    /// arenas of 8-byte words were (`vec![Line::default(); n]` would write every
    /// line): the allocator hands large blocks out as fresh pages, which cost no
    /// memory until a run first writes them.
    pub fn zeroed(bytes: usize) -> Vec<Line> {
        let n = bytes.div_ceil(ALIGN);
        if n == 0 {
            return Vec::new();
        }
        let layout = std::alloc::Layout::array::<Line>(n).expect("arena sizes are checked against the session limit first");
        // SAFETY: the layout's size is not zero (n >= 1 lines of 64 bytes).
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Line>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` is a block from the global allocator with the layout of `n`
        // lines (capacity `n`); all-zero bytes are a valid `Line`, so all `n` are
        // initialized; the Vec frees it with that same layout.
        unsafe { Vec::from_raw_parts(p, n, n) }
    }
}

// SAFETY: `Line` is 64 plain u64 bytes with no padding (size 64 = alignment), and
// all-zero (or any) bit pattern is a valid value.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; `Copy`, `repr(C)`, no padding, no pointers.
unsafe impl bytemuck::Pod for Line {}

/// One tensor to place: its byte size and the steps it is alive for (inclusive).
#[derive(Debug, Clone, Copy)]
pub struct Lifetime {
    /// Tensor index.
    pub tensor: usize,
    /// Bytes.
    pub bytes: usize,
    /// First step at which it is alive.
    pub first: usize,
    /// Last step at which it is alive.
    pub last: usize,
}

/// Result of planning one subgraph.
#[derive(Debug, Clone, Default)]
pub struct MemoryPlan {
    /// (tensor, offset) for every planned tensor.
    pub offsets: Vec<(usize, usize)>,
    /// Arena size in bytes.
    pub arena_bytes: usize,
    /// Largest total size of tensors alive at one step: no plan can be smaller.
    pub lower_bound_bytes: usize,
    /// The lifetimes the plan placed (kept for pictures of the plan).
    pub lifetimes: Vec<Lifetime>,
    /// Bytes at the arena's start that the session keeps from run to run. A plan for
    /// a shared arena puts the tensors that outlive a run there (graph inputs and
    /// outputs, state) and the rest above, in the scratch a session borrows for each
    /// run; an ordinary plan keeps everything, so this equals `arena_bytes`.
    pub own_bytes: usize,
}

/// One tensor's place in a session's arena, for pictures and reports of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArenaBlock {
    /// Tensor index in the session's subgraph (tensors aliased to it share the block).
    pub tensor: usize,
    /// Byte offset in the arena.
    pub offset: usize,
    /// Bytes.
    pub bytes: usize,
    /// Op index of the first step at which it is alive.
    pub first_op: usize,
    /// Op index of the last step at which it is alive.
    pub last_op: usize,
}

fn align_up(v: usize) -> Option<usize> {
    v.checked_add(ALIGN - 1).map(|x| x / ALIGN * ALIGN)
}

/// How tensors are ordered before placement, and how a gap is chosen.
#[derive(Debug, Clone, Copy)]
enum Strategy {
    /// Largest first.
    Size,
    /// Largest bytes x lifetime first.
    Area,
    /// Longest-lived first.
    Duration,
    /// Earliest first, then largest.
    FirstUse,
}

/// Orders tensors for placement by `strategy`.
fn ordered(lifetimes: &[Lifetime], strategy: Strategy) -> Vec<&Lifetime> {
    let dur = |l: &Lifetime| (l.last - l.first + 1) as u64;
    // Descending criteria are bit-inverted (for unsigned integers `!` reverses the
    // order), so every strategy is an ascending (key, key) pair.
    sorted_by_key(lifetimes, |l| {
        let (bytes, first) = (l.bytes as u64, l.first as u64);
        match strategy {
            Strategy::Size => (!bytes, first),
            Strategy::Area => (!bytes.saturating_mul(dur(l)), !bytes),
            Strategy::Duration => (!dur(l), !bytes),
            Strategy::FirstUse => (first, !bytes),
        }
    })
}

/// The lifetimes in ascending order of their keys, equal keys in their given
/// order (the index breaks ties, so the unstable sort orders as a stable one would).
fn sorted_by_key(lifetimes: &[Lifetime], mut key: impl FnMut(&Lifetime) -> (u64, u64)) -> Vec<&Lifetime> {
    let mut keyed: Vec<(u64, u64, usize)> = lifetimes
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let (a, b) = key(l);
            (a, b, i)
        })
        .collect();
    sort_keys(&mut keyed);
    keyed.into_iter().map(|(_, _, i)| &lifetimes[i]).collect()
}

/// Sorts key triples ascending. Every ordering of the planner and of the
/// executor's output views goes through this one function on one element type:
/// each element type (and each key closure) would be an instance of the standard
/// library's sort, several kB of code each.
fn sort_keys(keys: &mut [(u64, u64, usize)]) {
    keys.sort_unstable();
}

/// Places tensors in `order` and returns (arena size, offsets), or the first size above `max_bytes`.
fn place(order: &[&Lifetime], best_fit: bool, max_bytes: usize) -> std::result::Result<(usize, Vec<(usize, usize)>), usize> {
    let mut placed: Vec<(usize, usize, &Lifetime)> = Vec::with_capacity(order.len());
    let mut arena = 0usize;
    for &lt in order {
        let size = align_up(lt.bytes).ok_or(usize::MAX)?;
        let mut busy: Vec<(u64, u64, usize)> =
            placed.iter().filter(|(_, _, o)| o.first <= lt.last && lt.first <= o.last).map(|&(off, sz, _)| (off as u64, sz as u64, 0)).collect();
        sort_keys(&mut busy);
        // Candidate gaps between busy ranges; the last one is open-ended.
        let mut chosen: Option<(usize, usize)> = None; // (offset, gap size)
        let mut cursor = 0usize;
        for &(bo, bs, _) in &busy {
            let (bo, bs) = (bo as usize, bs as usize);
            if bo >= cursor + size {
                let gap = bo - cursor;
                if chosen.is_none_or(|(_, g)| best_fit && gap < g) {
                    chosen = Some((cursor, gap));
                    if !best_fit {
                        break;
                    }
                }
            }
            cursor = cursor.max(bo + bs);
        }
        let off = match chosen {
            Some((o, _)) => o,
            None => cursor,
        };
        let end = off.checked_add(size).ok_or(usize::MAX)?;
        if end > max_bytes {
            return Err(end);
        }
        arena = arena.max(end);
        placed.push((off, size, lt));
    }
    Ok((arena, placed.iter().map(|&(off, _, lt)| (lt.tensor, off)).collect()))
}

/// Plans offsets for all tensors: tries several greedy placements (orderings x
/// first-fit/best-fit) and keeps the smallest arena. When none reaches the lower
/// bound, orderings from a seeded generator follow, sizes jittered or shuffled
/// outright (fused ops stretch some lifetimes, and fixed orderings then miss by a
/// few percent where another ordering does not), bounded so the search stays a
/// few million steps.
/// Each placement is O(n^2) in the number of tensors, negligible next to prepare.
pub fn plan(lifetimes: &[Lifetime], max_bytes: usize) -> Result<MemoryPlan> {
    let steps = lifetimes.iter().map(|l| l.last + 1).max().unwrap_or(0);
    // The bound in raw bytes (reported), and in aligned sizes (what a placement can reach).
    let (mut live, mut live_aligned) = (vec![0usize; steps], vec![0usize; steps]);
    for l in lifetimes {
        let a = align_up(l.bytes).unwrap_or(usize::MAX);
        for s in l.first..=l.last {
            live[s] = live[s].saturating_add(l.bytes);
            live_aligned[s] = live_aligned[s].saturating_add(a);
        }
    }
    let lower_bound_bytes = live.into_iter().max().unwrap_or(0);
    let reachable = live_aligned.into_iter().max().unwrap_or(0);
    let mut best: Option<(usize, Vec<(usize, usize)>)> = None;
    let mut smallest_failure = usize::MAX;
    let mut consider = |r: std::result::Result<(usize, Vec<(usize, usize)>), usize>, best: &mut Option<(usize, Vec<(usize, usize)>)>| match r {
        Ok(p) if best.as_ref().is_none_or(|b| p.0 < b.0) => *best = Some(p),
        Ok(_) => {}
        Err(n) => smallest_failure = smallest_failure.min(n),
    };
    for strategy in [Strategy::Size, Strategy::Area, Strategy::Duration, Strategy::FirstUse] {
        let order = ordered(lifetimes, strategy);
        for best_fit in [false, true] {
            consider(place(&order, best_fit, max_bytes), &mut best);
        }
    }
    let n = lifetimes.len().max(1);
    let tries = (40_000_000 / n.saturating_mul(n)).min(1024);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..tries {
        if best.as_ref().is_none_or(|b| b.0 <= reachable) {
            break;
        }
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Alternately: sizes scaled by a factor in [0.7, 1.3), and a uniformly
        // shuffled order (which moves long-lived tensors such as graph inputs).
        // Largest key first, then earliest first use.
        let order = sorted_by_key(lifetimes, |l| {
            let key = if i % 4 < 2 { (l.bytes as u64).saturating_mul(700 + next() % 600) } else { next() };
            (!key, l.first as u64)
        });
        consider(place(&order, i % 2 == 1, max_bytes), &mut best);
    }
    let (arena_bytes, offsets) =
        best.ok_or_else(|| Error::ResourceLimit(format!("memory plan needs {smallest_failure} bytes, above the session limit of {max_bytes} bytes").into()))?;
    Ok(MemoryPlan { offsets, arena_bytes, lower_bound_bytes, lifetimes: lifetimes.to_vec(), own_bytes: arena_bytes })
}

/// Plans two regions: the tensors `keep` selects (those that must outlive a run) at
/// the start, the others above them, so the upper region can be memory a session
/// borrows only while it runs. The kept tensors are alive at the end of every run
/// and never share memory with each other, so the split costs only the steps before
/// a graph output is produced, whose scratch tensors could have used its memory.
pub fn plan_split(lifetimes: &[Lifetime], keep: impl Fn(usize) -> bool, max_bytes: usize) -> Result<MemoryPlan> {
    let (kept, scratch): (Vec<Lifetime>, Vec<Lifetime>) = lifetimes.iter().partition(|l| keep(l.tensor));
    let own = plan(&kept, max_bytes)?;
    let upper = plan(&scratch, max_bytes.saturating_sub(own.arena_bytes))?;
    let mut offsets = own.offsets;
    offsets.extend(upper.offsets.iter().map(|&(t, o)| (t, o + own.arena_bytes)));
    Ok(MemoryPlan {
        offsets,
        arena_bytes: own.arena_bytes + upper.arena_bytes,
        lower_bound_bytes: lower_bound(lifetimes),
        lifetimes: lifetimes.to_vec(),
        own_bytes: own.arena_bytes,
    })
}

/// The largest total of raw bytes alive at one step.
fn lower_bound(lifetimes: &[Lifetime]) -> usize {
    let steps = lifetimes.iter().map(|l| l.last + 1).max().unwrap_or(0);
    let mut live = vec![0usize; steps];
    for l in lifetimes {
        for at in &mut live[l.first..=l.last] {
            *at = at.saturating_add(l.bytes);
        }
    }
    live.into_iter().max().unwrap_or(0)
}

/// Mutable output views of one step, in op output order.
pub type OutViews<'a> = SmallVec<[&'a mut [u8]; 4]>;
/// Shared arena pieces around the outputs, each with its start offset (inline for
/// four outputs over the two regions of a [`RunArena`]).
pub type Gaps<'a> = SmallVec<[(usize, &'a [u8]); 6]>;

/// A run's view of a session's arena: the region the session owns (offsets below
/// `own.len()`: the tensors that outlive a run) and the scratch it borrowed for this
/// run (offsets from `own.len()` on). A session with an arena of its own passes all
/// of it as `own`. Offsets are the plan's, whichever region they fall in.
pub struct RunArena<'a> {
    /// The session's own memory.
    pub own: &'a mut [u8],
    /// Memory lent for the run (empty without a shared arena).
    pub scratch: &'a mut [u8],
}

/// A [`RunArena`], read-only.
#[derive(Clone, Copy, Default)]
pub struct ArenaRef<'a> {
    /// The session's own memory.
    pub own: &'a [u8],
    /// Memory lent for the run.
    pub scratch: &'a [u8],
}

impl<'a> ArenaRef<'a> {
    /// `[off, off + len)`, when it lies wholly in one region.
    pub fn get(&self, off: usize, len: usize) -> Option<&'a [u8]> {
        let (base, end) = (self.own.len(), off.checked_add(len)?);
        if end <= base {
            self.own.get(off..end)
        } else if off >= base {
            self.scratch.get(off - base..end - base)
        } else {
            None
        }
    }
}

impl<'a> RunArena<'a> {
    /// An arena that is all the session's own.
    pub fn whole(own: &'a mut [u8]) -> Self {
        RunArena { own, scratch: &mut [] }
    }

    /// A shorter-lived view of the same memory.
    pub fn reborrow(&mut self) -> RunArena<'_> {
        RunArena { own: &mut *self.own, scratch: &mut *self.scratch }
    }

    /// Read-only.
    pub fn as_ref(&self) -> ArenaRef<'_> {
        ArenaRef { own: self.own, scratch: self.scratch }
    }

    /// [`split_regions`] over both regions: each output lies wholly in one of them.
    pub fn split_regions(self, outs: &[(usize, usize)]) -> Result<(OutViews<'a>, Gaps<'a>)> {
        let base = self.own.len();
        let mut in_own: SmallVec<[(usize, usize); 4]> = SmallVec::new();
        let mut in_scratch: SmallVec<[(usize, usize); 4]> = SmallVec::new();
        for &(off, len) in outs {
            match off.checked_add(len) {
                Some(end) if end <= base => in_own.push((off, len)),
                Some(_) if off >= base => in_scratch.push((off - base, len)),
                _ => return Err(Error::Runtime(format!("internal: output region {off}+{len} crosses the end of the session's own arena").into())),
            }
        }
        let (own_views, mut gaps) = split_regions(self.own, &in_own)?;
        let (scratch_views, scratch_gaps) = split_regions(self.scratch, &in_scratch)?;
        gaps.extend(scratch_gaps.into_iter().map(|(start, g)| (start + base, g)));
        let (mut own_views, mut scratch_views) = (own_views.into_iter(), scratch_views.into_iter());
        let mut views = OutViews::new();
        for &(off, _) in outs {
            let v = if off < base { own_views.next() } else { scratch_views.next() };
            views.push(v.ok_or_else(|| Error::Runtime("internal: output view missing".into()))?);
        }
        Ok((views, gaps))
    }
}

/// Splits the arena into mutable output regions and the shared gaps between
/// them, so a kernel can read its inputs while writing its outputs without any
/// `unsafe`. Outputs must not overlap each other. No heap allocation for up to
/// four outputs.
pub fn split_regions<'a>(arena: &'a mut [u8], outs: &[(usize, usize)]) -> Result<(OutViews<'a>, Gaps<'a>)> {
    let mut order: SmallVec<[(u64, u64, usize); 4]> = outs.iter().enumerate().map(|(i, &(off, _))| (off as u64, 0, i)).collect();
    sort_keys(&mut order);
    let mut rest = arena;
    let mut cursor = 0usize;
    let mut gaps = Gaps::new();
    // Each output's view goes to its own index: no second sort back into order.
    let mut by_index: SmallVec<[Option<&'a mut [u8]>; 4]> = outs.iter().map(|_| None).collect();
    for (_, _, i) in order {
        let (off, len) = outs[i];
        if off < cursor || off + len > cursor + rest.len() {
            return Err(Error::Runtime(format!("internal: output region {off}+{len} overlaps another or leaves the arena").into()));
        }
        let (gap, tail) = std::mem::take(&mut rest).split_at_mut(off - cursor);
        gaps.push((cursor, &*gap));
        let (o, tail) = tail.split_at_mut(len);
        by_index[i] = Some(o);
        rest = tail;
        cursor = off + len;
    }
    gaps.push((cursor, &*rest));
    Ok((by_index.into_iter().flatten().collect(), gaps))
}

/// Finds `[off, off+len)` inside one of the shared gaps.
pub fn find_in_gaps<'a>(gaps: &[(usize, &'a [u8])], off: usize, len: usize) -> Result<&'a [u8]> {
    for &(start, g) in gaps {
        if off >= start && off + len <= start + g.len() {
            return Ok(&g[off - start..off - start + len]);
        }
    }
    Err(Error::Runtime(format!("internal: input region {off}+{len} overlaps an output of the same op").into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arenas start on a cache line, hold whole lines, and are zero.
    #[test]
    fn line_arenas_are_aligned_and_zero() {
        assert!(Line::zeroed(0).is_empty());
        for bytes in [1, 63, 64, 65, 1000, 3 << 20] {
            let a = Line::zeroed(bytes);
            assert_eq!(a.len(), bytes.div_ceil(64));
            assert_eq!(a.as_ptr() as usize % 64, 0);
            assert!(bytemuck::cast_slice::<Line, u8>(&a).iter().all(|&b| b == 0));
        }
    }

    /// The one sort orders by key and keeps the given order for equal keys, as the
    /// stable sort it replaced did (the planner's results depend on it).
    #[test]
    fn sorted_by_key_is_stable() {
        let lt = |tensor, bytes| Lifetime { tensor, bytes, first: 0, last: 0 };
        let lifetimes = [lt(0, 8), lt(1, 4), lt(2, 8), lt(3, 4), lt(4, 16)];
        let order: Vec<usize> = sorted_by_key(&lifetimes, |l| (l.bytes as u64, 0)).iter().map(|l| l.tensor).collect();
        assert_eq!(order, [1, 3, 0, 2, 4]);
        let order: Vec<usize> = ordered(&lifetimes, Strategy::Size).iter().map(|l| l.tensor).collect();
        assert_eq!(order, [4, 0, 2, 1, 3]);
    }

    #[test]
    fn disjoint_lifetimes_share_memory() {
        let l = [
            Lifetime { tensor: 0, bytes: 100, first: 0, last: 1 },
            Lifetime { tensor: 1, bytes: 100, first: 1, last: 2 },
            Lifetime { tensor: 2, bytes: 100, first: 2, last: 3 },
        ];
        let p = plan(&l, 1 << 20).unwrap();
        assert_eq!(p.arena_bytes, 256);
        assert_eq!(p.lower_bound_bytes, 200);
        let off = |t| p.offsets.iter().find(|x| x.0 == t).unwrap().1;
        assert_eq!(off(0), off(2));
        assert_ne!(off(0), off(1));
    }

    #[test]
    fn limit_is_enforced() {
        let l = [Lifetime { tensor: 0, bytes: 1000, first: 0, last: 0 }];
        assert!(matches!(plan(&l, 100), Err(Error::ResourceLimit(_))));
    }

    #[test]
    fn split_plan_keeps_the_marked_tensors_below_the_scratch() {
        // Tensor 0 (an input) lives all run, 1 is scratch, 2 (an output) from step 1.
        let l = [
            Lifetime { tensor: 0, bytes: 100, first: 0, last: 2 },
            Lifetime { tensor: 1, bytes: 300, first: 0, last: 1 },
            Lifetime { tensor: 2, bytes: 100, first: 1, last: 2 },
        ];
        let p = plan_split(&l, |t| t != 1, 1 << 20).unwrap();
        let off = |t| p.offsets.iter().find(|x| x.0 == t).unwrap().1;
        assert_eq!(p.own_bytes, 256);
        assert_eq!(off(1), p.own_bytes);
        assert!(off(0) < p.own_bytes && off(2) < p.own_bytes);
        assert_eq!(p.arena_bytes, 256 + 320);
        assert_eq!(p.lower_bound_bytes, 500);
        assert_eq!(plan(&l, 1 << 20).unwrap().own_bytes, plan(&l, 1 << 20).unwrap().arena_bytes);
        assert!(matches!(plan_split(&l, |t| t != 1, 400), Err(Error::ResourceLimit(_))));
    }

    #[test]
    fn run_arena_addresses_both_regions() {
        let (mut own, mut scratch) = (vec![0u8; 64], vec![0u8; 64]);
        own[3] = 5;
        scratch[1] = 9;
        let a = RunArena { own: &mut own, scratch: &mut scratch };
        assert_eq!(a.as_ref().get(65, 1), Some(&[9u8][..]));
        assert_eq!(a.as_ref().get(3, 1), Some(&[5u8][..]));
        assert_eq!(a.as_ref().get(60, 8), None, "a range across the two regions is no tensor's");
        let (mut outs, gaps) = a.split_regions(&[(80, 8), (8, 8)]).unwrap();
        outs[0][0] = 1;
        outs[1][0] = 2;
        assert_eq!(find_in_gaps(&gaps, 64, 2).unwrap(), &[0, 9]);
        assert_eq!(find_in_gaps(&gaps, 0, 4).unwrap()[3], 5);
        assert!(find_in_gaps(&gaps, 78, 4).is_err());
        drop((outs, gaps));
        assert_eq!((own[8], scratch[16]), (2, 1));
    }

    #[test]
    fn split_gives_disjoint_views() {
        let mut a = vec![0u8; 100];
        a[5] = 7;
        let (mut outs, gaps) = split_regions(&mut a, &[(50, 10), (10, 20)]).unwrap();
        outs[0][0] = 1;
        outs[1][0] = 2;
        assert_eq!(find_in_gaps(&gaps, 0, 10).unwrap()[5], 7);
        assert!(find_in_gaps(&gaps, 15, 10).is_err());
    }
}
