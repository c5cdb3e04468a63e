//! Kernels of the ops the StableHLO legalization emits: the element-wise
//! STABLEHLO_ADD/MULTIPLY/MAXIMUM/MINIMUM/AND (equal shapes, no broadcasting),
//! STABLEHLO_PAD and DILATE (edge and interior padding, one kernel), and the window
//! reductions of REDUCE_WINDOW. Values are combined as LiteRT's kernels combine
//! them: integers wrap (int8 is a plain integer here, its quantization ignored),
//! maximum and minimum keep the first operand unless the second compares greater
//! (smaller), so a NaN first operand wins and a NaN second one loses.

/// How two values combine: the element-wise ops and the window reductions' bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Sum.
    Add,
    /// Product.
    Mul,
    /// Larger value.
    Max,
    /// Smaller value.
    Min,
    /// Bitwise and (integers and booleans only).
    And,
    /// Both non-zero, as 1 or 0.
    All,
    /// Either non-zero, as 1 or 0.
    Any,
}

impl Combine {
    /// REDUCE_WINDOW's `reduce_function` code (the schema's ReduceWindowFunction:
    /// 1 add, 2 mul, 3 minimum, 4 maximum, 5 all, 6 any); `None` for UNSUPPORTED (0)
    /// and unknown codes, which LiteRT refuses too.
    pub fn of_reduce_function(code: i32) -> Option<Self> {
        Some(match code {
            1 => Combine::Add,
            2 => Combine::Mul,
            3 => Combine::Min,
            4 => Combine::Max,
            5 => Combine::All,
            6 => Combine::Any,
            _ => return None,
        })
    }
}

/// An element type the StableHLO kernels compute on.
pub trait HloElem: Copy + PartialOrd {
    /// Sum (wrapping for integers).
    fn add(self, other: Self) -> Self;
    /// Product (wrapping for integers).
    fn mul(self, other: Self) -> Self;
    /// Bitwise and; floats are never given to it (the builders refuse them).
    fn bitand(self, other: Self) -> Self;
    /// True when non-zero.
    fn truth(self) -> bool;
    /// 1 or 0.
    fn of_truth(t: bool) -> Self;

    /// `self` combined with `other` by `c`.
    #[inline]
    fn combine(self, c: Combine, other: Self) -> Self {
        match c {
            Combine::Add => self.add(other),
            Combine::Mul => self.mul(other),
            Combine::Max => {
                if self < other {
                    other
                } else {
                    self
                }
            }
            Combine::Min => {
                if other < self {
                    other
                } else {
                    self
                }
            }
            Combine::And => self.bitand(other),
            Combine::All => Self::of_truth(self.truth() && other.truth()),
            Combine::Any => Self::of_truth(self.truth() || other.truth()),
        }
    }
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl HloElem for $t {
            #[inline]
            fn add(self, other: Self) -> Self { self.wrapping_add(other) }
            #[inline]
            fn mul(self, other: Self) -> Self { self.wrapping_mul(other) }
            #[inline]
            fn bitand(self, other: Self) -> Self { self & other }
            #[inline]
            fn truth(self) -> bool { self != 0 }
            #[inline]
            fn of_truth(t: bool) -> Self { Self::from(t) }
        }
    )*};
}
int_elem!(i8, u8, i16, i32, i64);

impl HloElem for f32 {
    #[inline]
    fn add(self, other: Self) -> Self {
        self + other
    }
    #[inline]
    fn mul(self, other: Self) -> Self {
        self * other
    }
    #[inline]
    fn bitand(self, other: Self) -> Self {
        f32::from_bits(self.to_bits() & other.to_bits())
    }
    #[inline]
    fn truth(self) -> bool {
        self != 0.0
    }
    #[inline]
    fn of_truth(t: bool) -> Self {
        f32::from(u8::from(t))
    }
}

/// Booleans (one byte, 0 or 1) combine as logic: sum is "or", product "and".
/// Returns the combination to apply to their bytes as `u8`.
pub fn bool_combine(c: Combine) -> Combine {
    match c {
        Combine::Add | Combine::Any => Combine::Any,
        Combine::Mul | Combine::And | Combine::All => Combine::All,
        c => c,
    }
}

/// `out[i] = a[i] c b[i]` over equal-length slices (the shortest bounds the loop).
pub fn binary<T: HloElem>(c: Combine, a: &[T], b: &[T], out: &mut [T]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x.combine(c, y);
    }
}

