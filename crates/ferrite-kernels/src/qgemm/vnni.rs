//! AVX-512 VNNI convolution without gathered rows, and the AVX-512 form of the
//! 8-bit ADD / SUB.
//!
//! [`conv`] copies the input once into a padded buffer (shifted to unsigned,
//! the padding holding the zero point) and lets the register tiles read each
//! output pixel's receptive field straight from it: the receptive field is a
//! few *segments* of contiguous taps, a whole filter row (dilation 1 along the
//! row) or one tap's channels (dilated rows), each at a fixed offset from the
//! pixel's corner in the padded image, in the packed weights' own `k` order. That replaces the per-block gather (a copy `k_h * k_w` times the input)
//! by one copy of the input, and the tiles requantize their accumulators in
//! registers, so the int32 products never go through memory either.

use super::{QPacked, RowRequant, MERGED_BLOCK, NR};
use crate::conv::Window;
use crate::quant::Rounding;
use std::arch::x86_64::*;

/// Whether this CPU (and, under test, the vector level allowed) runs [`conv`].
pub(super) fn available() -> bool {
    crate::level::has_avx512f()
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// The geometry [`conv`] runs: a pointwise convolution over every pixel as one
/// row of pixels (an FC layer's batch rows, a 1x1 layer's whole map), so its
/// tiles are full.
fn flattened(g: &Window) -> Window {
    let pointwise =
        g.k_h == 1 && g.k_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 && g.pad_left == 0 && g.in_h == g.out_h && g.in_w == g.out_w;
    if !pointwise {
        return *g;
    }
    let px = g.batch * g.out_h * g.out_w;
    Window { batch: 1, in_h: 1, in_w: px, out_h: 1, out_w: px, ..*g }
}

/// How [`conv`] cuts a filter into segments of contiguous taps in the padded
/// input: `(segments per filter row, taps per segment)`. A filter row is one
/// segment where its taps are adjacent (dilation 1 along the row, or one
/// column); a dilated row is `k_w` segments of one pixel's `in_c` channels,
/// `dil_w` pixels apart.
fn row_segments(g: &Window, in_c: usize) -> (usize, usize) {
    if g.k_w == 1 || g.dil_w == 1 {
        (1, g.k_w * in_c)
    } else {
        (g.k_w, in_c)
    }
}

/// The packed `k` [`conv`] needs for `g`: each segment's taps in whole groups
/// of four (zero weights after them), unless the filter is one segment.
fn segmented_k(g: &Window, in_c: usize) -> Option<usize> {
    let (per_row, seg_k) = row_segments(g, in_c);
    let segments = g.k_h.checked_mul(per_row)?;
    if segments == 1 {
        Some(seg_k)
    } else {
        segments.checked_mul(seg_k.checked_next_multiple_of(4)?)
    }
}

/// The padded input's rows and columns for `g`, if [`conv`] runs this geometry
/// with weights of `kq` (whole groups of four `k` per segment, see
/// [`segmented_k`]) and the buffer stays within a few times the input.
fn padded_dims(g: &Window, in_c: usize, kq: usize) -> Option<(usize, usize)> {
    if segmented_k(g, in_c)?.checked_next_multiple_of(4)? != kq {
        return None;
    }
    if g.out_h == 0 || g.out_w == 0 || g.batch == 0 || in_c == 0 {
        return None;
    }
    let extent = |out: usize, stride: usize, k: usize, dil: usize| (out - 1).checked_mul(stride)?.checked_add((k.max(1) - 1).checked_mul(dil)?)?.checked_add(1);
    let hp = extent(g.out_h, g.stride_h, g.k_h, g.dil_h)?.max(g.in_h.checked_add(g.pad_top)?);
    let wp = extent(g.out_w, g.stride_w, g.k_w, g.dil_w)?.max(g.in_w.checked_add(g.pad_left)?);
    let bytes = crate::product(&[g.batch, hp, wp, in_c])?;
    let input = crate::product(&[g.batch, g.in_h, g.in_w, in_c])?;
    (bytes <= input.saturating_mul(4).max(1 << 20)).then_some((hp, wp))
}

/// `(segments, taps per segment)` where [`conv`] needs the weights laid out
/// by [`pad_rows`] first: a filter of several segments whose segments are not
/// whole groups of four `k` (a first layer's 3 channels, or a dilated row's
/// taps of a few channels each).
pub(super) fn row_groups(g: &Window, in_c: usize) -> Option<(usize, usize)> {
    let (per_row, seg_k) = row_segments(g, in_c);
    let segments = g.k_h * per_row;
    (segments > 1 && !seg_k.is_multiple_of(4)).then_some((segments, seg_k))
}

/// `pk`'s weights with each of its `segments` runs of `seg_k` taps padded
/// with zeros to whole groups of four, kept in `seg` (made once; remade if it
/// holds another layer's).
pub(super) fn pad_rows<'a>(seg: &'a mut Option<QPacked>, pk: &QPacked, segments: usize, seg_k: usize) -> &'a QPacked {
    let seg_kq = seg_k.next_multiple_of(4);
    if seg.as_ref().is_some_and(|s| s.n == pk.n && s.k == segments * seg_kq) {
        return seg.as_ref().expect("checked just above");
    }
    let (groups, n) = (pk.kq / 4, pk.n);
    let mut w = vec![0i8; n * segments * seg_kq];
    for j in 0..n {
        for s in 0..segments {
            for t in 0..seg_k {
                let kk = s * seg_k + t;
                w[j * segments * seg_kq + s * seg_kq + t] = pk.w[((j / NR) * groups + kk / 4) * NR * 4 + (j % NR) * 4 + kk % 4];
            }
        }
    }
    seg.insert(QPacked::new(&w, n, segments * seg_kq))
}

/// Bytes past the padded image the tiles may read: a segment's last group
/// reaches up to 3 bytes past its taps.
const SLACK: usize = 64;

/// The padded copy of a convolution's input and the per-pixel sums a weight
/// offset needs (grown on first use, kept between runs).
#[derive(Debug, Clone, Default)]
pub(super) struct Padded {
    /// The input, padded and shifted to unsigned.
    pub(super) bytes: Vec<u8>,
    /// The padded pixels' byte sums, then the output pixels' weight-offset terms.
    pub(super) sums: Vec<i32>,
}

/// `w_off` times each output pixel's sum of its receptive field's bytes in the
/// padded image (`w_off * sum a` of `super::conv_8bit`; the padding's bytes
/// hold the zero point, as its formula wants), one per output pixel. Each
/// padded pixel's channels are summed once, then each output pixel adds its
/// taps' pixels: `k_h * k_w` adds instead of `k_h * k_w * in_c`.
fn pixel_terms<'a>(pad: &[u8], g: &Window, (hp, wp): (usize, usize), in_c: usize, w_off: i32, sums: &'a mut Vec<i32>) -> &'a [i32] {
    let (image, pixels) = (hp * wp, g.batch * g.out_h * g.out_w);
    if sums.len() < g.batch * image + pixels {
        sums.resize(g.batch * image + pixels, 0);
    }
    let (px_sums, terms) = sums.split_at_mut(g.batch * image);
    for (s, px) in px_sums.iter_mut().zip(pad.chunks_exact(in_c)) {
        *s = px.iter().map(|&b| i32::from(b)).sum();
    }
    let mut o = 0;
    for nb in 0..g.batch {
        for oy in 0..g.out_h {
            for ox in 0..g.out_w {
                let corner = nb * image + oy * g.stride_h * wp + ox * g.stride_w;
                let mut sum = 0i32;
                for ky in 0..g.k_h {
                    let row = corner + ky * g.dil_h * wp;
                    sum += (0..g.k_w).map(|kx| px_sums[row + kx * g.dil_w]).sum::<i32>();
                }
                terms[o] = sum.wrapping_mul(w_off);
                o += 1;
            }
        }
    }
    &terms[..pixels]
}

