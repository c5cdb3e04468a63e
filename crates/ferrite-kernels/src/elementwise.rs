//! Element-wise ops: broadcasting binary ops and float activations.

/// NumPy-style broadcast of two shapes, or `None` if incompatible.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Strides of `shape` seen through a broadcast to `out` (0 on broadcast dims).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> [usize; crate::MAX_DIMS] {
    let r = out.len();
    let st = crate::strides(shape);
    let mut b = [0usize; crate::MAX_DIMS];
    for (i, v) in b.iter_mut().enumerate().take(r) {
        if i + shape.len() >= r {
            let j = i + shape.len() - r;
            *v = if shape[j] == 1 && out[i] != 1 { 0 } else { st[j] };
        }
    }
    b
}

/// The row loops a broadcast walk ([`broadcast_rows`]) runs: `out` against two
/// operand rows, one operand a single value, or `b` repeated along `a`.
trait RowOps<A, B, O> {
    /// `o[i] = op(a[i], b[i])`.
    fn zip(&mut self, o: &mut [O], a: &[A], b: &[B]);
    /// `o[i] = op(a[i], y)`.
    fn b_one(&mut self, o: &mut [O], a: &[A], y: B);
    /// `o[i] = op(x, b[i])`.
    fn a_one(&mut self, o: &mut [O], x: A, b: &[B]);
    /// `zip` over each `b.len()` chunk of `o` and `a` against all of `b`.
    fn zip_repeat_b(&mut self, o: &mut [O], a: &[A], b: &[B]) {
        for (oc, ac) in o.chunks_exact_mut(b.len()).zip(a.chunks_exact(b.len())) {
            self.zip(oc, ac, b);
        }
    }
}

/// A closure's row loops (slice loops the compiler vectorizes where it can).
struct Each<F>(F);

impl<A: Copy, B: Copy, O, F: FnMut(A, B) -> O> RowOps<A, B, O> for Each<F> {
    #[inline(always)]
    fn zip(&mut self, o: &mut [O], a: &[A], b: &[B]) {
        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
            *o = (self.0)(x, y);
        }
    }
    #[inline(always)]
    fn b_one(&mut self, o: &mut [O], a: &[A], y: B) {
        for (o, &x) in o.iter_mut().zip(a) {
            *o = (self.0)(x, y);
        }
    }
    #[inline(always)]
    fn a_one(&mut self, o: &mut [O], x: A, b: &[B]) {
        for (o, &y) in o.iter_mut().zip(b) {
            *o = (self.0)(x, y);
        }
    }
}

/// Applies `f` element-wise over `a` and `b` broadcast to `out_shape`.
/// The caller guarantees `out_shape` is the broadcast of the two input shapes.
#[inline(always)]
pub fn binary<A: Copy, B: Copy, O>(a: &[A], a_shape: &[usize], b: &[B], b_shape: &[usize], out: &mut [O], out_shape: &[usize], f: impl FnMut(A, B) -> O) {
    broadcast_rows(&mut Each(f), a, a_shape, b, b_shape, out, out_shape);
}

