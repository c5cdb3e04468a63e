//! Splitting a gradient's output over a thread pool: contiguous chunks of whole
//! rows, chunk starts on multiples of a granule (a GEMM tile's height), so each
//! output element is computed by the same code in the same order for any thread
//! count. No allocation: each task rebuilds its chunk from a raw pointer.

use crate::parallel::{chunk, ThreadPool};

/// A task: (part index, row range, the rows' output).
pub(crate) type RowTask<'a> = dyn Fn(usize, std::ops::Range<usize>, &mut [f32]) + Sync + 'a;

/// A buffer's base pointer, shared by parallel tasks that each touch a disjoint
/// range of it.
pub(crate) struct Base(*mut f32);
// SAFETY: tasks derive only disjoint slices from the pointer (`Base::range`'s
// contract), and the borrow it came from outlives the parallel region.
unsafe impl Sync for Base {}

impl Base {
    /// Shares `buf` with the tasks of one parallel region.
    pub(crate) fn new(buf: &mut [f32]) -> Base {
        Base(buf.as_mut_ptr())
    }

    /// `len` floats from `start`.
    ///
    /// # Safety
    /// The range lies within the buffer `self` was made from, that buffer is still
    /// borrowed, and no other live slice overlaps the range.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn range(&self, start: usize, len: usize) -> &mut [f32] {
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Parts `for_rows` splits `rows` into for `pool` (1 without a pool).
pub(crate) fn parts(pool: Option<&ThreadPool>, rows: usize, granule: usize) -> usize {
    pool.map_or(1, |p| p.threads()).min(rows.div_ceil(granule.max(1))).max(1)
}

/// Calls `f(i, rows_i, out_i)` for part `i` of [`parts`] on the pool: `rows_i` is
/// a contiguous range of `0..rows` starting on a multiple of `granule`, `out_i` its
/// `row_len`-float rows of `out`. Rows past what `out` holds are not visited.
pub(crate) fn for_rows(pool: Option<&ThreadPool>, out: &mut [f32], rows: usize, row_len: usize, granule: usize, f: &RowTask<'_>) {
    let granule = granule.max(1);
    let rows = out.len().checked_div(row_len).map_or(rows, |fit| rows.min(fit));
    let units = rows.div_ceil(granule);
    let n = parts(pool, rows, granule);
    let range = |i: usize| {
        let u = chunk(units, n, i);
        (u.start * granule).min(rows)..(u.end * granule).min(rows)
    };
    match pool {
        Some(p) if n > 1 => {
            let base = Base::new(out);
            p.run(n, &|i| {
                let r = range(i);
                // SAFETY: the ranges of different parts are disjoint and lie within
                // `rows * row_len <= out.len()` floats, and `out` is borrowed
                // mutably for the whole region.
                let o = unsafe { base.range(r.start * row_len, r.len() * row_len) };
                f(i, r, o);
            });
        }
        _ => f(0, 0..rows, &mut out[..rows * row_len]),
    }
}