/// 8-bit convolution (`super::conv_8bit`: unsigned input bytes `a`, packed
/// weights `w`, true weights `w + w_off`) through the VNNI tiles, reading the
/// receptive fields from a padded copy of the input in `pad` (grown to fit); a
/// weight offset adds `w_off * sum a` per output pixel before requantizing.
/// Returns false, having done nothing, where the geometry does not suit it
/// (see [`padded_dims`]) or the CPU lacks the instructions. `flip` turns the
/// input bytes unsigned, `fill` is the padding byte (the unsigned zero point),
/// and the outputs are written xor `flip ^ 0x80`.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv(
    input: &[u8],
    flip: u8,
    fill: u8,
    w_off: i32,
    pk: &QPacked,
    g: &Window,
    in_c: usize,
    rq: &RowRequant,
    out: &mut [i8],
    pad: &mut Padded,
) -> bool {
    // The weights in the segments' layout: padded per segment (`pad_rows`)
    // unless the filter is one segment or its segments are whole groups already.
    if !available() || rq.offset.len() != pk.n || pk.n == 0 || segmented_k(g, in_c) != Some(pk.k) {
        return false;
    }
    let g = &flattened(g);
    let Some((hp, wp)) = padded_dims(g, in_c, pk.kq) else {
        return false;
    };
    let n = pk.n;
    let pixels = g.batch * g.out_h * g.out_w;
    assert!(crate::holds(input.len(), &[g.batch, g.in_h, g.in_w, in_c]) && crate::holds(out.len(), &[pixels, n]), "conv: buffers shorter than the geometry");
    let line = wp * in_c;
    let image = hp * line;
    let len = g.batch * image + SLACK;
    let Padded { bytes: pad, sums } = pad;
    if pad.len() < len {
        pad.resize(len, 0);
    }
    for nb in 0..g.batch {
        for py in 0..hp {
            let at = nb * image + py * line;
            match py.checked_sub(g.pad_top).filter(|&iy| iy < g.in_h) {
                Some(iy) => {
                    pad[at..at + g.pad_left * in_c].fill(fill);
                    super::flip_copy(pad, at + g.pad_left * in_c, input, ((nb * g.in_h + iy) * g.in_w) * in_c, g.in_w * in_c, flip);
                    pad[at + (g.pad_left + g.in_w) * in_c..at + line].fill(fill);
                }
                None => pad[at..at + line].fill(fill),
            }
        }
    }
    // The slack is read only against zero weights; any fixed value serves.
    pad[g.batch * image..len].fill(fill);
    let terms = if w_off != 0 { pixel_terms(&pad[..g.batch * image], g, (hp, wp), in_c, w_off, sums) } else { &[][..] };
    let (per_row, _) = row_segments(g, in_c);
    let t = Tile {
        px: g.stride_w * in_c,
        row: g.dil_h * line,
        k_h: g.k_h,
        tap: g.dil_w * in_c,
        per_row,
        seg_groups: pk.kq / 4 / (g.k_h * per_row),
        panel: pk.kq * NR,
        ldo: n,
        flip: flip ^ 0x80,
        single: rq.rounding == Rounding::Single,
        merged: rq.rounding == Rounding::Double && rq.merged.len() == n.div_ceil(NR) * MERGED_BLOCK,
        shifts: rq.shifts,
        terms: !terms.is_empty(),
    };
    // The furthest byte a tile reads: the last pixel's last segment's last
    // group, inside the padded image plus its slack (checked once here, so the
    // tiles' unchecked loads stay inside `pad`).
    let last =
        (g.batch - 1) * image + (g.out_h - 1) * g.stride_h * line + (g.out_w - 1) * t.px + (g.k_h - 1) * t.row + (per_row - 1) * t.tap + t.seg_groups * 4;
    assert!(last <= len && pk.w.len() >= n.div_ceil(NR) * t.panel, "conv: padded input too short");
    let panels = n.div_ceil(NR);
    // Panels per tile and pixels per tile: 12 to 16 accumulators, so that two
    // products issued per cycle cover their latency, with the broadcast pixels
    // shared by up to 4 panels.
    // A row of one pixel (a fully-connected layer at batch 1) has one
    // accumulator per panel: up to 8 panels per tile, so that 8 independent
    // chains, not 4, cover the products' latency.
    let chunk = panels.min(if g.out_w == 1 { 8 } else { 4 });
    let rows = match chunk {
        1 => 12,
        2 => 8,
        _ => 4,
    };
    // An output row in tiles of nearly equal width (32 pixels as 11 + 11 + 10,
    // not 12 + 12 + 8), so no tile is left with few accumulators.
    let tiles = g.out_w.div_ceil(rows);
    for nb in 0..g.batch {
        for oy in 0..g.out_h {
            let a_row = nb * image + oy * g.stride_h * line;
            let px_row = (nb * g.out_h + oy) * g.out_w;
            let o_row = px_row * n;
            let mut ox = 0;
            for tile in 0..tiles {
                let r = (g.out_w - ox).div_ceil(tiles - tile);
                let mut p = 0;
                while p < panels {
                    let pc = chunk.min(panels - p);
                    // SAFETY: AVX-512F/BW/VL and VNNI are present (`available`);
                    // pixels ox..ox + r of this output row read inside `pad` (the
                    // furthest read checked above) and write their `n` outputs
                    // inside `out` (checked above); panels p..p + pc < panels lie
                    // inside `pk.w`, `rq` holds n channels, and `terms` (when
                    // used) one per output pixel.
                    unsafe {
                        let a = pad.as_ptr().add(a_row + ox * t.px);
                        let o = out.as_mut_ptr().add(o_row + ox * n);
                        let add = if t.terms { terms.as_ptr().add(px_row + ox) } else { std::ptr::null() };
                        if pc > 4 {
                            dispatch_one(&t, pc, a, pk.w.as_ptr().add(p * t.panel), rq, p, add, o);
                        } else {
                            dispatch(&t, r, pc, a, pk.w.as_ptr().add(p * t.panel), rq, p, add, o);
                        }
                    }
                    p += pc;
                }
                ox += r;
            }
        }
    }
    true
}