/// The broadcast walk of every binary op: whole operands, a single value or a
/// repeated trailing operand (per-channel alpha, bias or scale) in one call of
/// `rows`, else row by row of the output's last dim.
#[inline(always)]
fn broadcast_rows<A: Copy, B: Copy, O>(
    rows: &mut impl RowOps<A, B, O>,
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    out: &mut [O],
    out_shape: &[usize],
) {
    let n = out.len();
    if a.len() == n && b.len() == n {
        return rows.zip(out, a, b);
    }
    if b.len() == 1 && a.len() == n {
        return rows.b_one(out, a, b[0]);
    }
    if a.len() == 1 && b.len() == n {
        return rows.a_one(out, a[0], b);
    }
    if n == 0 {
        return;
    }
    // One operand is the trailing dims of the output: zip each output chunk against it.
    let trailing = |s: &[usize]| {
        let s = &s[s.iter().take_while(|&&d| d == 1).count()..];
        s.len() <= out_shape.len() && s == &out_shape[out_shape.len() - s.len()..]
    };
    if a.len() == n && !b.is_empty() && trailing(b_shape) {
        return rows.zip_repeat_b(out, a, b);
    }
    if b.len() == n && !a.is_empty() && trailing(a_shape) {
        for (oc, bc) in out.chunks_exact_mut(a.len()).zip(b.chunks_exact(a.len())) {
            rows.zip(oc, a, bc);
        }
        return;
    }
    let r = out_shape.len();
    let sa = broadcast_strides(a_shape, out_shape);
    let sb = broadcast_strides(b_shape, out_shape);
    let inner = out_shape[r - 1];
    let (ia, ib) = (sa[r - 1], sb[r - 1]);
    let mut idx = [0usize; crate::MAX_DIMS];
    let mut o = 0;
    while o < n {
        let oa: usize = (0..r - 1).map(|d| idx[d] * sa[d]).sum();
        let ob: usize = (0..r - 1).map(|d| idx[d] * sb[d]).sum();
        let o_row = &mut out[o..o + inner];
        match (ia, ib) {
            (1, 1) => rows.zip(o_row, &a[oa..oa + inner], &b[ob..ob + inner]),
            (1, 0) => rows.b_one(o_row, &a[oa..oa + inner], b[ob]),
            (0, 1) => rows.a_one(o_row, a[oa], &b[ob..ob + inner]),
            // The last dim's strides are 0 or 1; anything else goes one element
            // at a time.
            _ => {
                for (k, ov) in o_row.iter_mut().enumerate() {
                    rows.b_one(std::slice::from_mut(ov), std::slice::from_ref(&a[oa + k * ia]), b[ob + k * ib]);
                }
            }
        }
        o += inner;
        // Advance the outer index (all dims but the last).
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// `out[i] = if cond[i] { x[i] } else { y[i] }` with all three broadcast to `out_shape`.
pub fn select<T: Copy>(cond: &[u8], c_shape: &[usize], x: &[T], x_shape: &[usize], y: &[T], y_shape: &[usize], out: &mut [T], out_shape: &[usize]) {
    let r = out_shape.len();
    if r == 0 {
        if let (Some(o), Some(&c), Some(&a), Some(&b)) = (out.first_mut(), cond.first(), x.first(), y.first()) {
            *o = if c != 0 { a } else { b };
        }
        return;
    }
    let (sc, sx, sy) = (broadcast_strides(c_shape, out_shape), broadcast_strides(x_shape, out_shape), broadcast_strides(y_shape, out_shape));
    let mut idx = [0usize; crate::MAX_DIMS];
    for o in out.iter_mut() {
        let (mut ic, mut ix, mut iy) = (0, 0, 0);
        for d in 0..r {
            ic += idx[d] * sc[d];
            ix += idx[d] * sx[d];
            iy += idx[d] * sy[d];
        }
        *o = if cond[ic] != 0 { x[ix] } else { y[iy] };
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// e^x with a branch-free range reduction and polynomial, so loops over it
/// vectorize. Relative error about 1e-7 for |x| < 87; saturates beyond.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    // The low end keeps the result a normal float: denormal products take slow
    // microcode paths on x86 (a logistic of large logits ran ten times slower).
    let x = x.clamp(-87.0, 88.7);
    // x = n ln2 + r, |r| <= ln2 / 2
    // Ties to even: one rounding instruction (half away from zero is a sequence).
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    // e^r by its Taylor series to r^7 (error below 1e-8 on the reduced range).
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // Split 2^n so each factor stays a normal float even for n near the limits.
    // A NaN input passes the clamp (and makes `p`, so the result, NaN): `max`
    // replaces its NaN `n` by the low end, since converting NaN would be UB.
    let n = n.max(-126.0);
    // SAFETY: x is clamped above and NaN is replaced just above, so n is an
    // integral value in [-126, 128]; the unchecked conversion avoids the
    // saturation checks that stop vectorization.
    let n: i32 = unsafe { n.to_int_unchecked() };
    let (n1, n2) = (n / 2, n - n / 2);
    p * f32::from_bits(((n1 + 127) as u32) << 23) * f32::from_bits(((n2 + 127) as u32) << 23)
}

/// Logistic sigmoid.
#[inline(always)]
pub fn logistic(x: f32) -> f32 {
    // Below -87 the result would be a denormal, which the division then makes on
    // every lane (x86 handles those in slow microcode: a segmentation head's large
    // negative logits ran ten times slower). It rounds to 0 there, as in LiteRT.
    let r = 1.0 / (1.0 + exp_fast((-x).min(87.0)));
    if x < -87.0 {
        0.0
    } else {
        r
    }
}

/// tanh through the logistic function (odd-symmetric, vectorizable).
#[inline(always)]
pub fn tanh_fast(x: f32) -> f32 {
    let a = x.abs();
    // tanh is 1 in float well before 2a = 87; capping keeps the quotient normal.
    let t = 1.0 - 2.0 / (1.0 + exp_fast((2.0 * a).min(87.0)));
    // Below 1e-4, tanh(x) = x within float precision and avoids cancellation.
    let t = if a < 1e-4 { a } else { t };
    t.copysign(x)
}

/// Float unary ops with vectorized implementations.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub enum Unary {
    Abs,
    Neg,
    Square,
    Sqrt,
    Rsqrt,
    Exp,
    Log,
    Tanh,
    Logistic,
    Relu,
    Relu6,
    ReluN1To1,
    Relu0To1,
    HardSwish,
    LeakyRelu(f32),
    Floor,
    Ceil,
    Round,
    Sign,
    Sin,
    Cos,
    Elu,
    Gelu(bool),
}

/// Expands to a match over the [`Unary`] `$op` that calls `$map!(f)` with that
/// op's scalar function, so out-of-place and in-place forms share one definition.
macro_rules! unary_dispatch {
    ($op:expr, $map:ident) => {
        match $op {
            Unary::Abs => $map!(|v: f32| v.abs()),
            Unary::Neg => $map!(|v: f32| -v),
            Unary::Square => $map!(|v: f32| v * v),
            Unary::Sqrt => $map!(|v: f32| v.sqrt()),
            Unary::Rsqrt => $map!(|v: f32| 1.0 / v.sqrt()),
            Unary::Exp => $map!(exp_fast),
            Unary::Log => $map!(|v: f32| v.ln()),
            Unary::Tanh => $map!(tanh_fast),
            Unary::Logistic => $map!(logistic),
            Unary::Relu => $map!(|v: f32| v.max(0.0)),
            Unary::Relu6 => $map!(|v: f32| v.clamp(0.0, 6.0)),
            Unary::ReluN1To1 => $map!(|v: f32| v.clamp(-1.0, 1.0)),
            Unary::Relu0To1 => $map!(|v: f32| v.clamp(0.0, 1.0)),
            Unary::HardSwish => $map!(hard_swish),
            Unary::LeakyRelu(alpha) => $map!(|v: f32| if v >= 0.0 { v } else { v * alpha }),
            Unary::Floor => $map!(|v: f32| v.floor()),
            Unary::Ceil => $map!(|v: f32| v.ceil()),
            Unary::Round => $map!(round_half_even),
            Unary::Sign => $map!(|v: f32| if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                0.0
            }),
            Unary::Sin => $map!(|v: f32| v.sin()),
            Unary::Cos => $map!(|v: f32| v.cos()),
            Unary::Elu => $map!(|v: f32| if v >= 0.0 { v } else { v.exp_m1() }),
            Unary::Gelu(approximate) => $map!(|v: f32| gelu(v, approximate)),
        }
    };
}

simd_fn! {
    /// `out[i] = op(x[i])`.
    pub fn unary_f32(op: Unary, x: &[f32], out: &mut [f32]) {
        macro_rules! map {
            ($f:expr) => {
                for (o, &v) in out.iter_mut().zip(x) {
                    *o = $f(v);
                }
            };
        }
        unary_dispatch!(op, map)
    }
}

simd_fn! {
    /// `x[i] = op(x[i])` in place (an activation folded into the kernel producing
    /// `x`), bit-identical to [`unary_f32`].
    pub fn unary_in_place(op: Unary, x: &mut [f32]) {
        macro_rules! map {
            ($f:expr) => {
                for v in x.iter_mut() {
                    *v = $f(*v);
                }
            };
        }
        unary_dispatch!(op, map)
    }
}

/// Float binary ops with vectorized implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    SquaredDifference,
    Pow,
    FloorDiv,
    FloorMod,
    Prelu,
}