/// Shape of `shape` padded by `low`/`high` at the edges (negative crops) and
/// `interior` between elements: `low + high + d + (d - 1) * interior` per dimension
/// (`low + high` for an empty one). `None` when a dimension would be negative or
/// the lists do not have one entry per dimension.
pub fn pad_shape(shape: &[usize], low: &[i64], high: &[i64], interior: &[usize]) -> Option<Vec<usize>> {
    if low.len() != shape.len() || high.len() != shape.len() || interior.len() != shape.len() {
        return None;
    }
    shape
        .iter()
        .zip(low.iter().zip(high))
        .zip(interior)
        .map(|((&d, (&lo, &hi)), &it)| {
            let d = i64::try_from(d).ok()?;
            let inner = d.checked_add(d.saturating_sub(1).max(0).checked_mul(i64::try_from(it).ok()?)?)?;
            let n = inner.checked_add(lo)?.checked_add(hi)?;
            usize::try_from(n).ok()
        })
        .collect()
}

/// Pads `x` (of `shape`) into `out` (of `out_shape`, from [`pad_shape`]): every output
/// element is `value` except those that input elements land on, input index `i` of
/// a dimension landing on `low + i * (interior + 1)`; landings outside the output
/// (negative padding) are dropped.
pub fn pad<T: Copy>(x: &[T], shape: &[usize], low: &[i64], interior: &[usize], value: T, out_shape: &[usize], out: &mut [T]) {
    out.fill(value);
    let r = shape.len();
    if x.is_empty() || out.is_empty() || r != out_shape.len() || low.len() != r || interior.len() != r {
        if r == 0 {
            if let (Some(o), Some(&v)) = (out.first_mut(), x.first()) {
                *o = v;
            }
        }
        return;
    }
    let mut out_strides = vec![1usize; r];
    for d in (0..r.saturating_sub(1)).rev() {
        out_strides[d] = out_strides[d + 1] * out_shape[d + 1];
    }
    // Per dimension, the output offset each input index lands on (None when outside).
    let landings: Vec<Vec<Option<usize>>> = (0..r)
        .map(|d| {
            (0..shape[d])
                .map(|i| {
                    let at = low[d] + (i as i64) * (interior[d] as i64 + 1);
                    (at >= 0 && (at as usize) < out_shape[d]).then(|| at as usize * out_strides[d])
                })
                .collect()
        })
        .collect();
    let mut idx = vec![0usize; r];
    for &v in x {
        if let Some(off) = idx.iter().enumerate().try_fold(0usize, |acc, (d, &i)| landings[d][i].map(|o| acc + o)) {
            if let Some(o) = out.get_mut(off) {
                *o = v;
            }
        }
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Output shape of a window reduction with no padding: per dimension the number of
/// window positions, `(d - ((w - 1) * dilation + 1)) / stride + 1`, or 0 when the
/// dilated window is larger than the input. `None` for a zero window size, stride
/// or dilation, or lists without one entry per dimension.
pub fn window_shape(shape: &[usize], window: &[usize], strides: &[usize], dilations: &[usize]) -> Option<Vec<usize>> {
    let r = shape.len();
    if window.len() != r || strides.len() != r || dilations.len() != r {
        return None;
    }
    (0..r)
        .map(|d| {
            if window[d] == 0 || strides[d] == 0 || dilations[d] == 0 {
                return None;
            }
            let span = (window[d] - 1).checked_mul(dilations[d])?.checked_add(1)?;
            Some(if shape[d] < span { 0 } else { (shape[d] - span) / strides[d] + 1 })
        })
        .collect()
}

/// Window reduction: each output element combines `init` with the input elements
/// of its window, in row-major window order. `out_shape` comes from [`window_shape`].
#[allow(clippy::too_many_arguments)]
pub fn reduce_window<T: HloElem>(
    c: Combine,
    x: &[T],
    shape: &[usize],
    init: T,
    window: &[usize],
    strides: &[usize],
    dilations: &[usize],
    out_shape: &[usize],
    out: &mut [T],
) {
    let r = shape.len();
    let mut in_strides = vec![1usize; r];
    for d in (0..r.saturating_sub(1)).rev() {
        in_strides[d] = in_strides[d + 1] * shape[d + 1];
    }
    // Offsets of the window's elements from its first one, in row-major window order.
    let mut taps = vec![0usize];
    for d in 0..r {
        let step = dilations[d] * in_strides[d];
        taps = taps.iter().flat_map(|&t| (0..window[d]).map(move |k| t + k * step)).collect();
    }
    let mut idx = vec![0usize; r];
    for o in out.iter_mut() {
        let base: usize = (0..r).map(|d| idx[d] * strides[d] * in_strides[d]).sum();
        let mut acc = init;
        for &t in &taps {
            if let Some(&v) = x.get(base + t) {
                acc = acc.combine(c, v);
            }
        }
        *o = acc;
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// Row-major index of `idx` in `shape`.
    fn flat(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
    }

    /// Every index of `shape`, row-major.
    fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
        let mut all = vec![vec![]];
        for &d in shape {
            all = all.into_iter().flat_map(|p: Vec<usize>| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
        }
        all
    }

    #[test]
    fn combine_follows_litert() {
        assert_eq!(100i8.combine(Combine::Add, 100), -56);
        assert_eq!(200u8.combine(Combine::Mul, 2), 144);
        assert_eq!(6i32.combine(Combine::And, 3), 2);
        assert!(f32::NAN.combine(Combine::Max, 1.0).is_nan());
        assert_eq!(1.0f32.combine(Combine::Max, f32::NAN), 1.0);
        assert_eq!(1.0f32.combine(Combine::Min, f32::NAN), 1.0);
        assert_eq!((-0.0f32).combine(Combine::Max, 0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(0.5f32.combine(Combine::All, 2.0), 1.0);
        assert_eq!(0.0f32.combine(Combine::Any, 0.0), 0.0);
        assert_eq!(bool_combine(Combine::Add), Combine::Any);
        assert_eq!(1u8.combine(bool_combine(Combine::Mul), 0), 0);
    }

    /// Padding against its definition: output index `o` of a dimension holds input
    /// index `i` when `o = low + i * (interior + 1)`.
    #[test]
    fn pad_matches_definition() {
        let mut rng = Rng::new(7);
        for _ in 0..300 {
            let r = rng.size(0, 3) + 1;
            let shape: Vec<usize> = (0..r).map(|_| rng.size(0, 3)).collect();
            let interior: Vec<usize> = (0..r).map(|_| rng.size(0, 2)).collect();
            let low: Vec<i64> = (0..r).map(|_| rng.size(0, 6) as i64 - 3).collect();
            let high: Vec<i64> = (0..r).map(|_| rng.size(0, 6) as i64 - 3).collect();
            let Some(out_shape) = pad_shape(&shape, &low, &high, &interior) else { continue };
            let x: Vec<i32> = (0..shape.iter().product::<usize>()).map(|i| i as i32 + 1).collect();
            let mut out = vec![0i32; out_shape.iter().product()];
            pad(&x, &shape, &low, &interior, -7, &out_shape, &mut out);
            for o in indices(&out_shape) {
                let src: Option<Vec<usize>> = (0..r)
                    .map(|d| {
                        let rel = o[d] as i64 - low[d];
                        let step = interior[d] as i64 + 1;
                        (rel >= 0 && rel % step == 0 && rel / step < shape[d] as i64).then_some((rel / step) as usize)
                    })
                    .collect();
                let want = src.map_or(-7, |i| x[flat(&i, &shape)]);
                assert_eq!(out[flat(&o, &out_shape)], want, "shape {shape:?} low {low:?} high {high:?} interior {interior:?} at {o:?}");
            }
        }
        assert_eq!(pad_shape(&[2], &[-3], &[0], &[0]), None);
        assert_eq!(pad_shape(&[0, 3], &[1, 0], &[1, 0], &[2, 1]), Some(vec![2, 5]));
    }

    #[test]
    fn reduce_window_matches_definition() {
        let mut rng = Rng::new(11);
        for case in 0..300 {
            let r = rng.size(0, 2) + 1;
            let shape: Vec<usize> = (0..r).map(|_| rng.size(0, 5) + 1).collect();
            let window: Vec<usize> = (0..r).map(|_| rng.size(0, 2) + 1).collect();
            let strides: Vec<usize> = (0..r).map(|_| rng.size(0, 2) + 1).collect();
            let dil: Vec<usize> = (0..r).map(|_| rng.size(0, 1) + 1).collect();
            let out_shape = window_shape(&shape, &window, &strides, &dil).expect("valid window");
            let x: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| rng.size(0, 18) as i32 - 9).collect();
            let c = [Combine::Add, Combine::Mul, Combine::Max, Combine::Min, Combine::All, Combine::Any][case % 6];
            let mut out = vec![0i32; out_shape.iter().product()];
            reduce_window(c, &x, &shape, 1, &window, &strides, &dil, &out_shape, &mut out);
            for o in indices(&out_shape) {
                let mut acc = 1i32;
                for w in indices(&window) {
                    let at: Vec<usize> = (0..r).map(|d| o[d] * strides[d] + w[d] * dil[d]).collect();
                    acc = acc.combine(c, x[flat(&at, &shape)]);
                }
                assert_eq!(out[flat(&o, &out_shape)], acc, "{c:?} shape {shape:?} window {window:?} strides {strides:?} dilations {dil:?}");
            }
        }
        assert_eq!(window_shape(&[3], &[5], &[1], &[1]), Some(vec![0]));
        assert_eq!(window_shape(&[3], &[1], &[0], &[1]), None);
    }

    #[test]
    fn binary_is_elementwise() {
        let mut out = [0i16; 3];
        binary(Combine::Min, &[3, -4, 5], &[1, 2, 5], &mut out);
        assert_eq!(out, [1, -4, 5]);
    }
}