/// Strides and epilogue of the tiles of one convolution.
struct Tile {
    /// Bytes between consecutive output pixels' receptive fields.
    px: usize,
    /// Bytes between consecutive filter rows.
    row: usize,
    /// Filter rows.
    k_h: usize,
    /// Bytes between consecutive segments of a filter row.
    tap: usize,
    /// Segments per filter row.
    per_row: usize,
    /// Groups of four `k` per segment.
    seg_groups: usize,
    /// Bytes per packed panel of [`NR`] channels.
    panel: usize,
    /// Outputs per pixel (the output row stride).
    ldo: usize,
    /// xor applied to the int8 outputs (0x80 turns them to uint8).
    flip: u8,
    /// One rounding of the exact product ([`Rounding::Single`]), else two.
    single: bool,
    /// The two roundings through [`Merged16`] (`rq` holds its terms).
    merged: bool,
    /// Whether any channel shifts left before the product.
    shifts: bool,
    /// Whether each pixel adds a weight-offset term before requantizing.
    terms: bool,
}

/// [`tile`] for `r` rows (at most the chunk's tile height) of `pc` panels.
///
/// # Safety
/// As [`tile`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dispatch(t: &Tile, r: usize, pc: usize, a: *const u8, w: *const i8, rq: &RowRequant, p0: usize, add: *const i32, out: *mut i8) {
    macro_rules! go {
        ($($r:literal),*; $p:literal) => {
            match r {
                $($r => tile::<$r, $p>(t, a, w, rq, p0, add, out),)*
                _ => unreachable!("tile rows"),
            }
        };
    }
    // SAFETY: the caller's contract, for the rows and panels named.
    unsafe {
        match pc {
            1 => go!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12; 1),
            2 => go!(1, 2, 3, 4, 5, 6, 7, 8; 2),
            3 => go!(1, 2, 3, 4; 3),
            _ => go!(1, 2, 3, 4; 4),
        }
    }
}

/// [`tile`] for one pixel of 5 to 8 panels (a row of one pixel; apart from
/// [`dispatch`] so that its tiles stay inlined there as they were).
///
/// # Safety
/// As [`tile`], with `R` = 1 and `P` = `pc`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dispatch_one(t: &Tile, pc: usize, a: *const u8, w: *const i8, rq: &RowRequant, p0: usize, add: *const i32, out: *mut i8) {
    // SAFETY: the caller's contract, for the panels named.
    unsafe {
        match pc {
            5 => tile::<1, 5>(t, a, w, rq, p0, add, out),
            6 => tile::<1, 6>(t, a, w, rq, p0, add, out),
            7 => tile::<1, 7>(t, a, w, rq, p0, add, out),
            _ => tile::<1, 8>(t, a, w, rq, p0, add, out),
        }
    }
}

/// `R` output pixels by `P` panels of 16 channels: per segment and group of
/// four `k`, `P` weight loads, `R` broadcasts of the pixels' four bytes and
/// `R * P` `vpdpbusd`; then each accumulator requantized and stored as bytes.
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL and VNNI; pixel `r < R`'s segment `sx`
/// of filter row `ky` reads `seg_groups * 4` bytes from `a + r * px + ky * row
/// + sx * tap`, panel `p < P` reads `k_h * per_row * seg_groups * 64` weights
/// from `w + p * panel`, and
/// pixel `r` writes channels `16 * p0..` (at most `ldo`) at `out + r * ldo`;
/// `rq` holds `ldo` channels; with `t.terms`, `add` holds `R` values.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const R: usize, const P: usize>(t: &Tile, a: *const u8, w: *const i8, rq: &RowRequant, p0: usize, add: *const i32, out: *mut i8) {
    // The lanes of panel p's channels (at most ldo).
    let lanes = |p: usize| -> (usize, __mmask16) {
        let j = (p0 + p) * NR;
        let cols = NR.min(t.ldo - j);
        (j, if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 })
    };
    let mut acc = [[_mm512_setzero_si512(); P]; R];
    // Segment s is segment sx of filter row ky (one plain loop: an iterator
    // adapter here was not inlined into the tile).
    let (mut ky, mut sx) = (0, 0);
    for s in 0..t.k_h * t.per_row {
        // SAFETY: segment sx of filter row ky of each pixel and panel (contract).
        let (a, w) = unsafe { (a.add(ky * t.row + sx * t.tap), w.add(s * t.seg_groups * 64)) };
        sx += 1;
        if sx == t.per_row {
            (ky, sx) = (ky + 1, 0);
        }
        for g in 0..t.seg_groups {
            // SAFETY: group g of filter row ky of panel p (contract).
            let wv: [__m512i; P] = std::array::from_fn(|p| unsafe { _mm512_loadu_si512(w.add(p * t.panel + g * 64) as *const _) });
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: bytes 4g..4g + 4 of pixel r's filter row (contract); unaligned read.
                let av = _mm512_set1_epi32(unsafe { (a.add(r * t.px + g * 4) as *const i32).read_unaligned() });
                for (acc, &wv) in acc.iter_mut().zip(&wv) {
                    *acc = _mm512_dpbusd_epi32(*acc, av, wv);
                }
            }
        }
    }
    if t.terms {
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: pixel r's term (contract).
            let v = _mm512_set1_epi32(unsafe { *add.add(r) });
            acc.iter_mut().for_each(|a| *a = _mm512_add_epi32(*a, v));
        }
    }
    if t.merged {
        let s = Merged16::new(rq, t.shifts);
        for p in 0..P {
            let (j, k) = lanes(p);
            // SAFETY: block j / 16 of the merged terms (contract, `t.merged`).
            let b = unsafe { rq.merged.as_ptr().add(j / NR * MERGED_BLOCK) };
            // The block's vectors in registers before the stores (which, through
            // raw pointers, could alias them for all the compiler knows).
            // SAFETY: vector i of the block.
            let b: [__m512i; 9] = std::array::from_fn(|i| unsafe { _mm512_loadu_si512(b.add(8 * i) as *const _) });
            // SAFETY: the lanes of `k` from j lie inside `rq.offset` (ldo values, contract).
            let offset = unsafe { _mm512_maskz_loadu_epi32(k, rq.offset.as_ptr().add(j)) };
            if k & 0xFF00 == 0 && R > 1 {
                // A panel of at most 8 channels (a layer's last, or its only one)
                // requantizes two pixels per vector: their halves side by side
                // (its block holds the terms in both halves).
                let offset = _mm512_shuffle_i64x2::<0b01_00_01_00>(offset, offset);
                let mut r = 0;
                while r + 1 < R {
                    let v = _mm512_inserti64x4::<1>(acc[r][p], _mm512_castsi512_si256(acc[r + 1][p]));
                    // SAFETY: the block (above); pixels r and r + 1's channels
                    // j..j + cols inside their rows of ldo (contract).
                    unsafe { store_pair(out.add(r * t.ldo + j), out.add((r + 1) * t.ldo + j), k, s.apply(&b, offset, v), t.flip) };
                    r += 2;
                }
                if r < R {
                    // The odd pixel alone: its lanes' parameters are the low half's.
                    // SAFETY: as below.
                    unsafe { store16(out.add(r * t.ldo + j), k, s.apply(&b, offset, acc[r][p]), t.flip) };
                }
                continue;
            }
            for (r, acc) in acc.iter().enumerate() {
                // SAFETY: the block (above); pixel r's channels j..j + cols inside
                // its row of ldo (contract); lanes past them (a block of at most 8
                // channels holds its terms twice) are not stored.
                unsafe { store16(out.add(r * t.ldo + j), k, s.apply(&b, offset, acc[p]), t.flip) };
            }
        }
        return;
    }
    // SAFETY: the accumulators of R pixels by P panels; the rest is the caller's contract.
    unsafe { finish_scaled(t, acc.as_ptr() as *const __m512i, R, P, rq, p0, out) }
}