/// `out = clamp(op(a, b))` with `a` and `b` broadcast to `out_shape`.
#[allow(clippy::too_many_arguments)]
pub fn binary_f32(op: Binary, a: &[f32], a_shape: &[usize], b: &[f32], b_shape: &[usize], out: &mut [f32], out_shape: &[usize], clamp: crate::Clamp) {
    match op {
        // One element at a time through a libm call (powf, fmodf) at every vector
        // level: AVX copies of these loops would be tens of kB of code that runs no
        // faster.
        Binary::Pow | Binary::FloorMod => binary_f32_scalar(op, a, a_shape, b, b_shape, out, out_shape, clamp),
        _ => binary_f32_simd(op, a, a_shape, b, b_shape, out, out_shape, clamp),
    }
}

/// The ops of [`binary_f32`] that are one libm call per element.
#[allow(clippy::too_many_arguments)]
fn binary_f32_scalar(op: Binary, a: &[f32], a_shape: &[usize], b: &[f32], b_shape: &[usize], out: &mut [f32], out_shape: &[usize], clamp: crate::Clamp) {
    let (lo, hi) = (clamp.min, clamp.max);
    if op == Binary::Pow {
        binary(a, a_shape, b, b_shape, out, out_shape, |x: f32, y: f32| x.powf(y).max(lo).min(hi))
    } else {
        binary(a, a_shape, b, b_shape, out, out_shape, |x: f32, y: f32| {
            let r = x % y;
            let r = if r != 0.0 && ((r < 0.0) != (y < 0.0)) { r + y } else { r };
            r.max(lo).min(hi)
        })
    }
}

/// One vectorizable float binary op, a type so that each op's row loops are
/// their own (generic) functions.
trait BinaryOp {
    fn f(x: f32, y: f32) -> f32;
}

macro_rules! binary_ops {
    ($($name:ident => |$x:ident, $y:ident| $e:expr;)*) => {
        $(
            struct $name;
            impl BinaryOp for $name {
                #[inline(always)]
                fn f($x: f32, $y: f32) -> f32 {
                    $e
                }
            }
        )*
    };
}
binary_ops! {
    OpAdd => |x, y| x + y;
    OpSub => |x, y| x - y;
    OpMul => |x, y| x * y;
    OpDiv => |x, y| x / y;
    OpMax => |x, y| x.max(y);
    OpMin => |x, y| x.min(y);
    OpSquaredDifference => |x, y| (x - y) * (x - y);
    OpFloorDiv => |x, y| (x / y).floor();
    OpPrelu => |x, y| if x >= 0.0 { x } else { x * y };
}

/// One op's row loops at one vector level: both operands full, `b` one value, `a`
/// one value; each result clamped to `[lo, hi]`. Every broadcast form of
/// [`binary_f32`] is a sequence of these rows, so an op has three vectorized loops
/// per level instead of one per form (the flat, per-channel and N-d paths each had
/// their own copies, 160 kB over the ops and levels).
///
/// Made only by [`binary_rows`], which picks a level the CPU supports.
#[derive(Clone, Copy)]
struct BinaryRows {
    zip_fn: unsafe fn(&mut [f32], &[f32], &[f32], f32, f32),
    b_one_fn: unsafe fn(&mut [f32], &[f32], f32, f32, f32),
    a_one_fn: unsafe fn(&mut [f32], f32, &[f32], f32, f32),
    zip_repeat_b_fn: unsafe fn(&mut [f32], &[f32], &[f32], f32, f32),
}

impl BinaryRows {
    /// `o[i] = clamp(op(a[i], b[i]))`.
    fn zip(&self, o: &mut [f32], a: &[f32], b: &[f32], lo: f32, hi: f32) {
        // SAFETY: the loops are of a vector level the CPU supports (`binary_rows`)
        // and only iterate over the slices given.
        unsafe { (self.zip_fn)(o, a, b, lo, hi) }
    }

