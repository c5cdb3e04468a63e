//! aarch64 NEON tile of [`super`]: 8 rows x 8 channels (two 4-lane vectors per
//! row). Reached only through `super::run_tile`, whose `Isa` token for it is made
//! only on aarch64, where NEON (Advanced SIMD) is part of the base architecture.
//!
//! Each row's inputs are read four `k` at a time as one vector, and each of its
//! lanes multiplies a packed weight row by `fmla` by element (`vfmaq_laneq_f32`),
//! so a step of four `k` costs one input load per row, eight weight loads and 64
//! fused multiply-adds into 16 accumulators (26 of the 32 vector registers).

use super::Tile;
use crate::Clamp;
use std::arch::aarch64::*;

/// Rows per tile (the pointer table's stride per tap).
const MR: usize = 8;
/// Channels per packed panel.
const NR: usize = 8;

/// # Safety
/// See `run_tile` for the tile's pointers and shape (NEON is baseline on aarch64).
#[target_feature(enable = "neon")]
pub unsafe fn tile_neon(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    // Fewer valid rows compute fewer rows (a batch-1 fully-connected layer is bound
    // by weight loads, not by multiply-adds on padding rows). With one or two rows
    // a single chain of sums per vector would wait on the FMA latency every step,
    // so those keep one partial sum per lane of the input vector instead.
    // SAFETY: the same contract as this function's, passed on unchanged.
    unsafe {
        match t.rows {
            1 => tile_r::<1, 4>(t, clamp, out, out_stride),
            2 => tile_r::<2, 4>(t, clamp, out, out_stride),
            3 | 4 => tile_r::<4, 1>(t, clamp, out, out_stride),
            _ => tile_r::<8, 1>(t, clamp, out, out_stride),
        }
    }
}

/// `R` rows, `U` partial sums per accumulator (1 or 4): step `u` of four adds into
/// sum `u % U`.
// The loops index several register arrays in step; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "neon")]
unsafe fn tile_r<const R: usize, const U: usize>(t: &Tile<'_>, clamp: Clamp, out: *mut f32, out_stride: usize) {
    let z = vdupq_n_f32(0.0);
    let mut c = [[[z; 2]; R]; U];
    // SAFETY: `t.bias` is a panel's bias, NR floats (Packed pads bias to whole panels).
    let bias = unsafe { [vld1q_f32(t.bias.as_ptr()), vld1q_f32(t.bias.as_ptr().add(4))] };
    c[0] = [bias; R];
    // SAFETY: every row pointer `t.a[tap * MR + r]` (r < R <= MR, tap < taps) is valid
    // for `t.k` reads and `t.b` holds `taps * k * NR` floats (the `run_tile`
    // contract), so each input vector `a[r] + kk` (kk + 4 <= k), each single input
    // `a[r] + kk` (kk < k) and each weight row `bp`, `kk * NR` floats into the tap's
    // `k * NR`, lie inside them.
    unsafe {
        for tap in 0..t.taps {
            let a = &t.a[tap * MR..tap * MR + R];
            let bt = t.b.as_ptr().add(tap * t.k * NR);
            let mut kk = 0;
            while kk + 4 <= t.k {
                let av: [float32x4_t; R] = std::array::from_fn(|r| vld1q_f32(a[r].add(kk)));
                let bp = bt.add(kk * NR);
                // One weight row per lane of the input vectors; the lane index must be
                // a constant, hence the macro rather than a loop.
                macro_rules! step {
                    ($u:literal, $w:expr) => {{
                        let w: *const f32 = $w;
                        let (w0, w1) = (vld1q_f32(w), vld1q_f32(w.add(4)));
                        for r in 0..R {
                            let s = &mut c[slot::<U>($u)][r];
                            s[0] = vfmaq_laneq_f32::<$u>(s[0], w0, av[r]);
                            s[1] = vfmaq_laneq_f32::<$u>(s[1], w1, av[r]);
                        }
                    }};
                }
                step!(0, bp);
                step!(1, bp.add(NR));
                step!(2, bp.add(2 * NR));
                step!(3, bp.add(3 * NR));
                kk += 4;
            }
            while kk < t.k {
                let bp = bt.add(kk * NR);
                let (w0, w1) = (vld1q_f32(bp), vld1q_f32(bp.add(4)));
                for r in 0..R {
                    let x = *a[r].add(kk);
                    c[0][r][0] = vfmaq_n_f32(c[0][r][0], w0, x);
                    c[0][r][1] = vfmaq_n_f32(c[0][r][1], w1, x);
                }
                kk += 1;
            }
        }
    }
    let mut sum = c[0];
    for u in 1..U {
        for r in 0..R {
            sum[r][0] = vaddq_f32(sum[r][0], c[u][r][0]);
            sum[r][1] = vaddq_f32(sum[r][1], c[u][r][1]);
        }
    }
    let (lo, hi) = (vdupq_n_f32(clamp.min), vdupq_n_f32(clamp.max));
    let mut buf = [0.0f32; NR];
    // SAFETY: rows r < t.rows <= R, and whole-vector stores only when all NR columns
    // are valid, else `t.cols` floats from a local buffer: the outputs
    // `out + r * out_stride + j`, j < cols, that `run_tile` lets us write.
    unsafe {
        for r in 0..t.rows.min(R) {
            let o = out.add(r * out_stride);
            let v0 = vminq_f32(vmaxq_f32(sum[r][0], lo), hi);
            let v1 = vminq_f32(vmaxq_f32(sum[r][1], lo), hi);
            if t.cols == NR {
                vst1q_f32(o, v0);
                vst1q_f32(o.add(4), v1);
            } else {
                vst1q_f32(buf.as_mut_ptr(), v0);
                vst1q_f32(buf.as_mut_ptr().add(4), v1);
                std::ptr::copy_nonoverlapping(buf.as_ptr(), o, t.cols);
            }
        }
    }
}

/// The partial sum that lane step `u` adds into, of `U`.
#[inline(always)]
fn slot<const U: usize>(u: usize) -> usize {
    u % U
}