/// The epilogue of [`tile`] for `rows` pixels by `pc` panels where the layer
/// has no merged terms (one rounding, or two whose terms do not fit them):
/// every accumulator requantized through [`Scale16`] and stored as bytes. One
/// instance for every tile shape, out of line: inlined into each
/// `tile::<R, P>` (28 of them) it was a third of [`dispatch`]'s code. The
/// merged epilogue, which most int8 layers take, stays inlined: its
/// accumulators go from registers to the stores without a copy.
///
/// # Safety
/// As [`tile`], with `R` = `rows` and `P` = `pc`; `acc` holds `rows * pc`
/// accumulators, pixel `r`'s panel `p` at `r * pc + p`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn finish_scaled(t: &Tile, acc: *const __m512i, rows: usize, pc: usize, rq: &RowRequant, p0: usize, out: *mut i8) {
    for p in 0..pc {
        let j = (p0 + p) * NR;
        let cols = NR.min(t.ldo - j);
        let k: __mmask16 = if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 };
        // SAFETY: the `cols` channels from j of `rq`'s arrays of ldo (contract).
        let s = unsafe { Scale16::load(rq, j, k) };
        for r in 0..rows {
            // SAFETY: accumulator (r, p), r < rows and p < pc (contract).
            let a = unsafe { acc.add(r * pc + p).read() };
            let v = if t.single { s.single(a) } else { s.double(a) };
            // SAFETY: pixel r's channels j..j + cols inside its row of ldo (contract);
            // the features are this function's.
            unsafe { store16(out.add(r * t.ldo + j), k, v, t.flip) };
        }
    }
}

/// Narrows 16 int32 lanes (already clamped to 8 bits) to bytes, xors them with
/// `flip` (0x80 turns int8 into uint8) and stores the lanes of `k` at `at`: a plain
/// 16-byte store for a full mask (a masked byte store is slow on some CPUs).
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL; `at` must be valid for the lanes of `k`
/// (16 bytes with the full mask).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn store16(at: *mut i8, k: __mmask16, v: __m512i, flip: u8) {
    let b = _mm512_cvtepi32_epi8(v);
    let b = if flip != 0 { _mm_xor_si128(b, _mm_set1_epi8(flip as i8)) } else { b };
    // SAFETY: `at` holds the lanes of `k` (contract); unaligned accesses.
    unsafe {
        if k == 0xFFFF {
            _mm_storeu_si128(at as *mut _, b);
        } else {
            _mm_mask_storeu_epi8(at as *mut _, k, b);
        }
    }
}

/// [`store16`] for two pixels' halves of one vector (at most 8 channels each,
/// the lanes of `k`): the low half's bytes at `at`, the high half's at `next`.
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL; `at` and `next` must be valid for the
/// lanes of `k` (all below 8).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn store_pair(at: *mut i8, next: *mut i8, k: __mmask16, v: __m512i, flip: u8) {
    let b = _mm512_cvtepi32_epi8(v);
    let b = if flip != 0 { _mm_xor_si128(b, _mm_set1_epi8(flip as i8)) } else { b };
    // SAFETY: `at` and `next` hold the lanes of `k` (contract); unaligned accesses.
    unsafe {
        _mm_mask_storeu_epi8(at as *mut _, k, b);
        _mm_mask_storeu_epi8(next as *mut _, k, _mm_srli_si128::<8>(b));
    }
}

/// The rounded high halves `(p + 2^30) >> 31` of the doubled products, the
/// even lanes' 64-bit products in `even` and the odd lanes' in `odd`, back in
/// their 32-bit lanes: bits 31..62 of each sum, moved down into the even
/// lanes' low halves and up into the odd lanes' high halves (one shift each).
#[inline]
#[target_feature(enable = "avx512f")]
fn high_halves(even: __m512i, odd: __m512i) -> __m512i {
    let half = _mm512_set1_epi64(1 << 30);
    let even = _mm512_srli_epi64::<31>(_mm512_add_epi64(even, half));
    let odd = _mm512_slli_epi64::<1>(_mm512_add_epi64(odd, half));
    _mm512_mask_blend_epi32(0xAAAA, even, odd)
}

/// One panel's (or depthwise block's) requantization parameters in registers.
pub(super) struct Scale16 {
    offset: __m512i,
    m: __m512i,
    m_odd: __m512i,
    left: __m512i,
    /// Whether any lane shifts left.
    shifts: bool,
    right: __m512i,
    mask: __m512i,
    half_mask: __m512i,
    /// `31 + right - left`, clamped to 1..=62, per 64-bit lane (even and odd channels).
    total: (__m512i, __m512i),
    zp: __m512i,
    lo: __m512i,
    hi: __m512i,
}

impl Scale16 {
    /// # Safety
    /// The CPU must support AVX-512F; `rq`'s arrays hold the lanes of `k` from `j`.
    #[target_feature(enable = "avx512f")]
    unsafe fn load(rq: &RowRequant, j: usize, k: __mmask16) -> Scale16 {
        // SAFETY: masked to the lanes the contract names.
        Scale16::from_lanes(rq, |v| unsafe { _mm512_maskz_loadu_epi32(k, v.add(j)) })
    }