    /// `o[i] = clamp(op(a[i], y))`.
    fn b_one(&self, o: &mut [f32], a: &[f32], y: f32, lo: f32, hi: f32) {
        // SAFETY: as in `zip`.
        unsafe { (self.b_one_fn)(o, a, y, lo, hi) }
    }

    /// `o[i] = clamp(op(x, b[i]))`.
    fn a_one(&self, o: &mut [f32], x: f32, b: &[f32], lo: f32, hi: f32) {
        // SAFETY: as in `zip`.
        unsafe { (self.a_one_fn)(o, x, b, lo, hi) }
    }

    /// `zip` over each `b.len()` chunk of `o` and `a` against all of `b`.
    fn zip_repeat_b(&self, o: &mut [f32], a: &[f32], b: &[f32], lo: f32, hi: f32) {
        // SAFETY: as in `zip`.
        unsafe { (self.zip_repeat_b_fn)(o, a, b, lo, hi) }
    }
}

/// The row loops of [`BinaryRows`] as generic functions of one vector level.
macro_rules! binary_row_loops {
    ($(#[$m:meta])* mod $level:ident) => {
        mod $level {
            use super::BinaryOp;
            $(#[$m])*
            #[inline(never)]
            pub(super) unsafe fn zip<F: BinaryOp>(o: &mut [f32], a: &[f32], b: &[f32], lo: f32, hi: f32) {
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    *o = F::f(x, y).max(lo).min(hi);
                }
            }
            // Its own loop, not a call of `zip` per chunk: per-channel operands
            // (PRELU's alpha, a bias) repeat every few channels, where a call per
            // chunk made mediapipe's PRELU layers 50 % slower.
            $(#[$m])*
            #[inline(never)]
            pub(super) unsafe fn zip_repeat_b<F: BinaryOp>(o: &mut [f32], a: &[f32], b: &[f32], lo: f32, hi: f32) {
                for (oc, ac) in o.chunks_exact_mut(b.len()).zip(a.chunks_exact(b.len())) {
                    for ((o, &x), &y) in oc.iter_mut().zip(ac).zip(b) {
                        *o = F::f(x, y).max(lo).min(hi);
                    }
                }
            }
            $(#[$m])*
            #[inline(never)]
            pub(super) unsafe fn b_one<F: BinaryOp>(o: &mut [f32], a: &[f32], y: f32, lo: f32, hi: f32) {
                for (o, &x) in o.iter_mut().zip(a) {
                    *o = F::f(x, y).max(lo).min(hi);
                }
            }
            $(#[$m])*
            #[inline(never)]
            pub(super) unsafe fn a_one<F: BinaryOp>(o: &mut [f32], x: f32, b: &[f32], lo: f32, hi: f32) {
                for (o, &y) in o.iter_mut().zip(b) {
                    *o = F::f(x, y).max(lo).min(hi);
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
binary_row_loops!(#[target_feature(enable = "avx512f")] mod rows_avx512);
#[cfg(target_arch = "x86_64")]
binary_row_loops!(#[target_feature(enable = "avx2,fma")] mod rows_avx2);
binary_row_loops!(mod rows_base);

/// `F`'s row loops at the widest vector level the CPU has.
fn binary_rows<F: BinaryOp>() -> BinaryRows {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::level::has_avx512f() {
            return BinaryRows {
                zip_fn: rows_avx512::zip::<F>,
                b_one_fn: rows_avx512::b_one::<F>,
                a_one_fn: rows_avx512::a_one::<F>,
                zip_repeat_b_fn: rows_avx512::zip_repeat_b::<F>,
            };
        }
        if crate::level::has_avx2_fma() {
            return BinaryRows {
                zip_fn: rows_avx2::zip::<F>,
                b_one_fn: rows_avx2::b_one::<F>,
                a_one_fn: rows_avx2::a_one::<F>,
                zip_repeat_b_fn: rows_avx2::zip_repeat_b::<F>,
            };
        }
    }
    BinaryRows { zip_fn: rows_base::zip::<F>, b_one_fn: rows_base::b_one::<F>, a_one_fn: rows_base::a_one::<F>, zip_repeat_b_fn: rows_base::zip_repeat_b::<F> }
}

/// The vectorizable ops of [`binary_f32`]: the broadcast walk of [`binary`], once
/// for every op, over the op's row loops.
#[allow(clippy::too_many_arguments)]
fn binary_f32_simd(op: Binary, a: &[f32], a_shape: &[usize], b: &[f32], b_shape: &[usize], out: &mut [f32], out_shape: &[usize], clamp: crate::Clamp) {
    let rows = match op {
        Binary::Add => binary_rows::<OpAdd>(),
        Binary::Sub => binary_rows::<OpSub>(),
        Binary::Mul => binary_rows::<OpMul>(),
        Binary::Div => binary_rows::<OpDiv>(),
        Binary::Max => binary_rows::<OpMax>(),
        Binary::Min => binary_rows::<OpMin>(),
        Binary::SquaredDifference => binary_rows::<OpSquaredDifference>(),
        Binary::FloorDiv => binary_rows::<OpFloorDiv>(),
        Binary::Prelu => binary_rows::<OpPrelu>(),
        Binary::Pow | Binary::FloorMod => return binary_f32_scalar(op, a, a_shape, b, b_shape, out, out_shape, clamp),
    };
    broadcast_rows(&mut Clamped { rows, lo: clamp.min, hi: clamp.max }, a, a_shape, b, b_shape, out, out_shape);
}

/// An op's row loops at one vector level with the clamp of its fused activation.
struct Clamped {
    rows: BinaryRows,
    lo: f32,
    hi: f32,
}

impl RowOps<f32, f32, f32> for Clamped {
    fn zip(&mut self, o: &mut [f32], a: &[f32], b: &[f32]) {
        self.rows.zip(o, a, b, self.lo, self.hi)
    }
    fn b_one(&mut self, o: &mut [f32], a: &[f32], y: f32) {
        self.rows.b_one(o, a, y, self.lo, self.hi)
    }
    fn a_one(&mut self, o: &mut [f32], x: f32, b: &[f32]) {
        self.rows.a_one(o, x, b, self.lo, self.hi)
    }
    fn zip_repeat_b(&mut self, o: &mut [f32], a: &[f32], b: &[f32]) {
        self.rows.zip_repeat_b(o, a, b, self.lo, self.hi)
    }
}

/// Hard swish: `x * relu6(x + 3) / 6`.
#[inline]
pub fn hard_swish(x: f32) -> f32 {
    x * (x + 3.0).clamp(0.0, 6.0) / 6.0
}

/// GELU, exact (erf) or tanh approximation.
#[inline]
pub fn gelu(x: f32, approximate: bool) -> f32 {
    if approximate {
        0.5 * x * (1.0 + ((2.0f32 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    } else {
        0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
    }
}

/// Error function (Abramowitz–Stegun 7.1.26 refined with one Newton step is not
/// needed for float32 tolerance; this rational form has |err| < 1.5e-7).
pub fn erf(x: f32) -> f32 {
    let x64 = x as f64;
    let t = 1.0 / (1.0 + 0.3275911 * x64.abs());
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-x64 * x64).exp();
    (if x64 >= 0.0 { y } else { -y }) as f32
}

/// TFLite's ROUND: half away from zero is *not* used; it rounds half to even.
#[inline]
pub fn round_half_even(x: f32) -> f32 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// ADD_N: `out[i]` is the sum of `inputs[k][i]` over the inputs, added in input
/// order (the first input, then each next one added to the running sum, as
/// TFLite adds them); integers wrap.
pub fn add_n<T: crate::index::Accumulate>(inputs: &[&[T]], out: &mut [T]) {
    let Some((first, rest)) = inputs.split_first() else {
        out.fill(T::default());
        return;
    };
    out.copy_from_slice(&first[..out.len()]);
    for x in rest {
        for (o, &v) in out.iter_mut().zip(x.iter()) {
            *o = o.acc(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ADD_N against its definition: float sums in input order, integers wrapping.
    #[test]
    fn add_n_matches_definition() {
        let a = [1.5f32, -2.0, 1e8];
        let b = [0.25f32, 4.0, 1.0];
        let c = [-1.0f32, 0.5, -1e8];
        let mut out = [0.0f32; 3];
        add_n(&[&a, &b, &c], &mut out);
        // Input order: (1e8 + 1) rounds back to 1e8 before -1e8 is added.
        assert_eq!(out, [0.75, 2.5, 0.0]);
        let mut out = [0i32; 2];
        add_n(&[&[i32::MAX, 3][..], &[1, -5][..]], &mut out);
        assert_eq!(out, [i32::MIN, -2]);
        add_n::<i32>(&[&[4, 5][..]], &mut out);
        assert_eq!(out, [4, 5]);
    }

    #[test]
    fn logistic_and_tanh_saturate_without_denormals() {
        for &x in &[-1000.0f32, -88.0, -87.5, -87.0, -30.0, 0.0, 30.0, 87.5, 1000.0] {
            let l = logistic(x);
            let want = 1.0 / (1.0 + (-f64::from(x)).exp());
            assert!(l == 0.0 || l.is_normal(), "logistic({x}) = {l:e} is denormal");
            assert!((f64::from(l) - want).abs() < 1e-6, "logistic({x}) = {l} vs {want}");
            let t = tanh_fast(x);
            assert!((f64::from(t) - f64::from(x).tanh()).abs() < 1e-6, "tanh({x}) = {t}");
        }
    }

    #[test]
    fn fast_exp_of_nan_is_nan() {
        // The exponent of a NaN input once reached an unchecked float-to-int conversion.
        assert!(exp_fast(f32::NAN).is_nan());
        assert_eq!(exp_fast(f32::INFINITY), exp_fast(88.7));
        assert_eq!(exp_fast(f32::NEG_INFINITY), exp_fast(-87.0));
    }

    #[test]
    fn fast_exp_logistic_tanh_are_accurate() {
        let mut worst = (0.0f32, 0.0f32, 0.0f32);
        for i in -20000..=20000 {
            let x = i as f32 * 0.004;
            let e = (exp_fast(x) - x.exp()).abs() / x.exp();
            let l = (logistic(x) - 1.0 / (1.0 + (-x).exp())).abs();
            let t = (tanh_fast(x) - x.tanh()).abs();
            worst = (worst.0.max(e), worst.1.max(l), worst.2.max(t));
        }
        assert!(worst.0 < 5e-7 && worst.1 < 2e-7 && worst.2 < 5e-7, "{worst:?}");
        assert!(exp_fast(-200.0) < 1e-37);
        assert!(exp_fast(200.0) > 1e38);
    }

    #[test]
    fn broadcast_shapes() {
        assert_eq!(broadcast_shape(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shape(&[2, 3], &[4]), None);
    }

    /// Every broadcast form of `binary_f32` (flat, one-value operand, trailing
    /// operand, N-d rows with either operand broadcast in the last dim, rows of one)
    /// against the naive element loop, for each op and vector level, with odd lengths
    /// so the row loops' remainders run.
    #[test]
    fn binary_f32_forms_match_naive() {
        let ops = [
            Binary::Add,
            Binary::Sub,
            Binary::Mul,
            Binary::Div,
            Binary::Max,
            Binary::Min,
            Binary::SquaredDifference,
            Binary::FloorDiv,
            Binary::Prelu,
            Binary::Pow,
            Binary::FloorMod,
        ];
        let shapes: &[(&[usize], &[usize])] = &[
            (&[3, 37], &[3, 37]),
            (&[3, 37], &[1]),
            (&[1], &[2, 19]),
            (&[5, 3, 19], &[19]),
            (&[1, 19], &[5, 3, 19]),
            (&[2, 3, 21], &[2, 1, 1]),
            (&[2, 1, 1], &[2, 3, 21]),
            (&[2, 1, 35], &[1, 3, 35]),
            (&[4, 3, 1], &[1, 3, 1]),
        ];
        let naive = |op: Binary, x: f32, y: f32| -> f32 {
            match op {
                Binary::Add => x + y,
                Binary::Sub => x - y,
                Binary::Mul => x * y,
                Binary::Div => x / y,
                Binary::Max => x.max(y),
                Binary::Min => x.min(y),
                Binary::SquaredDifference => (x - y) * (x - y),
                Binary::FloorDiv => (x / y).floor(),
                Binary::Prelu => {
                    if x >= 0.0 {
                        x
                    } else {
                        x * y
                    }
                }
                Binary::Pow => x.powf(y),
                Binary::FloorMod => {
                    let r = x % y;
                    if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                        r + y
                    } else {
                        r
                    }
                }
            }
        };
        crate::level::each(|_| {
            for &(sa, sb) in shapes {
                let os = broadcast_shape(sa, sb).unwrap();
                let (na, nb): (usize, usize) = (sa.iter().product(), sb.iter().product());
                let a: Vec<f32> = (0..na).map(|i| ((i * 7 % 23) as f32 - 11.0) * 0.37).collect();
                let b: Vec<f32> = (0..nb).map(|i| ((i * 5 % 17) as f32 - 8.5) * 0.29).collect();
                let (stra, strb) = (broadcast_strides(sa, &os), broadcast_strides(sb, &os));
                let n: usize = os.iter().product();
                for op in ops {
                    let clamp = crate::Clamp { min: -4.0, max: 6.0 };
                    let mut out = vec![0.0; n];
                    binary_f32(op, &a, sa, &b, sb, &mut out, &os, clamp);
                    for (i, &got) in out.iter().enumerate() {
                        let (mut rem, mut ia, mut ib) = (i, 0, 0);
                        for d in (0..os.len()).rev() {
                            let k = rem % os[d];
                            rem /= os[d];
                            ia += k * stra[d];
                            ib += k * strb[d];
                        }
                        let want = naive(op, a[ia], b[ib]).max(clamp.min).min(clamp.max);
                        assert_eq!(got.to_bits(), want.to_bits(), "{op:?} {sa:?} {sb:?} at {i}");
                    }
                }
            }
        });
    }

    #[test]
    fn binary_broadcast_matches_naive() {
        crate::level::each(|_| {
            let (sa, sb) = ([2usize, 1, 3], [4usize, 1]);
            let os = broadcast_shape(&sa, &sb).unwrap();
            let a: Vec<f32> = (0..6).map(|v| v as f32).collect();
            let b: Vec<f32> = (0..4).map(|v| (v * 10) as f32).collect();
            let mut out = vec![0.0; 24];
            binary(&a, &sa, &b, &sb, &mut out, &os, |x, y| x + y);
            for i in 0..2 {
                for j in 0..4 {
                    for k in 0..3 {
                        assert_eq!(out[(i * 4 + j) * 3 + k], a[i * 3 + k] + b[j]);
                    }
                }
            }
        });
    }
}

simd_fn! {
    /// PRELU in place over rows of `alpha.len()` channels: `x < 0 ? x * alpha : x`.
    pub fn prelu_rows(x: &mut [f32], alpha: &[f32]) {
        if alpha.is_empty() {
            return;
        }
        for row in x.chunks_exact_mut(alpha.len()) {
            for (v, &a) in row.iter_mut().zip(alpha) {
                *v = if *v < 0.0 { *v * a } else { *v };
            }
        }
    }
}

simd_fn! {
    /// `x = clamp(x + y)` in place.
    pub fn add_clamp(x: &mut [f32], y: &[f32], clamp: crate::Clamp) {
        for (v, &w) in x.iter_mut().zip(y) {
            *v = (*v + w).max(clamp.min).min(clamp.max);
        }
    }
}

/// Element-wise int32 / int64 binary ops with LiteRT's integer semantics: wrapping
/// arithmetic, division truncating toward zero, FLOOR_DIV as the floor of the
/// double-precision quotient, FLOOR_MOD with the divisor's sign, POW by repeated
/// wrapping multiplication (0 for a negative exponent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntBinary {
    /// `x + y`.
    Add,
    /// `x - y`.
    Sub,
    /// `x * y`.
    Mul,
    /// `x / y`.
    Div,
    /// `max(x, y)`.
    Max,
    /// `min(x, y)`.
    Min,
    /// `(x - y)^2`.
    SquaredDifference,
    /// `floor(x / y)`.
    FloorDiv,
    /// `x - floor(x / y) * y`.
    FloorMod,
    /// `x^y`.
    Pow,
}

impl IntBinary {
    /// The op on one pair: None for a division by zero.
    pub fn function(self) -> fn(i64, i64) -> Option<i64> {
        match self {
            IntBinary::Add => |x, y| Some(x.wrapping_add(y)),
            IntBinary::Sub => |x, y| Some(x.wrapping_sub(y)),
            IntBinary::Mul => |x, y| Some(x.wrapping_mul(y)),
            IntBinary::Div => |x, y| x.checked_div(y),
            IntBinary::Max => |x, y| Some(x.max(y)),
            IntBinary::Min => |x, y| Some(x.min(y)),
            IntBinary::SquaredDifference => |x, y| Some((x - y).wrapping_mul(x - y)),
            IntBinary::FloorDiv => |x, y| x.checked_div_euclid(y).map(|_| (x as f64 / y as f64).floor() as i64),
            IntBinary::FloorMod => |x, y| x.checked_rem(y).map(|r| if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r }),
            IntBinary::Pow => |x, y| Some(if y < 0 { 0 } else { x.wrapping_pow(y.min(u32::MAX as i64) as u32) }),
        }
    }
}

macro_rules! int_binary {
    ($name:ident, $t:ty) => {
        /// [`IntBinary`] with broadcasting, each result clamped to `[lo, hi]` (a
        /// fused RELU / RELU6) then narrowed. False when a division by zero was met
        /// (that element is 0).
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            op: IntBinary,
            a: &[$t],
            a_shape: &[usize],
            b: &[$t],
            b_shape: &[usize],
            out: &mut [$t],
            out_shape: &[usize],
            (lo, hi): (i64, i64),
        ) -> bool {
            let f = op.function();
            let mut failed = false;
            binary(a, a_shape, b, b_shape, out, out_shape, |x, y| match f(x as i64, y as i64) {
                Some(v) => v.clamp(lo, hi) as $t,
                None => {
                    failed = true;
                    0
                }
            });
            !failed
        }
    };
}
int_binary!(binary_i32, i32);
int_binary!(binary_i64, i64);

/// Element-wise int32 unary ops: wrapping ABS, NEG and SQUARE, RELU, SIGN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntUnary {
    /// `|x|` (wrapping at the minimum).
    Abs,
    /// `-x` (wrapping).
    Neg,
    /// `x * x` (wrapping).
    Square,
    /// `max(x, 0)`.
    Relu,
    /// -1, 0 or 1.
    Sign,
}

/// [`IntUnary`] over a slice.
pub fn unary_i32(op: IntUnary, x: &[i32], out: &mut [i32]) {
    let f: fn(i32) -> i32 = match op {
        IntUnary::Abs => i32::wrapping_abs,
        IntUnary::Neg => i32::wrapping_neg,
        IntUnary::Square => |v| v.wrapping_mul(v),
        IntUnary::Relu => |v| v.max(0),
        IntUnary::Sign => i32::signum,
    };
    for (o, &i) in out.iter_mut().zip(x) {
        *o = f(i);
    }
}

#[cfg(test)]
mod int_tests {
    use super::*;
    use crate::testutil::{broadcast_index, broadcast_shapes, Rng};

    /// The ops from their definitions in 128-bit arithmetic, wrapped to 64 bits.
    fn reference(op: IntBinary, x: i64, y: i64) -> Option<i64> {
        let (a, b) = (i128::from(x), i128::from(y));
        let floor_div = |a: i128, b: i128| a.div_euclid(b) - i128::from(b < 0 && a.rem_euclid(b) != 0);
        Some(match op {
            IntBinary::Add => (a + b) as i64,
            IntBinary::Sub => (a - b) as i64,
            IntBinary::Mul => (a * b) as i64,
            IntBinary::Div if b == 0 => return None,
            IntBinary::Div => (a / b) as i64,
            IntBinary::Max => x.max(y),
            IntBinary::Min => x.min(y),
            IntBinary::SquaredDifference => ((a - b) * (a - b)) as i64,
            IntBinary::FloorDiv | IntBinary::FloorMod if b == 0 => return None,
            IntBinary::FloorDiv => floor_div(a, b) as i64,
            IntBinary::FloorMod => (a - floor_div(a, b) * b) as i64,
            IntBinary::Pow if y < 0 => 0,
            IntBinary::Pow => (0..y).fold(1i64, |p, _| p.wrapping_mul(x)),
        })
    }

    const OPS: [IntBinary; 10] = [
        IntBinary::Add,
        IntBinary::Sub,
        IntBinary::Mul,
        IntBinary::Div,
        IntBinary::Max,
        IntBinary::Min,
        IntBinary::SquaredDifference,
        IntBinary::FloorDiv,
        IntBinary::FloorMod,
        IntBinary::Pow,
    ];

    #[test]
    fn integer_binary_ops_match_the_definition() {
        let mut rng = Rng::new(81);
        for round in 0..600 {
            let op = OPS[rng.size(0, OPS.len() - 1)];
            let (sa, sb, os) = broadcast_shapes(&mut rng);
            // Values where the double-precision FLOOR_DIV is exact (|x| < 2^52),
            // small ones (and small exponents for POW), and zeros.
            let wide = rng.one_in(2);
            let value = |rng: &mut Rng| match rng.bits() % 6 {
                0 => 0,
                1 if op != IntBinary::Pow => rng.range(-(1 << 50), 1 << 50),
                _ => rng.range(-40, 40),
            };
            let a: Vec<i64> = (0..sa.iter().product::<usize>()).map(|_| value(&mut rng)).collect();
            let b: Vec<i64> = (0..sb.iter().product::<usize>()).map(|_| value(&mut rng)).collect();
            let range = [(i64::MIN, i64::MAX), (0, i64::MAX), (0, 6)][rng.size(0, 2)];
            let n: usize = os.iter().product();
            let want: Vec<Option<i64>> =
                (0..n).map(|i| reference(op, a[broadcast_index(&os, &sa, i)], b[broadcast_index(&os, &sb, i)]).map(|v| v.clamp(range.0, range.1))).collect();
            let ok = want.iter().all(Option::is_some);
            if wide {
                let mut got = vec![7i64; n];
                assert_eq!(binary_i64(op, &a, &sa, &b, &sb, &mut got, &os, range), ok, "round {round} {op:?}");
                for (i, (&g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g, w.unwrap_or(0), "round {round} {op:?} {sa:?} {sb:?} element {i}");
                }
            } else {
                let (a32, b32): (Vec<i32>, Vec<i32>) = (a.iter().map(|&v| v as i32).collect(), b.iter().map(|&v| v as i32).collect());
                let want: Vec<Option<i64>> = (0..n)
                    .map(|i| {
                        reference(op, i64::from(a32[broadcast_index(&os, &sa, i)]), i64::from(b32[broadcast_index(&os, &sb, i)]))
                            .map(|v| v.clamp(range.0, range.1))
                    })
                    .collect();
                let ok = want.iter().all(Option::is_some);
                let mut got = vec![7i32; n];
                assert_eq!(binary_i32(op, &a32, &sa, &b32, &sb, &mut got, &os, range), ok, "round {round} {op:?}");
                for (i, (&g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g, w.unwrap_or(0) as i32, "round {round} {op:?} {sa:?} {sb:?} element {i}");
                }
            }
        }
    }

    #[test]
    fn integer_unary_ops_match_the_definition() {
        let mut rng = Rng::new(82);
        let mut x: Vec<i32> = (0..5000).map(|_| rng.bits() as i32).collect();
        x.extend([i32::MIN, i32::MIN + 1, -1, 0, 1, i32::MAX, 46341, -46341]);
        for op in [IntUnary::Abs, IntUnary::Neg, IntUnary::Square, IntUnary::Relu, IntUnary::Sign] {
            let mut got = vec![0i32; x.len()];
            unary_i32(op, &x, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let a = i128::from(v);
                let want = match op {
                    IntUnary::Abs => a.abs(),
                    IntUnary::Neg => -a,
                    IntUnary::Square => a * a,
                    IntUnary::Relu => a.max(0),
                    IntUnary::Sign => a.signum(),
                } as i32;
                assert_eq!(g, want, "{op:?} {v}");
            }
        }
    }
}

/// Integers the bitwise ops (RIGHT_SHIFT, BITWISE_XOR) take.
pub trait BitInt: Copy + std::ops::BitXor<Output = Self> {
    /// `self >> by` with the shift amount clamped to `0 ..= bits - 1`, as LiteRT
    /// clamps it (a negative amount shifts by 0, one of the type's width or more
    /// by width - 1), so every amount is defined: arithmetic for signed types,
    /// logical for unsigned ones.
    fn shr_clamped(self, by: Self) -> Self;
}

macro_rules! bit_int {
    ($($t:ty),*) => {$(
        impl BitInt for $t {
            #[allow(unused_comparisons)]
            fn shr_clamped(self, by: $t) -> $t {
                let max = (<$t>::BITS - 1) as $t;
                let s = if by < 0 { 0 } else if by > max { max } else { by };
                self >> s
            }
        }
    )*};
}
bit_int!(i8, u8, i16, u16, i32, u32);

/// RIGHT_SHIFT with broadcasting ([`BitInt::shr_clamped`]).
pub fn right_shift<T: BitInt>(a: &[T], a_shape: &[usize], b: &[T], b_shape: &[usize], out: &mut [T], out_shape: &[usize]) {
    binary(a, a_shape, b, b_shape, out, out_shape, T::shr_clamped);
}

/// BITWISE_XOR with broadcasting.
pub fn bitwise_xor<T: BitInt>(a: &[T], a_shape: &[usize], b: &[T], b_shape: &[usize], out: &mut [T], out_shape: &[usize]) {
    binary(a, a_shape, b, b_shape, out, out_shape, |x, y| x ^ y);
}

#[cfg(test)]
mod bit_tests {
    use super::*;

    #[test]
    fn shifts_clamp_their_amount() {
        assert_eq!((-128i8).shr_clamped(3), -16);
        assert_eq!((-128i8).shr_clamped(100), -1);
        assert_eq!(100i8.shr_clamped(-5), 100);
        assert_eq!(200u8.shr_clamped(9), 1);
        assert_eq!(u32::MAX.shr_clamped(40), 1);
        assert_eq!((-7i32).shr_clamped(1), -4);
        let mut out = vec![0i16; 6];
        right_shift(&[64, -64, 7, 8, 9, 10], &[2, 3], &[1, 2, 3], &[3], &mut out, &[2, 3]);
        assert_eq!(out, [32, -16, 0, 4, 2, 1]);
        bitwise_xor(&[1, 2, 3, 4, 5, 6], &[2, 3], &[3], &[1], &mut out, &[2, 3]);
        assert_eq!(out, [2, 1, 0, 7, 6, 5]);
    }
}
