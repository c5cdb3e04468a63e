//! AVX-512 kernel of [`super::conv2d_few_outputs`] for maps of 8 channels (the
//! segmentation heads at the end of an 8-channel decoder, on the largest maps).
//!
//! Two neighbouring pixels of 8 channels are one 16-float load, so with horizontal
//! stride 1 every tap of a pair of output pixels is one load and one multiply-add
//! against that tap's weights repeated in both halves: the lanes run over
//! (pixel, channel) and none is padding. Sixteen output pixels (eight pairs) then
//! sum their channels in one shuffle tree, where the depthwise-then-channel-sum
//! path stored every product and added them back one float at a time.

use super::Window;
use crate::Clamp;
use std::arch::x86_64::*;

/// Input channels of the kernel (two pixels per 16-lane vector).
const C: usize = 8;
/// Most filter taps the kernel takes (7x7 or 5x5 and smaller): their repeated
/// weights sit on the stack.
const MAX_TAPS: usize = 49;

/// Whether [`few8_rows`] serves this geometry: 8 input channels, one or two
/// output channels, horizontal stride 1, at most [`MAX_TAPS`] taps, and every input
/// offset within `isize` ([`Window::indices_fit`]).
pub(super) fn few8_fits(g: &Window, in_c: usize, out_c: usize) -> bool {
    in_c == C && (out_c == 1 || out_c == 2) && g.stride_w == 1 && g.k_h * g.k_w <= MAX_TAPS && g.k_h * g.k_w > 0 && g.indices_fit(C)
}

/// The output rows `rows` (row = batch * out_h + oy) of a convolution from 8
/// channels to `out_c` (1 or 2) channels, weights as stored (`[out_c, k_h, k_w, 8]`),
/// into `out`, which holds exactly those rows. Every pixel is summed the same way
/// whatever `rows` is (blocks of 16 start at fixed columns of each row).
///
/// # Safety
/// The CPU must have AVX-512F, and [`few8_fits`] must hold; `input` holds the
/// whole `[batch, in_h, in_w, 8]` map, `w` `out_c * k_h * k_w * 8` floats, `bias`
/// (if any) `out_c`, and `out` `rows.len() * out_w * out_c`; `rows.end <= batch * out_h`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn few8_rows(
    input: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out_c: usize,
    g: &Window,
    clamp: Clamp,
    out: &mut [f32],
    rows: std::ops::Range<usize>,
) {
    let taps = g.k_h * g.k_w;
    // Each tap's 8 weights twice over, per output channel: [oc][tap][16].
    let mut wd = [[0.0f32; 2 * C]; 2 * MAX_TAPS];
    for oc in 0..out_c {
        for t in 0..taps {
            let src = &w[(oc * taps + t) * C..][..C];
            wd[oc * taps + t][..C].copy_from_slice(src);
            wd[oc * taps + t][C..].copy_from_slice(src);
        }
    }
    let b = [bias.map_or(0.0, |b| b[0]), bias.map_or(0.0, |b| if out_c > 1 { b[1] } else { 0.0 })];
    let row = Row { input: input.as_ptr(), g: *g, wd: &wd, taps, bias: b, clamp };
    for r in rows.clone() {
        let o = out[(r - rows.start) * g.out_w * out_c..].as_mut_ptr();
        let (bi, oy) = (r / g.out_h, r % g.out_h);
        let mut ox0 = 0;
        while ox0 < g.out_w {
            let np = 16.min(g.out_w - ox0);
            // Inside: all 16 pixels' windows lie within the row horizontally.
            let inside = np == 16 && ox0 >= g.pad_left && ox0 + 15 + (g.k_w - 1) * g.dil_w < g.pad_left + g.in_w;
            // SAFETY: the caller's contract (geometry, buffer sizes, AVX-512F); the
            // block writes pixels ox0..ox0 + np of this row, inside `out`.
            unsafe {
                match (out_c, inside) {
                    (1, true) => row.block::<1, false>(bi, oy, ox0, np, o),
                    (1, false) => row.block::<1, true>(bi, oy, ox0, np, o),
                    (_, true) => row.block::<2, false>(bi, oy, ox0, np, o),
                    (_, false) => row.block::<2, true>(bi, oy, ox0, np, o),
                }
            }
            ox0 += 16;
        }
    }
}

/// What every block of [`few8_rows`] reads.
struct Row<'a> {
    input: *const f32,
    g: Window,
    /// Repeated weights, `[oc][tap][16]`.
    wd: &'a [[f32; 2 * C]; 2 * MAX_TAPS],
    taps: usize,
    bias: [f32; 2],
    clamp: Clamp,
}