    /// The parameters of 16 lanes, each per-channel vector of `rq` read by
    /// `load` from its base pointer (a masked load of one block of channels, or
    /// a block broadcast to both halves when a vector holds two pixels).
    #[target_feature(enable = "avx512f")]
    pub(super) fn from_lanes(rq: &RowRequant, load: impl Fn(*const i32) -> __m512i) -> Scale16 {
        let (offset, m) = (load(rq.offset.as_ptr()), load(rq.multiplier.as_ptr()));
        let (left, right) = (load(rq.left.as_ptr() as *const i32), load(rq.right.as_ptr() as *const i32));
        let one = _mm512_set1_epi32(1);
        let mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, right), one);
        let total = _mm512_min_epi32(_mm512_max_epi32(_mm512_sub_epi32(_mm512_add_epi32(right, _mm512_set1_epi32(31)), left), one), _mm512_set1_epi32(62));
        Scale16 {
            offset,
            m,
            m_odd: _mm512_srli_epi64::<32>(m),
            left,
            shifts: _mm512_test_epi32_mask(left, left) != 0,
            right,
            mask,
            half_mask: _mm512_srli_epi32::<1>(mask),
            total: (_mm512_and_si512(total, _mm512_set1_epi64(0xFFFF_FFFF)), _mm512_srli_epi64::<32>(total)),
            zp: _mm512_set1_epi32(rq.out_zp),
            lo: _mm512_set1_epi32(rq.min),
            hi: _mm512_set1_epi32(rq.max),
        }
    }

    /// TFLite's two roundings (as `super::x86_64::requant`): the rounded high
    /// half of the doubled product, then the rounding right shift; zero point
    /// and clamp.
    #[target_feature(enable = "avx512f")]
    pub(super) fn double(&self, d: __m512i) -> __m512i {
        let one = _mm512_set1_epi32(1);
        let x = _mm512_add_epi32(d, self.offset);
        // Scales below 1 (nearly all) have no left shift: one instruction fewer.
        let x = if self.shifts { _mm512_sllv_epi32(x, self.left) } else { x };
        let high = high_halves(_mm512_mul_epi32(x, self.m), _mm512_mul_epi32(_mm512_srli_epi64::<32>(x), self.m_odd));
        let threshold = _mm512_add_epi32(self.half_mask, _mm512_srli_epi32::<31>(high));
        let up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, self.mask), threshold);
        let shifted = _mm512_srav_epi32(high, self.right);
        let v = _mm512_mask_add_epi32(shifted, up, shifted, one);
        _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, self.zp), self.lo), self.hi)
    }

    /// One rounding of the exact product (as `super::requant_rows_single`):
    /// `(x * m + 2^(total - 1)) >> total` in 64 bits, clamped to int32, then
    /// the zero point (wrapping, as there) and clamp.
    #[target_feature(enable = "avx512f")]
    pub(super) fn single(&self, d: __m512i) -> __m512i {
        let one = _mm512_set1_epi64(1);
        let (i32_lo, i32_hi) = (_mm512_set1_epi64(i64::from(i32::MIN)), _mm512_set1_epi64(i64::from(i32::MAX)));
        let x = _mm512_add_epi32(d, self.offset);
        let round = |prod: __m512i, total: __m512i| {
            let half = _mm512_sllv_epi64(one, _mm512_sub_epi64(total, one));
            let v = _mm512_srav_epi64(_mm512_add_epi64(prod, half), total);
            _mm512_min_epi64(_mm512_max_epi64(v, i32_lo), i32_hi)
        };
        let even = round(_mm512_mul_epi32(x, self.m), self.total.0);
        let odd = round(_mm512_mul_epi32(_mm512_srli_epi64::<32>(x), self.m_odd), self.total.1);
        let v = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64::<32>(odd));
        _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, self.zp), self.lo), self.hi)
    }
}

/// The requantization with its two roundings merged into one floor (the terms
/// `super::merged_terms` made once per layer): per 8 lanes one 64-bit product,
/// add, masked subtract and shift, where [`Scale16::double`] takes the rounded
/// high half and then a second rounding. The per-channel terms are read from
/// their block as plain loads where they are used.
struct Merged16 {
    /// Whether any lane shifts left.
    shifts: bool,
    /// Interleaves the even lanes' and the odd lanes' results.
    idx: __m512i,
    lo: __m512i,
    hi: __m512i,
}

impl Merged16 {
    /// The per-layer constants of `rq`; `shifts` where any channel shifts left.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn new(rq: &RowRequant, shifts: bool) -> Merged16 {
        let idx: [i32; 16] = std::array::from_fn(|i| if i % 2 == 0 { i as i32 } else { 16 + i as i32 - 1 });
        Merged16 {
            shifts,
            // SAFETY: 16 values.
            idx: unsafe { _mm512_loadu_si512(idx.as_ptr() as *const _) },
            lo: _mm512_set1_epi32(rq.min),
            hi: _mm512_set1_epi32(rq.max),
        }
    }

    /// The 16 sums `x` plus their channels' `offset` of block `b` (one
    /// block of `super::merged_terms`, loaded) requantized, offset by the zero
    /// point and clamped.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn apply(&self, b: &[__m512i; 9], offset: __m512i, x: __m512i) -> __m512i {
        let v = |i: usize| b[i];
        let x = _mm512_add_epi32(x, offset);
        let x = if self.shifts { _mm512_sllv_epi32(x, v(2)) } else { x };
        let even = _mm512_mul_epi32(x, v(0));
        let odd = _mm512_mul_epi32(_mm512_srli_epi64::<32>(x), v(1));
        let round = |p: __m512i, t: __m512i, base: __m512i, neg: __m512i| {
            let below = _mm512_cmplt_epi64_mask(p, _mm512_setzero_si512());
            let q = _mm512_add_epi64(p, base);
            _mm512_srav_epi64(_mm512_mask_sub_epi64(q, below, q, neg), t)
        };
        let even = round(even, v(3), v(5), v(7));
        let odd = round(odd, v(4), v(6), v(8));
        let v = _mm512_permutex2var_epi32(even, self.idx, odd);
        _mm512_min_epi32(_mm512_max_epi32(v, self.lo), self.hi)
    }
}

/// A [`crate::quant::Scale`] broadcast to 16 lanes for [`mbqm16`].
struct ScaleV {
    m: __m512i,
    m_odd: __m512i,
    left: __m512i,
    right: __m512i,
    mask: __m512i,
    half_mask: __m512i,
}

impl ScaleV {
    #[target_feature(enable = "avx512f")]
    fn new(s: crate::quant::Scale) -> ScaleV {
        let one = _mm512_set1_epi32(1);
        let m = _mm512_set1_epi32(s.multiplier);
        // `wrapping_shl` takes the shift modulo 32; `vpsllvd` would clear the lane.
        let right = _mm512_set1_epi32(s.right.min(31) as i32);
        let mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, right), one);
        ScaleV { m, m_odd: _mm512_srli_epi64::<32>(m), left: _mm512_set1_epi32((s.left & 31) as i32), right, mask, half_mask: _mm512_srli_epi32::<1>(mask) }
    }
}

/// `mbqm_split` on 16 lanes: the rounded high half of the doubled product (from
/// the 64-bit products of even and odd lanes), then the rounding right shift.
#[inline]
#[target_feature(enable = "avx512f")]
fn mbqm16(x: __m512i, s: &ScaleV) -> __m512i {
    let x = _mm512_sllv_epi32(x, s.left);
    let high = high_halves(_mm512_mul_epi32(x, s.m), _mm512_mul_epi32(_mm512_srli_epi64::<32>(x), s.m_odd));
    let threshold = _mm512_add_epi32(s.half_mask, _mm512_srli_epi32::<31>(high));
    let up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, s.mask), threshold);
    let shifted = _mm512_srav_epi32(high, s.right);
    _mm512_mask_add_epi32(shifted, up, shifted, _mm512_set1_epi32(1))
}

/// An 8-bit input's rescale `mbqm_split(d << l, m, 0, right)` for `|d| <= 255`
/// and `9 <= l <= 22`, in 32-bit lanes: with `s = 31 - l` and `m = mh 2^s + ml`,
/// the rounded high half `(d 2^l m + 2^30) >> 31` is exactly
/// `d mh + ((d ml + 2^(s - 1)) >> s)`, both products inside int32 (`|d mh| <
/// 2^30`, `|d ml| < 2^30`), so no 64-bit products are needed.
struct SplitScale {
    mh: __m512i,
    ml: __m512i,
    half: __m512i,
    shift: __m128i,
    scale: ScaleV,
}

