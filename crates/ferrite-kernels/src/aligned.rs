//! Float buffers that start on a cache line.
//!
//! The kernels load 64-byte vectors. A `Vec<f32>` starts wherever the allocator
//! puts it (16 bytes into a line for large blocks), and then every such load of a
//! buffer walked from its start spans two lines, which costs the load ports about
//! half their rate. Prepared weights live in these instead.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// One cache line of floats, aligned as one.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Floats per line.
const PER_LINE: usize = 16;

/// A fixed-length float buffer whose first element starts on a 64-byte boundary;
/// it derefs to `[f32]` of exactly its length.
#[derive(Clone, Default)]
pub struct LineVec {
    lines: Vec<Line>,
    len: usize,
}

impl LineVec {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> LineVec {
        LineVec { lines: vec![Line::default(); len.div_ceil(PER_LINE)], len }
    }

    /// A copy of `v`.
    pub fn from_slice(v: &[f32]) -> LineVec {
        let mut out = LineVec::zeroed(v.len());
        out.copy_from_slice(v);
        out
    }
}

impl Deref for LineVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` around 16 floats with size 64 = its alignment
        // (no padding), so the lines are `lines.len() * 16` contiguous initialized
        // floats, of which the first `len <= lines.len() * 16` are viewed.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl DerefMut for LineVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as for `deref`, through the unique borrow of the lines.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

impl fmt::Debug for LineVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_vecs_start_on_a_line_and_keep_their_length() {
        for len in [0, 1, 15, 16, 17, 1000, 100_000] {
            let v: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let l = LineVec::from_slice(&v);
            assert_eq!(&l[..], &v[..]);
            assert_eq!(l.as_ptr() as usize % 64, 0, "{len}");
            let mut z = LineVec::zeroed(len);
            assert!(z.iter().all(|&x| x == 0.0));
            z.iter_mut().for_each(|x| *x = 1.0);
            assert_eq!(z.iter().sum::<f32>(), len as f32);
        }
    }
}