impl Row<'_> {
    /// Output pixels `ox0..ox0 + np` (np <= 16) of row `oy` of batch item `bi`,
    /// `OC` channels each, stored from `o + ox0 * OC`. `MASKED`: some pixel of the
    /// block reads past a side of the input row, so each pair's load is masked to
    /// its pixels inside the row (the rest read as zeros).
    ///
    /// # Safety
    /// As [`few8_rows`]; `o` is the output row, `out_w * OC` floats.
    // The loops index several register arrays in step; iterators would obscure that.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn block<const OC: usize, const MASKED: bool>(&self, bi: usize, oy: usize, ox0: usize, np: usize, o: *mut f32) {
        let g = &self.g;
        let z = _mm512_setzero_ps();
        let mut acc = [[z; 8]; OC];
        for ky in 0..g.k_h {
            let Some(iy) = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_top).filter(|&y| y < g.in_h) else { continue };
            // The input row's first pixel; columns are offsets from it, possibly
            // negative or past the row (then only formed, never read: masked).
            let line = self.input.wrapping_add((bi * g.in_h + iy) * g.in_w * C);
            for kx in 0..g.k_w {
                let t = ky * g.k_w + kx;
                // SAFETY: tap t < taps of channel oc < OC: inside `wd`.
                let wv: [__m512; OC] = std::array::from_fn(|oc| unsafe { _mm512_loadu_ps(self.wd[oc * self.taps + t].as_ptr()) });
                let col = (ox0 + kx * g.dil_w) as isize - g.pad_left as isize;
                for i in 0..8 {
                    let ix = col + 2 * i as isize;
                    let p = line.wrapping_offset(ix * C as isize);
                    let v = if MASKED {
                        let inside = |x: isize| x >= 0 && x < g.in_w as isize;
                        let m = (if inside(ix) { 0x00ff } else { 0 }) | (if inside(ix + 1) { 0xff00 } else { 0 });
                        // SAFETY: only the lanes of pixels inside the input row are
                        // read (the mask); the others are not accessed.
                        unsafe { _mm512_maskz_loadu_ps(m, p) }
                    } else {
                        // SAFETY: an inside block's pixels ix and ix + 1 lie in the
                        // input row (checked by the caller), 16 floats from `p`.
                        unsafe { _mm512_loadu_ps(p) }
                    };
                    for oc in 0..OC {
                        acc[oc][i] = _mm512_fmadd_ps(v, wv[oc], acc[oc][i]);
                    }
                }
            }
        }
        let (lo, hi) = (_mm512_set1_ps(self.clamp.min), _mm512_set1_ps(self.clamp.max));
        let sums: [__m512; OC] =
            std::array::from_fn(|oc| _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(channel_sums(&acc[oc]), _mm512_set1_ps(self.bias[oc])), lo), hi));
        // SAFETY: pixels ox0..ox0 + np of the output row (the caller's contract),
        // OC floats each: the masks cover exactly those.
        unsafe {
            if OC == 1 {
                _mm512_mask_storeu_ps(o.add(ox0), lanes(np), sums[0]);
            } else {
                // Interleave the two channels: pixel p's pair at 2p.
                let idx_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
                let idx_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
                let (s0, s1) = (sums[0], sums[OC - 1]);
                _mm512_mask_storeu_ps(o.add(2 * ox0), lanes(2 * np.min(8)), _mm512_permutex2var_ps(s0, idx_lo, s1));
                if np > 8 {
                    _mm512_mask_storeu_ps(o.add(2 * ox0 + 16), lanes(2 * (np - 8)), _mm512_permutex2var_ps(s0, idx_hi, s1));
                }
            }
        }
    }
}

/// The first `n` (<= 16) lanes.
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as u16
    }
}

/// The channel sums of 16 pixels from 8 pair accumulators (`a[i]` holds pixel 2i
/// in lanes 0-7 and 2i + 1 in lanes 8-15): lane p of the result is pixel p's sum
/// of its 8 lanes, by halving steps (4 + 4, then 2 + 2, then 1 + 1) and one final
/// reorder, the same order for every pixel.
#[target_feature(enable = "avx512f")]
#[inline]
fn channel_sums(a: &[__m512; 8]) -> __m512 {
    // Per pair of accumulators, 128-bit quarter q of s[j] = pixel 4j + q, its
    // channels 0-3 plus 4-7.
    let s: [__m512; 4] = std::array::from_fn(|j| {
        let (x, y) = (a[2 * j], a[2 * j + 1]);
        _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(x, y), _mm512_shuffle_f32x4::<0xdd>(x, y))
    });
    // Per quarter q: [s0 q: 0+2, 1+3, s1 q: 0+2, 1+3], and the same for s2, s3.
    let h01 = _mm512_add_ps(_mm512_shuffle_ps::<0x44>(s[0], s[1]), _mm512_shuffle_ps::<0xee>(s[0], s[1]));
    let h23 = _mm512_add_ps(_mm512_shuffle_ps::<0x44>(s[2], s[3]), _mm512_shuffle_ps::<0xee>(s[2], s[3]));
    // Element 4q + m is pixel 4m + q's sum.
    let r = _mm512_add_ps(_mm512_shuffle_ps::<0x88>(h01, h23), _mm512_shuffle_ps::<0xdd>(h01, h23));
    _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r)
}