impl SplitScale {
    /// The split for `s` after a left shift of `l`, if `l + s.left` is in 9..=22.
    #[target_feature(enable = "avx512f")]
    fn new(s: crate::quant::Scale, l: u32) -> Option<SplitScale> {
        let l = l.checked_add(s.left).filter(|l| (9..=22).contains(l))?;
        let sh = 31 - l;
        Some(SplitScale {
            mh: _mm512_set1_epi32(s.multiplier >> sh),
            ml: _mm512_set1_epi32(s.multiplier & ((1 << sh) - 1)),
            half: _mm512_set1_epi32(1 << (sh - 1)),
            shift: _mm_cvtsi32_si128(sh as i32),
            scale: ScaleV::new(s),
        })
    }

    /// The rescaled `d` (unshifted, `|d| <= 255`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn apply(&self, d: __m512i) -> __m512i {
        let low = _mm512_sra_epi32(_mm512_add_epi32(_mm512_mullo_epi32(d, self.ml), self.half), self.shift);
        let high = _mm512_add_epi32(_mm512_mullo_epi32(d, self.mh), low);
        let s = &self.scale;
        let threshold = _mm512_add_epi32(s.half_mask, _mm512_srli_epi32::<31>(high));
        let up = _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, s.mask), threshold);
        let shifted = _mm512_srav_epi32(high, s.right);
        _mm512_mask_add_epi32(shifted, up, shifted, _mm512_set1_epi32(1))
    }
}

/// An 8-bit input's rescale `mbqm_split((q - z) << l, m, 0, r)` with its two
/// roundings merged into one. Rounding the high half of `p = d 2^l m` (`d = q -
/// z`) and then shifting it right by `r`, half away from zero, is one floor:
/// `floor((p + 2^30 + c 2^31) / 2^(31 + r))` with `c = 2^(r - 1) - [d < 0]`
/// (`c = 0` for `r = 0`; where `d < 0` rounds to a high half of 0 both values of
/// `c` give 0). Every term is a multiple of `2^l`, so with `S = 31 + r - l` and
/// `m = mh 2^S + ml` the rescale is `d mh + floor((d ml + B) / 2^S)`, both parts
/// inside int32 for `|d| <= 255` and `8 <= S <= 23`: two 32-bit multiplies and
/// one shift instead of the 64-bit products and a second rounding. The lanes
/// hold `q`, not `d`: the zero point's share is folded into the constants.
struct MergedInput {
    mh: __m512i,
    ml: __m512i,
    /// `B - z ml` for `d >= 0`.
    base: __m512i,
    /// Taken off `base` where `d < 0`: `2^(31 - l)` for `r > 0`, else 0.
    neg: __m512i,
    z: __m512i,
    shift: __m128i,
    /// `z mh`, which the lanes' `q mh` holds too much (taken off once per sum).
    z_mh: i32,
}

impl MergedInput {
    /// The merged form of `s` after a left shift of `l`, for zero point `z`
    /// (`|q - z| <= 255`), if its shift and multiplier fit (see above).
    #[target_feature(enable = "avx512f")]
    fn new(s: crate::quant::Scale, l: u32, z: i32) -> Option<MergedInput> {
        if s.left != 0 || s.multiplier < 0 || l > 30 {
            return None;
        }
        let shift = (31 + s.right).checked_sub(l).filter(|sh| (8..=23).contains(sh))?;
        let (mh, ml) = (s.multiplier >> shift, s.multiplier & ((1 << shift) - 1));
        let base = (1i32 << (30 - l)) + if s.right > 0 { 1 << (30 - l + s.right) } else { 0 };
        let neg = if s.right > 0 { 1i32 << (31 - l) } else { 0 };
        Some(MergedInput {
            mh: _mm512_set1_epi32(mh),
            ml: _mm512_set1_epi32(ml),
            base: _mm512_set1_epi32(base.wrapping_sub(z.wrapping_mul(ml))),
            neg: _mm512_set1_epi32(neg),
            z: _mm512_set1_epi32(z),
            shift: _mm_cvtsi32_si128(shift as i32),
            z_mh: z.wrapping_mul(mh),
        })
    }

    /// `q`'s rescale plus `z mh` (wrapping).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn apply(&self, q: __m512i) -> __m512i {
        let below = _mm512_cmplt_epi32_mask(q, self.z);
        let low = _mm512_add_epi32(_mm512_mullo_epi32(q, self.ml), self.base);
        let low = _mm512_mask_sub_epi32(low, below, low, self.neg);
        _mm512_add_epi32(_mm512_mullo_epi32(q, self.mh), _mm512_sra_epi32(low, self.shift))
    }
}

/// The output rescale of an ADD / SUB, `mbqm_split(s, m, 0, r)` plus the zero
/// point, its two roundings merged as [`MergedInput`]'s: `floor((s m + 2^30 + c
/// 2^31) / 2^T + z)` with `T = 31 + r`, one 64-bit add (the zero point folded into
/// it as `z 2^T`), a masked subtract for negative sums and one shift per half.
struct MergedOutput {
    m: __m512i,
    /// `2^30 + 2^(30 + r) [r > 0] + z 2^T` per 64-bit lane.
    base: __m512i,
    /// `2^31 [r > 0]`, taken off where the sum is negative.
    neg: __m512i,
    shift: __m128i,
    /// Interleaves the even lanes' and the odd lanes' results.
    idx: __m512i,
    lo: __m512i,
    hi: __m512i,
}

impl MergedOutput {
    /// The merged form of `s` with output zero point `z`, clamped to `(lo, hi)`,
    /// for sums within int32, if its shift and multiplier fit in 64-bit lanes.
    #[target_feature(enable = "avx512f")]
    fn new(s: crate::quant::Scale, z: i32, (lo, hi): (i32, i32)) -> Option<MergedOutput> {
        if s.left != 0 || s.multiplier < 0 || s.right > 31 {
            return None;
        }
        let t = 31 + s.right;
        let base = (1i128 << 30) + if s.right > 0 { 1i128 << (30 + s.right) } else { 0 } + (i128::from(z) << t);
        // The products stay within 2^62 (an int32 sum times a 31-bit multiplier).
        let base = i64::try_from(base).ok().filter(|b| b.unsigned_abs() < 1 << 61)?;
        let idx: [i32; 16] = std::array::from_fn(|i| if i % 2 == 0 { i as i32 } else { 16 + i as i32 - 1 });
        Some(MergedOutput {
            m: _mm512_set1_epi32(s.multiplier),
            base: _mm512_set1_epi64(base),
            neg: _mm512_set1_epi64(if s.right > 0 { 1 << 31 } else { 0 }),
            shift: _mm_cvtsi32_si128(t as i32),
            // SAFETY: 16 int32 read from a 16-element array.
            idx: unsafe { _mm512_loadu_si512(idx.as_ptr() as *const _) },
            lo: _mm512_set1_epi32(lo),
            hi: _mm512_set1_epi32(hi),
        })
    }

    /// The 16 sums `s` rescaled, offset and clamped.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn apply(&self, s: __m512i) -> __m512i {
        let half = |p: __m512i| {
            let below = _mm512_cmplt_epi64_mask(p, _mm512_setzero_si512());
            let q = _mm512_add_epi64(p, self.base);
            _mm512_sra_epi64(_mm512_mask_sub_epi64(q, below, q, self.neg), self.shift)
        };
        let even = half(_mm512_mul_epi32(s, self.m));
        let odd = half(_mm512_mul_epi32(_mm512_srli_epi64::<32>(s), self.m));
        let v = _mm512_permutex2var_epi32(even, self.idx, odd);
        _mm512_min_epi32(_mm512_max_epi32(v, self.lo), self.hi)
    }
}

/// [`add_sub_8bit`] through [`MergedInput`] and [`MergedOutput`], if `p`'s
/// scales fit them: returns false, having done nothing, where they do not.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn add_sub_8bit_merged<const UNSIGNED: bool>(a: &[u8], b: &[u8], p: &crate::quant::AddSub, out: &mut [u8]) -> bool {
    let zp_ok = |zp: i32| if UNSIGNED { (0..=255).contains(&zp) } else { (-128..=127).contains(&zp) };
    if !(zp_ok(p.zp.0) && zp_ok(p.zp.1) && matches!(p.sign, 1 | -1)) {
        return false;
    }
    let (Some(fa), Some(fb), Some(fo)) = (
        MergedInput::new(p.scale.0, p.left_shift, p.zp.0),
        MergedInput::new(p.scale.1, p.left_shift, p.zp.1),
        MergedOutput::new(p.out_scale, p.out_zp, (p.min, p.max)),
    ) else {
        return false;
    };
    // The zero points' shares of both rescales, taken off the sum once.
    let zero = _mm512_set1_epi32(fa.z_mh.wrapping_add(fb.z_mh.wrapping_mul(p.sign)).wrapping_neg());
    let n = out.len().min(a.len()).min(b.len());
    macro_rules! step {
        ($x:expr, $y:expr) => {{
            let (x, y): (__m128i, __m128i) = ($x, $y);
            let (x, y) = if UNSIGNED { (_mm512_cvtepu8_epi32(x), _mm512_cvtepu8_epi32(y)) } else { (_mm512_cvtepi8_epi32(x), _mm512_cvtepi8_epi32(y)) };
            let (x, y) = (fa.apply(x), fb.apply(y));
            let s = if p.sign == 1 { _mm512_add_epi32(x, y) } else { _mm512_sub_epi32(x, y) };
            // Clamped inside the 8-bit type, so the truncating narrow keeps the value.
            _mm512_cvtepi32_epi8(fo.apply(_mm512_add_epi32(s, zero)))
        }};
    }
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i + 16 <= n of both inputs and of `out`.
        unsafe {
            let v = step!(_mm_loadu_si128(a.as_ptr().add(i) as *const _), _mm_loadu_si128(b.as_ptr().add(i) as *const _));
            _mm_storeu_si128(out.as_mut_ptr().add(i) as *mut _, v);
        }
        i += 16;
    }
    if i < n {
        let (mut x, mut y, mut o) = ([0u8; 16], [0u8; 16], [0u8; 16]);
        x[..n - i].copy_from_slice(&a[i..n]);
        y[..n - i].copy_from_slice(&b[i..n]);
        // SAFETY: 16-byte arrays, unaligned accesses.
        unsafe {
            let v = step!(_mm_loadu_si128(x.as_ptr() as *const _), _mm_loadu_si128(y.as_ptr() as *const _));
            _mm_storeu_si128(o.as_mut_ptr() as *mut _, v);
        }
        out[i..n].copy_from_slice(&o[..n - i]);
    }
    true
}

/// Quantized ADD / SUB of 8-bit operands ([`crate::quant::AddSub::apply`] per
/// element), 16 elements per step, the last `len % 16` masked. `UNSIGNED` reads
/// and writes uint8 values, otherwise int8.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn add_sub_8bit<const UNSIGNED: bool>(a: &[u8], b: &[u8], p: &crate::quant::AddSub, out: &mut [u8]) {
    // SAFETY: AVX-512F is present (contract).
    if unsafe { add_sub_8bit_merged::<UNSIGNED>(a, b, p, out) } {
        return;
    }
    let n = out.len().min(a.len()).min(b.len());
    let (sa, sb, so) = (ScaleV::new(p.scale.0), ScaleV::new(p.scale.1), ScaleV::new(p.out_scale));
    let (zpa, zpb, zpo) = (_mm512_set1_epi32(p.zp.0), _mm512_set1_epi32(p.zp.1), _mm512_set1_epi32(p.out_zp));
    let (lo, hi) = (_mm512_set1_epi32(p.min), _mm512_set1_epi32(p.max));
    let shift = _mm_cvtsi32_si128((p.left_shift & 31) as i32);
    let sign = _mm512_set1_epi32(p.sign);
    macro_rules! widen {
        ($v:expr) => {
            if UNSIGNED {
                _mm512_cvtepu8_epi32($v)
            } else {
                _mm512_cvtepi8_epi32($v)
            }
        };
    }
    // 8-bit zero points keep |x - zp| <= 255 for the split rescale; others take
    // the 64-bit products.
    let zp_ok = |zp: i32| if UNSIGNED { (0..=255).contains(&zp) } else { (-128..=127).contains(&zp) };
    let split = if zp_ok(p.zp.0) && zp_ok(p.zp.1) { SplitScale::new(p.scale.0, p.left_shift).zip(SplitScale::new(p.scale.1, p.left_shift)) } else { None };
    // Macros, not closures: the closures were compiled out of line (a call per
    // 16 elements, its vectors passed through memory).
    macro_rules! step {
        ($x:expr, $y:expr) => {{
            let (x, y): (__m128i, __m128i) = ($x, $y);
            let (x, y) = match &split {
                Some((fa, fb)) => (fa.apply(_mm512_sub_epi32(widen!(x), zpa)), fb.apply(_mm512_sub_epi32(widen!(y), zpb))),
                None => (
                    mbqm16(_mm512_sll_epi32(_mm512_sub_epi32(widen!(x), zpa), shift), &sa),
                    mbqm16(_mm512_sll_epi32(_mm512_sub_epi32(widen!(y), zpb), shift), &sb),
                ),
            };
            let s = match p.sign {
                1 => _mm512_add_epi32(x, y),
                -1 => _mm512_sub_epi32(x, y),
                _ => _mm512_add_epi32(x, _mm512_mullo_epi32(y, sign)),
            };
            // Clamped inside the 8-bit type, so the truncating narrow keeps the value.
            _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(mbqm16(s, &so), zpo), lo), hi))
        }};
    }
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i + 16 <= n of both inputs and of `out`.
        unsafe {
            let v = step!(_mm_loadu_si128(a.as_ptr().add(i) as *const _), _mm_loadu_si128(b.as_ptr().add(i) as *const _));
            _mm_storeu_si128(out.as_mut_ptr().add(i) as *mut _, v);
        }
        i += 16;
    }
    if i < n {
        // The tail through small buffers: masked byte moves would need AVX-512BW.
        let (mut x, mut y, mut o) = ([0u8; 16], [0u8; 16], [0u8; 16]);
        x[..n - i].copy_from_slice(&a[i..n]);
        y[..n - i].copy_from_slice(&b[i..n]);
        // SAFETY: 16-byte arrays, unaligned accesses.
        unsafe {
            let v = step!(_mm_loadu_si128(x.as_ptr() as *const _), _mm_loadu_si128(y.as_ptr() as *const _));
            _mm_storeu_si128(o.as_mut_ptr() as *mut _, v);
        }
        out[i..n].copy_from_slice(&o[..n - i]);
    }
}

/// Rows of an int8 fully-connected layer through the VNNI row tiles: each row
/// of `k` int8 values is read in place from `input` (turned unsigned in
/// registers, its last group of fewer than four bytes by a masked load), with
/// no padded copy and no per-run setup; `rq` holds the fixed starting values
/// (bias and zero-point terms) and rounds once. A weight offset `w_off` adds
/// `w_off * sum (x + 128)` per row. Outputs are int8, `pk.n` per row.
///
/// Panics if the CPU lacks the instructions or the operands disagree.
pub(super) fn fc_rows(input: &[u8], rows: usize, pk: &QPacked, w_off: i32, rq: &RowRequant, out: &mut [i8]) {
    let (n, k) = (pk.n, pk.k);
    let panel = pk.kq * NR;
    assert!(
        available()
            && rq.offset.len() == n
            && rq.rounding == Rounding::Single
            && crate::holds(input.len(), &[rows, k])
            && crate::holds(out.len(), &[rows, n])
            && pk.w.len() >= n.div_ceil(NR) * panel,
        "fc_rows: operands disagree"
    );
    let panels = n.div_ceil(NR);
    // Up to 8 panels a tile (8 accumulator chains), the panels spread evenly
    // over the tiles (9 as 5 + 4, not 8 + 1) so that no tile is left with a
    // single chain.
    let tiles = panels.div_ceil(8);
    for (r, row) in input.chunks_exact(k.max(1)).take(rows).enumerate() {
        let add = if w_off != 0 { row.iter().map(|&b| i32::from(b ^ 0x80)).sum::<i32>().wrapping_mul(w_off) } else { 0 };
        let mut p = 0;
        for tile in 0..tiles {
            let pc = (panels - p).div_ceil(tiles - tile);
            // SAFETY: AVX-512F/BW/VL and VNNI are present (checked above); the
            // row holds `k` bytes, panels p..p + pc < panels lie inside `pk.w`
            // (checked above), row r's `n` outputs inside `out`, and `rq`
            // holds `n` channels.
            unsafe { fc_dispatch(pc, row.as_ptr(), k, pk.w.as_ptr().add(p * panel), panel, rq, p, add, out.as_mut_ptr().add(r * n), n) };
            p += pc;
        }
    }
}

/// [`fc_tile`] for `pc` (1 to 8) panels, with enough accumulators per panel
/// that at least 6 independent chains cover the products' latency.
///
/// # Safety
/// As [`fc_tile`], with `P` = `pc`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn fc_dispatch(pc: usize, a: *const u8, k: usize, w: *const i8, panel: usize, rq: &RowRequant, p0: usize, add: i32, out: *mut i8, ldo: usize) {
    // SAFETY: the caller's contract, for the panels named.
    unsafe {
        match pc {
            1 => fc_tile::<1, 4>(a, k, w, panel, rq, p0, add, out, ldo),
            2 => fc_tile::<2, 4>(a, k, w, panel, rq, p0, add, out, ldo),
            3 => fc_tile::<3, 2>(a, k, w, panel, rq, p0, add, out, ldo),
            4 => fc_tile::<4, 2>(a, k, w, panel, rq, p0, add, out, ldo),
            5 => fc_tile::<5, 1>(a, k, w, panel, rq, p0, add, out, ldo),
            6 => fc_tile::<6, 1>(a, k, w, panel, rq, p0, add, out, ldo),
            7 => fc_tile::<7, 1>(a, k, w, panel, rq, p0, add, out, ldo),
            _ => fc_tile::<8, 1>(a, k, w, panel, rq, p0, add, out, ldo),
        }
    }
}

/// One int8 row by `P` panels of 16 outputs, the groups of four `k` split over
/// `U` sets of accumulators (short rows of few panels would otherwise wait on
/// one `vpdpbusd` chain); then summed, offset by `add`, rounded once
/// ([`Scale16::single`]) and stored as int8.
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL and VNNI; `a` must be valid for `k`
/// bytes, panel `p < P` holds `k.div_ceil(4) * 64` weights at `w + p * panel`,
/// `out` is valid for channels `16 * p0..` up to `ldo` (at most `16 * P` of
/// them), and `rq` holds `ldo` channels.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn fc_tile<const P: usize, const U: usize>(
    a: *const u8,
    k: usize,
    w: *const i8,
    panel: usize,
    rq: &RowRequant,
    p0: usize,
    add: i32,
    out: *mut i8,
    ldo: usize,
) {
    // int8 inputs made unsigned (x + 128) for `vpdpbusd`; the starting values
    // in `rq` take the 128 back out.
    let flip = _mm512_set1_epi32(0x8080_8080u32 as i32);
    let mut acc = [[_mm512_setzero_si512(); P]; U];
    let groups = k / 4;
    // Group g of every panel into the accumulator set `u`.
    let step = |acc: &mut [__m512i; P], av: __m512i, g: usize| {
        for (p, acc) in acc.iter_mut().enumerate() {
            // SAFETY: group g < k.div_ceil(4) of panel p (contract).
            let wv = unsafe { _mm512_loadu_si512(w.add(p * panel + g * 64) as *const _) };
            *acc = _mm512_dpbusd_epi32(*acc, av, wv);
        }
    };
    let mut g = 0;
    while g + U <= groups {
        for (u, acc) in acc.iter_mut().enumerate() {
            // SAFETY: bytes 4(g + u)..4(g + u) + 4 < k of the row (contract); unaligned read.
            let av = _mm512_xor_si512(_mm512_set1_epi32(unsafe { (a.add((g + u) * 4) as *const i32).read_unaligned() }), flip);
            step(acc, av, g + u);
        }
        g += U;
    }
    while g < groups {
        // SAFETY: as above.
        let av = _mm512_xor_si512(_mm512_set1_epi32(unsafe { (a.add(g * 4) as *const i32).read_unaligned() }), flip);
        step(&mut acc[0], av, g);
        g += 1;
    }
    if !k.is_multiple_of(4) {
        // The last 1-3 bytes by a masked load (nothing read past the row); the
        // lanes left out meet zero weights.
        // SAFETY: the masked lanes lie inside the row's k bytes (contract).
        let tail = unsafe { _mm_maskz_loadu_epi8((1u16 << (k % 4)) - 1, a.add(groups * 4) as *const i8) };
        let av = _mm512_xor_si512(_mm512_broadcastd_epi32(tail), flip);
        step(&mut acc[0], av, groups);
    }
    let add = _mm512_set1_epi32(add);
    for p in 0..P {
        let sum = acc[1..].iter().fold(_mm512_add_epi32(acc[0][p], add), |s, a| _mm512_add_epi32(s, a[p]));
        let j = (p0 + p) * NR;
        let cols = NR.min(ldo - j);
        let m: __mmask16 = if cols >= NR { 0xFFFF } else { (1u16 << cols) - 1 };
        // SAFETY: the `cols` channels from j of `rq`'s arrays of ldo (contract).
        let s = unsafe { Scale16::load(rq, j, m) };
        // SAFETY: channels j..j + cols of the row's ldo outputs (contract).
        unsafe { store16(out.add(j), m, s.single(sum), 0) };
    }
}
