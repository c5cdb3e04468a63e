//! Backward kernels for training, float32: given what the forward pass read and
//! produced and the gradient `dy` of its output, each writes (overwrites) the
//! gradients of its inputs (`dx`) and weights (`dw`, `db`). Plus the losses,
//! the categorical accuracy and the optimizer updates of a training step.
//!
//! Convention (every backward kernel follows it): one `pub fn` per op, taking the
//! forward kernel's own parameters, the forward tensors it needs, `dy`, and the
//! gradient slices to write, each `Option` so that a caller asks only for the
//! gradients it needs. Gradients are overwritten, never accumulated: the training
//! graph sums the contributions of a tensor read by several ops itself.
//!
//! Determinism: work is split by output element (rows of `dx`, rows of `dw`), each
//! element summed in one fixed order by one thread, so results are identical for
//! any thread count. Reductions over broadcast dimensions run on one thread.

use std::ops::Range;
use std::sync::Mutex;

use crate::parallel::ThreadPool;
use crate::{strides, Clamp, MAX_DIMS};

// Backward kernels of the convolutions, pooling, BATCH_MATMUL, data movement and
// resizing, one file per family.
#[cfg(test)]
mod check;
pub mod conv;
pub mod matmul;
pub mod movement;
pub mod pool;
pub mod resize;
mod split;

/// Multiply-adds below which a kernel stays on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 15;
/// Most chunks one parallel region splits its output into.
const MAX_PARTS: usize = 16;

/// Calls `f(rows, chunk)` over `out` split into contiguous chunks of whole rows
/// of `row_len`, on the pool when the work is large enough. The split depends on
/// the thread count, the result does not: each row is written by one call.
pub fn for_rows(pool: Option<&ThreadPool>, work: usize, out: &mut [f32], row_len: usize, f: &(dyn Fn(Range<usize>, &mut [f32]) + Sync)) {
    let rows = out.len().checked_div(row_len).unwrap_or(0);
    let parts = match pool {
        Some(p) if work >= PARALLEL_MIN_WORK => p.threads().min(rows).min(MAX_PARTS),
        _ => 1,
    };
    let Some(p) = pool.filter(|_| parts > 1) else {
        f(0..rows, out);
        return;
    };
    // Fixed-size array of pieces: no allocation per call.
    let mut pieces: [Mutex<&mut [f32]>; MAX_PARTS] = std::array::from_fn(|_| Mutex::new(&mut [][..]));
    let mut rest = out;
    for (i, piece) in pieces.iter_mut().enumerate().take(parts) {
        let len = (crate::parallel::chunk(rows, parts, i).len() * row_len).min(rest.len());
        let (a, b) = std::mem::take(&mut rest).split_at_mut(len);
        *piece = Mutex::new(a);
        rest = b;
    }
    p.run(parts, &|i| {
        let mut o = pieces[i].lock().unwrap_or_else(|e| e.into_inner());
        f(crate::parallel::chunk(rows, parts, i), &mut o);
    });
}

#[inline]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

simd_fn! {
    /// `dx[r] = sum_o dy[r, o] * w[o]` over rows `rows` of a fully-connected input
    /// gradient (the body of [`fully_connected`]'s `dx`).
    fn fc_dx_rows(w: &[f32], dy: &[f32], in_n: usize, out_n: usize, rows: Range<usize>, dx: &mut [f32]) {
        for (r, dxr) in rows.zip(dx.chunks_exact_mut(in_n)) {
            dxr.fill(0.0);
            for o in 0..out_n {
                let g = dy[r * out_n + o];
                if g != 0.0 {
                    axpy(dxr, g, &w[o * in_n..][..in_n]);
                }
            }
        }
    }
}

simd_fn! {
    /// `dw[o] = sum_b dy[b, o] * x[b]` for output rows `rows` (the body of
    /// [`fully_connected`]'s `dw`).
    fn fc_dw_rows(x: &[f32], dy: &[f32], batch: usize, in_n: usize, out_n: usize, rows: Range<usize>, dw: &mut [f32]) {
        for (o, dwr) in rows.zip(dw.chunks_exact_mut(in_n)) {
            dwr.fill(0.0);
            for b in 0..batch {
                let g = dy[b * out_n + o];
                if g != 0.0 {
                    axpy(dwr, g, &x[b * in_n..][..in_n]);
                }
            }
        }
    }
}

/// FULLY_CONNECTED backward for `y[b, o] = sum_i x[b, i] * w[o, i] + bias[o]`
/// (`x` as `batch` rows of `in_n`, `w` as `[out_n, in_n]`): `dx = dy · w`,
/// `dw = dyᵀ · x`, `db = sum_b dy`. `dy` is the gradient before any fused
/// activation (the caller applies [`clamp`] first).
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    (batch, in_n, out_n): (usize, usize, usize),
    dx: Option<&mut [f32]>,
    dw: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
    pool: Option<&ThreadPool>,
) {
    let work = batch * in_n * out_n;
    if let Some(dx) = dx {
        let dx = &mut dx[..batch * in_n];
        for_rows(pool, work, dx, in_n, &|rows, out| fc_dx_rows(w, dy, in_n, out_n, rows, out));
    }
    if let Some(dw) = dw {
        let dw = &mut dw[..out_n * in_n];
        for_rows(pool, work, dw, in_n, &|rows, out| fc_dw_rows(x, dy, batch, in_n, out_n, rows, out));
    }
    if let Some(db) = db {
        for (o, d) in db.iter_mut().enumerate().take(out_n) {
            *d = (0..batch).map(|b| dy[b * out_n + o]).fold(0.0, |s, v| s + v);
        }
    }
}

simd_fn! {
    /// Backward of a fused activation that clamps (RELU, RELU6, RELU_N1_TO_1, NONE),
    /// from the op's output `y`: the gradient passes where the clamp did not bind.
    /// `dx` may be `dy` itself (pass the same slice through [`clamp_in_place`]).
    pub fn clamp(c: Clamp, y: &[f32], dy: &[f32], dx: &mut [f32]) {
        for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(y) {
            *d = if v > c.min && v < c.max { g } else { 0.0 };
        }
    }
}

/// [`clamp`] in place on `d` (the gradient of `y`).
pub fn clamp_in_place(c: Clamp, y: &[f32], d: &mut [f32]) {
    if c == Clamp::NONE {
        return;
    }
    for (g, &v) in d.iter_mut().zip(y) {
        if !(v > c.min && v < c.max) {
            *g = 0.0;
        }
    }
}

/// Element-wise activations with a backward kernel ([`unary`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryGrad {
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `min(max(x, -1), 1)`.
    ReluN1To1,
    /// `min(max(x, 0), 1)`.
    Relu0To1,
    /// `x > 0 ? x : alpha * x`.
    LeakyRelu(f32),
    /// `x * relu6(x + 3) / 6`.
    HardSwish,
    /// `1 / (1 + exp(-x))` (LOGISTIC).
    Logistic,
    /// `tanh(x)`.
    Tanh,
    /// GELU, exact (erf) or with the tanh approximation.
    Gelu {
        /// The tanh approximation.
        approximate: bool,
    },
}

/// Derivative of GELU at `x`.
fn gelu_derivative(x: f32, approximate: bool) -> f32 {
    let x = f64::from(x);
    let d = if approximate {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let u = k * (x + 0.044715 * x * x * x);
        let t = u.tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x)
    } else {
        let cdf = 0.5 * (1.0 + f64::from(crate::elementwise::erf((x / std::f64::consts::SQRT_2) as f32)));
        let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        cdf + x * pdf
    };
    d as f32
}

/// Backward of an element-wise activation: `dx = f'(x) * dy`, from the forward
/// input `x` or output `y` (whichever the derivative is cheaper from; both are
/// passed so callers need not know).
pub fn unary(op: UnaryGrad, x: &[f32], y: &[f32], dy: &[f32], dx: &mut [f32], pool: Option<&ThreadPool>) {
    let n = dx.len();
    for_rows(pool, n * 8, dx, 1, &|rows, out| {
        let (x, y, dy) = (&x[rows.clone()], &y[rows.clone()], &dy[rows]);
        let pass = |lo: f32, hi: f32, out: &mut [f32]| {
            for ((d, &g), &v) in out.iter_mut().zip(dy).zip(x) {
                *d = if v > lo && v < hi { g } else { 0.0 };
            }
        };
        match op {
            UnaryGrad::Relu => pass(0.0, f32::INFINITY, out),
            UnaryGrad::Relu6 => pass(0.0, 6.0, out),
            UnaryGrad::ReluN1To1 => pass(-1.0, 1.0, out),
            UnaryGrad::Relu0To1 => pass(0.0, 1.0, out),
            UnaryGrad::LeakyRelu(alpha) => {
                for ((d, &g), &v) in out.iter_mut().zip(dy).zip(x) {
                    *d = if v > 0.0 { g } else { alpha * g };
                }
            }
            UnaryGrad::HardSwish => {
                for ((d, &g), &v) in out.iter_mut().zip(dy).zip(x) {
                    *d = g * if v < -3.0 {
                        0.0
                    } else if v > 3.0 {
                        1.0
                    } else {
                        (2.0 * v + 3.0) / 6.0
                    };
                }
            }
            UnaryGrad::Logistic => {
                for ((d, &g), &s) in out.iter_mut().zip(dy).zip(y) {
                    *d = g * s * (1.0 - s);
                }
            }
            UnaryGrad::Tanh => {
                for ((d, &g), &t) in out.iter_mut().zip(dy).zip(y) {
                    *d = g * (1.0 - t * t);
                }
            }
            UnaryGrad::Gelu { approximate } => {
                for ((d, &g), &v) in out.iter_mut().zip(dy).zip(x) {
                    *d = g * gelu_derivative(v, approximate);
                }
            }
        }
    });
}

/// Pads `shape` on the left with 1s to `rank` dims.
fn padded(shape: &[usize], rank: usize) -> [usize; MAX_DIMS] {
    let mut p = [1usize; MAX_DIMS];
    p[rank - shape.len()..rank].copy_from_slice(shape);
    p
}

/// Calls `f(out_index, a_index, b_index)` for every element of `out_shape` in
/// order, with the broadcast operands' flat indices.
fn for_each_broadcast(a_shape: &[usize], b_shape: &[usize], out_shape: &[usize], mut f: impl FnMut(usize, usize, usize)) {
    let rank = out_shape.len().max(a_shape.len()).max(b_shape.len()).max(1);
    let (os, ash, bsh) = (padded(out_shape, rank), padded(a_shape, rank), padded(b_shape, rank));
    let (ast, bst) = (strides(&ash[..rank]), strides(&bsh[..rank]));
    let total: usize = os[..rank].iter().product();
    let mut idx = [0usize; MAX_DIMS];
    let (mut ai, mut bi) = (0usize, 0usize);
    for o in 0..total {
        f(o, ai, bi);
        // Increment the multi-index, keeping the operand offsets (stride 0 where broadcast).
        for d in (0..rank).rev() {
            idx[d] += 1;
            let (sa, sb) = (if ash[d] == 1 { 0 } else { ast[d] }, if bsh[d] == 1 { 0 } else { bst[d] });
            ai += sa;
            bi += sb;
            if idx[d] < os[d] {
                break;
            }
            ai -= sa * os[d];
            bi -= sb * os[d];
            idx[d] = 0;
        }
    }
}

/// Element-wise binary ops with a backward kernel ([`binary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryGrad {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// ADD / SUB / MUL / DIV backward with broadcasting: `da` (shape `a_shape`) and
/// `db` (shape `b_shape`) sum `dy` (shape `out_shape`, before any fused
/// activation) over the positions each operand element was broadcast to.
#[allow(clippy::too_many_arguments)]
pub fn binary(
    op: BinaryGrad,
    (a, a_shape): (&[f32], &[usize]),
    (b, b_shape): (&[f32], &[usize]),
    dy: &[f32],
    out_shape: &[usize],
    da: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
    pool: Option<&ThreadPool>,
) {
    let grad_a = |g: f32, _av: f32, bv: f32| match op {
        BinaryGrad::Add | BinaryGrad::Sub => g,
        BinaryGrad::Mul => g * bv,
        BinaryGrad::Div => g / bv,
    };
    let grad_b = |g: f32, av: f32, bv: f32| match op {
        BinaryGrad::Add => g,
        BinaryGrad::Sub => -g,
        BinaryGrad::Mul => g * av,
        BinaryGrad::Div => -g * av / (bv * bv),
    };
    let same = a_shape == out_shape && b_shape == out_shape;
    if same {
        // No broadcast: element-wise, split over the pool.
        let n = dy.len();
        if let Some(da) = da {
            for_rows(pool, n * 4, &mut da[..n], 1, &|r, out| {
                for (i, d) in r.zip(out.iter_mut()) {
                    *d = grad_a(dy[i], a[i], b[i]);
                }
            });
        }
        if let Some(db) = db {
            for_rows(pool, n * 4, &mut db[..n], 1, &|r, out| {
                for (i, d) in r.zip(out.iter_mut()) {
                    *d = grad_b(dy[i], a[i], b[i]);
                }
            });
        }
        return;
    }
    // Broadcast: one pass over the output in order, summing into the operands'
    // gradients (one thread, so the summation order is fixed).
    let (mut da, mut db) = (da, db);
    if let Some(d) = da.as_deref_mut() {
        d.fill(0.0);
    }
    if let Some(d) = db.as_deref_mut() {
        d.fill(0.0);
    }
    for_each_broadcast(a_shape, b_shape, out_shape, |o, ai, bi| {
        let (g, av, bv) = (dy[o], a[ai], b[bi]);
        if let Some(d) = da.as_deref_mut() {
            d[ai] += grad_a(g, av, bv);
        }
        if let Some(d) = db.as_deref_mut() {
            d[bi] += grad_b(g, av, bv);
        }
    });
}

/// PRELU backward, `y = x > 0 ? x : alpha * x` with `alpha` broadcast to `x`'s
/// shape: `dx = x > 0 ? dy : alpha * dy`, `dalpha` summed over the broadcast
/// positions of `x < 0 ? x * dy : 0`.
pub fn prelu(x: &[f32], x_shape: &[usize], alpha: &[f32], alpha_shape: &[usize], dy: &[f32], dx: Option<&mut [f32]>, dalpha: Option<&mut [f32]>) {
    let (mut dx, mut dalpha) = (dx, dalpha);
    if let Some(d) = dalpha.as_deref_mut() {
        d.fill(0.0);
    }
    for_each_broadcast(x_shape, alpha_shape, x_shape, |o, xi, ai| {
        let (v, g) = (x[xi], dy[o]);
        if let Some(d) = dx.as_deref_mut() {
            d[o] = if v > 0.0 { g } else { alpha[ai] * g };
        }
        if let Some(d) = dalpha.as_deref_mut() {
            if v <= 0.0 {
                d[ai] += v * g;
            }
        }
    });
}

/// SOFTMAX backward over rows of `n` (`y = softmax(beta * x)`):
/// `dx = beta * y * (dy - sum(dy * y))`.
pub fn softmax(y: &[f32], dy: &[f32], n: usize, beta: f32, dx: &mut [f32], pool: Option<&ThreadPool>) {
    let len = dx.len();
    for_rows(pool, len * 4, dx, n, &|rows, out| {
        for (r, o) in rows.zip(out.chunks_exact_mut(n)) {
            let (yr, gr) = (&y[r * n..][..n], &dy[r * n..][..n]);
            let s: f32 = yr.iter().zip(gr).fold(0.0, |s, (a, b)| s + a * b);
            for ((d, &yv), &g) in o.iter_mut().zip(yr).zip(gr) {
                *d = beta * yv * (g - s);
            }
        }
    });
}

/// LOG_SOFTMAX backward over rows of `n` (`y = log_softmax(x)`):
/// `dx = dy - exp(y) * sum(dy)`.
pub fn log_softmax(y: &[f32], dy: &[f32], n: usize, dx: &mut [f32], pool: Option<&ThreadPool>) {
    let len = dx.len();
    for_rows(pool, len * 4, dx, n, &|rows, out| {
        for (r, o) in rows.zip(out.chunks_exact_mut(n)) {
            let (yr, gr) = (&y[r * n..][..n], &dy[r * n..][..n]);
            let s: f32 = gr.iter().fold(0.0, |s, g| s + g);
            for ((d, &yv), &g) in o.iter_mut().zip(yr).zip(gr) {
                *d = g - yv.exp() * s;
            }
        }
    });
}

/// MEAN / SUM backward: `x` of `in_shape` reduced over the dims flagged in
/// `reduce` to `dy` (the kept dims, in order); `dx[i] = scale * dy[kept(i)]`
/// with `scale` 1 for SUM and 1 / (reduced elements) for MEAN.
pub fn reduce(in_shape: &[usize], reduce: &[bool], dy: &[f32], scale: f32, dx: &mut [f32]) {
    let rank = in_shape.len();
    if rank == 0 {
        if let (Some(d), Some(&g)) = (dx.first_mut(), dy.first()) {
            *d = g * scale;
        }
        return;
    }
    // The kept shape as the input's rank with 1s at reduced dims: dy broadcast to x.
    let mut kept = [1usize; MAX_DIMS];
    for d in 0..rank {
        kept[d] = if reduce[d] { 1 } else { in_shape[d] };
    }
    for_each_broadcast(in_shape, &kept[..rank], in_shape, |o, _, ki| dx[o] = dy[ki] * scale);
}

/// RESHAPE / SQUEEZE / EXPAND_DIMS backward: the gradient is `dy` with the
/// input's shape, the same elements in the same order.
pub fn reshape(dy: &[f32], dx: &mut [f32]) {
    dx.copy_from_slice(&dy[..dx.len()]);
}

/// `acc += g`: the training graph sums the gradient contributions of a tensor
/// that several ops read.
pub fn accumulate(acc: &mut [f32], g: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(g) {
        *a += v;
    }
}

/// How a loss sums over the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// The mean over the batch (Keras' default, `sum_over_batch_size`).
    SumOverBatchSize,
    /// The sum over the batch.
    Sum,
}

/// Mean squared error of `pred` against `target` (`batch` samples of equal size):
/// each sample's mean of squared differences, averaged (or summed) over the batch.
/// Writes `dpred` and returns the loss.
pub fn mse(pred: &[f32], target: &[f32], batch: usize, reduction: Reduction, dpred: &mut [f32]) -> f32 {
    let n = pred.len();
    let per_sample = n.checked_div(batch).unwrap_or(0);
    if per_sample == 0 {
        dpred.fill(0.0);
        return 0.0;
    }
    let denom = match reduction {
        Reduction::SumOverBatchSize => (batch * per_sample) as f32,
        Reduction::Sum => per_sample as f32,
    };
    let mut total = 0.0f64;
    for ((d, &p), &t) in dpred.iter_mut().zip(pred).zip(target) {
        let e = p - t;
        total += f64::from(e) * f64::from(e);
        *d = 2.0 * e / denom;
    }
    (total / f64::from(denom)) as f32
}

/// Categorical cross-entropy of `p = softmax(beta * logits)` against `target`,
/// computed from the logits (log-softmax, stable for any logits) as TensorFlow
/// does for a softmax output. Rows of `n` classes. Writes the gradient at the
/// logits, `beta * (p - target) / batch` (or without `/ batch` for `Sum`), and
/// returns the loss.
#[allow(clippy::too_many_arguments)]
pub fn softmax_cross_entropy(logits: &[f32], p: &[f32], target: &[f32], n: usize, beta: f32, reduction: Reduction, dlogits: &mut [f32]) -> f32 {
    let rows = logits.len().checked_div(n).unwrap_or(0);
    let scale = match reduction {
        Reduction::SumOverBatchSize => 1.0 / rows.max(1) as f32,
        Reduction::Sum => 1.0,
    };
    let mut total = 0.0f64;
    for r in 0..rows {
        let (z, pr, t) = (&logits[r * n..][..n], &p[r * n..][..n], &target[r * n..][..n]);
        let max = z.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(beta * v));
        let lse = f64::from(max) + z.iter().map(|&v| f64::from(beta * v - max).exp()).sum::<f64>().ln();
        let mut row = 0.0f64;
        for i in 0..n {
            if t[i] != 0.0 {
                row -= f64::from(t[i]) * (f64::from(beta * z[i]) - lse);
            }
            dlogits[r * n + i] = beta * (pr[i] - t[i]) * scale;
        }
        total += row;
    }
    (total * f64::from(scale)) as f32
}

/// Categorical accuracy: the fraction of rows (of `n`) whose first maximum in
/// `pred` is at the first maximum of `target`.
pub fn categorical_accuracy(pred: &[f32], target: &[f32], n: usize) -> f32 {
    let rows = pred.len().checked_div(n).unwrap_or(0);
    if rows == 0 {
        return 0.0;
    }
    let argmax = |v: &[f32]| v.iter().enumerate().fold((0usize, f32::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0;
    let hits = (0..rows).filter(|&r| argmax(&pred[r * n..][..n]) == argmax(&target[r * n..][..n])).count();
    hits as f32 / rows as f32
}

/// Plain SGD: `w -= lr * g`.
pub fn sgd(w: &mut [f32], g: &[f32], lr: f32) {
    for (w, &g) in w.iter_mut().zip(g) {
        *w -= lr * g;
    }
}

/// SGD with momentum, in Keras' form: `v = momentum * v - lr * g`, then
/// `w += v`, or with Nesterov `w += momentum * v - lr * g`.
pub fn sgd_momentum(w: &mut [f32], g: &[f32], v: &mut [f32], lr: f32, momentum: f32, nesterov: bool) {
    for ((w, &g), v) in w.iter_mut().zip(g).zip(v.iter_mut()) {
        *v = momentum * *v - lr * g;
        *w += if nesterov { momentum * *v - lr * g } else { *v };
    }
}

/// Adam in Keras' form: `m += (g - m) * (1 - beta1)`, `v += (g² - v) * (1 - beta2)`,
/// `w -= alpha * m / (sqrt(v) + epsilon)` with `alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t)`
/// computed by the caller for step `t` (from 1).
#[allow(clippy::too_many_arguments)]
pub fn adam(w: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], alpha: f32, beta1: f32, beta2: f32, epsilon: f32) {
    for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        *m += (g - *m) * (1.0 - beta1);
        *v += (g * g - *v) * (1.0 - beta2);
        *w -= alpha * *m / (v.sqrt() + epsilon);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random values in [-1, 1).
    fn rand(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Central finite difference of `L = sum(r * f(x))` with respect to every
    /// element of `x`, in f64.
    fn numeric(x: &[f32], r: &[f32], f: &dyn Fn(&[f64]) -> Vec<f64>) -> Vec<f32> {
        let mut xv: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let eps = 1e-5;
        (0..x.len())
            .map(|i| {
                let old = xv[i];
                xv[i] = old + eps;
                let hi: f64 = f(&xv).iter().zip(r).map(|(a, &b)| a * f64::from(b)).sum();
                xv[i] = old - eps;
                let lo: f64 = f(&xv).iter().zip(r).map(|(a, &b)| a * f64::from(b)).sum();
                xv[i] = old;
                ((hi - lo) / (2.0 * eps)) as f32
            })
            .collect()
    }

    fn close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 2e-3 * (1.0 + w.abs()), "{what}[{i}]: {g} vs finite difference {w}");
        }
    }

    fn pools() -> Vec<Option<ThreadPool>> {
        vec![None, Some(ThreadPool::new(3))]
    }

    #[test]
    fn fully_connected_matches_finite_differences_for_any_thread_count() {
        let (batch, in_n, out_n) = (5, 37, 11);
        let (x, w, dy) = (rand(batch * in_n, 1), rand(out_n * in_n, 2), rand(batch * out_n, 3));
        let fwd = |x: &[f64], w: &[f64], b: &[f64]| -> Vec<f64> {
            (0..batch * out_n).map(|k| (0..in_n).map(|i| x[(k / out_n) * in_n + i] * w[(k % out_n) * in_n + i]).sum::<f64>() + b[k % out_n]).collect()
        };
        let bias = rand(out_n, 4);
        let f64v = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
        let want_dx = numeric(&x, &dy, &|xv| fwd(xv, &f64v(&w), &f64v(&bias)));
        let want_dw = numeric(&w, &dy, &|wv| fwd(&f64v(&x), wv, &f64v(&bias)));
        let want_db = numeric(&bias, &dy, &|bv| fwd(&f64v(&x), &f64v(&w), bv));
        let mut first: Option<Vec<f32>> = None;
        for pool in pools() {
            // Large enough that the pool splits the work.
            let (mut dx, mut dw, mut db) = (vec![9.0; batch * in_n], vec![9.0; out_n * in_n], vec![9.0; out_n]);
            fully_connected(&x, &w, &dy, (batch, in_n, out_n), Some(&mut dx), Some(&mut dw), Some(&mut db), pool.as_ref());
            close(&dx, &want_dx, "dx");
            close(&dw, &want_dw, "dw");
            close(&db, &want_db, "db");
            let all: Vec<f32> = dx.iter().chain(&dw).chain(&db).copied().collect();
            match &first {
                None => first = Some(all),
                Some(f) => assert!(f.iter().zip(&all).all(|(a, b)| a.to_bits() == b.to_bits()), "thread count changed the result"),
            }
        }
    }

    #[test]
    fn big_fully_connected_is_identical_on_one_and_many_threads() {
        let (batch, in_n, out_n) = (32, 200, 64);
        let (x, w, dy) = (rand(batch * in_n, 5), rand(out_n * in_n, 6), rand(batch * out_n, 7));
        let run = |pool: Option<&ThreadPool>| {
            let (mut dx, mut dw) = (vec![0.0; batch * in_n], vec![0.0; out_n * in_n]);
            fully_connected(&x, &w, &dy, (batch, in_n, out_n), Some(&mut dx), Some(&mut dw), None, pool);
            (dx, dw)
        };
        let pool = ThreadPool::new(4);
        assert!(run(None) == run(Some(&pool)), "thread count changed the result");
    }

    #[test]
    fn fused_clamps_pass_the_gradient_inside_the_range() {
        let y = [-1.0, 0.0, 0.5, 6.0, 7.0];
        let dy = [1.0; 5];
        let mut dx = [0.0; 5];
        clamp(Clamp::RELU6, &[0.0, 0.0, 0.5, 6.0, 6.0], &dy, &mut dx);
        assert_eq!(dx, [0.0, 0.0, 1.0, 0.0, 0.0]);
        let mut d = dy;
        clamp_in_place(Clamp::RELU, &y, &mut d);
        assert_eq!(d, [0.0, 0.0, 1.0, 1.0, 1.0]);
        let mut d = dy;
        clamp_in_place(Clamp::NONE, &y, &mut d);
        assert_eq!(d, dy);
    }

    #[test]
    fn activations_match_finite_differences() {
        // Keep away from the kinks, where the finite difference straddles two pieces.
        let x: Vec<f32> = rand(64, 8).iter().map(|v| v * 5.0).filter(|v| [0.0f32, 6.0, -1.0, 1.0, -3.0, 3.0].iter().all(|k| (v - k).abs() > 0.01)).collect();
        let dy = rand(x.len(), 9);
        type Forward = Box<dyn Fn(f64) -> f64>;
        let cases: Vec<(UnaryGrad, Forward)> = vec![
            (UnaryGrad::Relu, Box::new(|v: f64| v.max(0.0))),
            (UnaryGrad::Relu6, Box::new(|v: f64| v.clamp(0.0, 6.0))),
            (UnaryGrad::ReluN1To1, Box::new(|v: f64| v.clamp(-1.0, 1.0))),
            (UnaryGrad::Relu0To1, Box::new(|v: f64| v.clamp(0.0, 1.0))),
            (UnaryGrad::LeakyRelu(0.2), Box::new(|v: f64| if v > 0.0 { v } else { 0.2 * v })),
            (UnaryGrad::HardSwish, Box::new(|v: f64| v * (v + 3.0).clamp(0.0, 6.0) / 6.0)),
            (UnaryGrad::Logistic, Box::new(|v: f64| 1.0 / (1.0 + (-v).exp()))),
            (UnaryGrad::Tanh, Box::new(|v: f64| v.tanh())),
            (
                UnaryGrad::Gelu { approximate: true },
                Box::new(|v: f64| 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())),
            ),
            (
                UnaryGrad::Gelu { approximate: false },
                Box::new(|v: f64| v * 0.5 * (1.0 + f64::from(crate::elementwise::erf((v / std::f64::consts::SQRT_2) as f32)))),
            ),
        ];
        for (op, f) in cases {
            let y: Vec<f32> = x.iter().map(|&v| f(f64::from(v)) as f32).collect();
            // erf is a float32 approximation: its finite difference is noisy at eps 1e-5,
            // so GELU's exact form is checked against the analytic derivative of the true erf.
            let want = if op == (UnaryGrad::Gelu { approximate: false }) {
                x.iter()
                    .zip(&dy)
                    .map(|(&v, &g)| {
                        let v = f64::from(v);
                        let pdf = (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
                        let cdf = 0.5 * (1.0 + f64::from(crate::elementwise::erf((v / std::f64::consts::SQRT_2) as f32)));
                        (f64::from(g) * (cdf + v * pdf)) as f32
                    })
                    .collect()
            } else {
                numeric(&x, &dy, &|xv| xv.iter().map(|&v| f(v)).collect())
            };
            for pool in pools() {
                let mut dx = vec![7.0; x.len()];
                unary(op, &x, &y, &dy, &mut dx, pool.as_ref());
                close(&dx, &want, &format!("{op:?}"));
            }
        }
    }

    #[test]
    fn binary_ops_with_broadcasting_match_finite_differences() {
        let shapes: [(&[usize], &[usize], &[usize]); 4] =
            [(&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]), (&[2, 3, 4], &[4], &[2, 3, 4]), (&[2, 1, 4], &[3, 1], &[2, 3, 4]), (&[1], &[2, 3], &[2, 3])];
        for (ash, bsh, osh) in shapes {
            let (na, nb, no) = (ash.iter().product::<usize>(), bsh.iter().product::<usize>(), osh.iter().product::<usize>());
            let a = rand(na, 10);
            // Divisors away from zero.
            let b: Vec<f32> = rand(nb, 11).iter().map(|v| v.signum() * (v.abs() + 0.5)).collect();
            let dy = rand(no, 12);
            for op in [BinaryGrad::Add, BinaryGrad::Sub, BinaryGrad::Mul, BinaryGrad::Div] {
                let f = |av: &[f64], bv: &[f64]| {
                    let mut out = vec![0.0; no];
                    for_each_broadcast(ash, bsh, osh, |o, ai, bi| {
                        out[o] = match op {
                            BinaryGrad::Add => av[ai] + bv[bi],
                            BinaryGrad::Sub => av[ai] - bv[bi],
                            BinaryGrad::Mul => av[ai] * bv[bi],
                            BinaryGrad::Div => av[ai] / bv[bi],
                        }
                    });
                    out
                };
                let f64v = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
                let want_a = numeric(&a, &dy, &|av| f(av, &f64v(&b)));
                let want_b = numeric(&b, &dy, &|bv| f(&f64v(&a), bv));
                for pool in pools() {
                    let (mut da, mut db) = (vec![5.0; na], vec![5.0; nb]);
                    binary(op, (&a, ash), (&b, bsh), &dy, osh, Some(&mut da), Some(&mut db), pool.as_ref());
                    close(&da, &want_a, &format!("{op:?} da {ash:?} {bsh:?}"));
                    close(&db, &want_b, &format!("{op:?} db {ash:?} {bsh:?}"));
                }
            }
        }
    }

    #[test]
    fn prelu_matches_finite_differences() {
        let (xs, als): (&[usize], &[usize]) = (&[2, 3, 4], &[1, 1, 4]);
        let x: Vec<f32> = rand(24, 13).iter().map(|v| if v.abs() < 0.01 { 0.5 } else { *v }).collect();
        let alpha = rand(4, 14);
        let dy = rand(24, 15);
        let f = |xv: &[f64], av: &[f64]| {
            let mut out = vec![0.0; 24];
            for_each_broadcast(xs, als, xs, |o, xi, ai| out[o] = if xv[xi] > 0.0 { xv[xi] } else { av[ai] * xv[xi] });
            out
        };
        let f64v = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let (mut dx, mut da) = (vec![0.0; 24], vec![0.0; 4]);
        prelu(&x, xs, &alpha, als, &dy, Some(&mut dx), Some(&mut da));
        close(&dx, &numeric(&x, &dy, &|xv| f(xv, &f64v(&alpha))), "dx");
        close(&da, &numeric(&alpha, &dy, &|av| f(&f64v(&x), av)), "dalpha");
    }

    #[test]
    fn softmax_and_log_softmax_match_finite_differences() {
        let n = 7;
        let x = rand(3 * n, 16);
        let dy = rand(3 * n, 17);
        for beta in [1.0f32, 0.5] {
            let f = |xv: &[f64]| -> Vec<f64> {
                xv.chunks(n)
                    .flat_map(|r| {
                        let m = r.iter().fold(f64::MIN, |a, &b| a.max(b));
                        let s: f64 = r.iter().map(|v| (f64::from(beta) * (v - m)).exp()).sum();
                        r.iter().map(move |v| (f64::from(beta) * (v - m)).exp() / s).collect::<Vec<_>>()
                    })
                    .collect()
            };
            let y: Vec<f32> = f(&x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()).iter().map(|&v| v as f32).collect();
            let mut dx = vec![0.0; 3 * n];
            softmax(&y, &dy, n, beta, &mut dx, None);
            close(&dx, &numeric(&x, &dy, &f), "softmax");
        }
        let g = |xv: &[f64]| -> Vec<f64> {
            xv.chunks(n)
                .flat_map(|r| {
                    let m = r.iter().fold(f64::MIN, |a, &b| a.max(b));
                    let l = r.iter().map(|v| (v - m).exp()).sum::<f64>().ln() + m;
                    r.iter().map(move |v| v - l).collect::<Vec<_>>()
                })
                .collect()
        };
        let y: Vec<f32> = g(&x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()).iter().map(|&v| v as f32).collect();
        let mut dx = vec![0.0; 3 * n];
        log_softmax(&y, &dy, n, &mut dx, Some(&ThreadPool::new(2)));
        close(&dx, &numeric(&x, &dy, &g), "log_softmax");
    }

    #[test]
    fn mean_and_sum_match_finite_differences() {
        let shape = [2usize, 3, 4];
        let x = rand(24, 18);
        for flags in [[false, true, false], [true, false, true], [true, true, true]] {
            let kept: usize = shape.iter().zip(flags).map(|(&d, r)| if r { 1 } else { d }).product();
            let count = 24 / kept;
            let dy = rand(kept, 19);
            for mean in [false, true] {
                let f = |xv: &[f64]| {
                    let mut out = vec![0.0; kept];
                    let ks: Vec<usize> = shape.iter().zip(flags).map(|(&d, r)| if r { 1 } else { d }).collect();
                    for_each_broadcast(&shape, &ks, &shape, |o, _, ki| out[ki] += xv[o]);
                    if mean {
                        out.iter_mut().for_each(|v| *v /= count as f64);
                    }
                    out
                };
                let mut dx = vec![0.0; 24];
                reduce(&shape, &flags, &dy, if mean { 1.0 / count as f32 } else { 1.0 }, &mut dx);
                close(&dx, &numeric(&x, &dy, &f), "reduce");
            }
        }
        let mut dx = [0.0; 3];
        reshape(&[1.0, 2.0, 3.0], &mut dx);
        assert_eq!(dx, [1.0, 2.0, 3.0]);
    }

    #[test]
    fn losses_give_their_gradients() {
        let (batch, n) = (4, 5);
        let p = rand(batch * n, 20);
        let t = rand(batch * n, 21);
        for red in [Reduction::SumOverBatchSize, Reduction::Sum] {
            let mut d = vec![0.0; batch * n];
            let l = mse(&p, &t, batch, red, &mut d);
            let f = |pv: &[f64]| {
                let s: f64 = pv.iter().zip(&t).map(|(a, &b)| (a - f64::from(b)).powi(2)).sum();
                vec![if red == Reduction::Sum { s / n as f64 } else { s / (batch * n) as f64 }]
            };
            let want = f(&p.iter().map(|&v| f64::from(v)).collect::<Vec<_>>())[0];
            assert!((f64::from(l) - want).abs() < 1e-5 * want.abs().max(1.0));
            close(&d, &numeric(&p, &[1.0], &f), "mse");
        }
        // Cross-entropy at the logits, with one-hot and soft labels.
        let z = rand(batch * n, 22);
        let mut y = vec![0.0f32; batch * n];
        for r in 0..batch {
            y[r * n + r % n] = 0.75;
            y[r * n + (r + 1) % n] = 0.25;
        }
        for (beta, red) in [(1.0f32, Reduction::SumOverBatchSize), (2.0, Reduction::Sum)] {
            let f = |zv: &[f64]| {
                let mut loss = 0.0;
                for r in 0..batch {
                    let row = &zv[r * n..][..n];
                    let m = row.iter().fold(f64::MIN, |a, &b| a.max(f64::from(beta) * b));
                    let l = row.iter().map(|v| (f64::from(beta) * v - m).exp()).sum::<f64>().ln() + m;
                    loss -= (0..n).map(|i| f64::from(y[r * n + i]) * (f64::from(beta) * row[i] - l)).sum::<f64>();
                }
                vec![if red == Reduction::Sum { loss } else { loss / batch as f64 }]
            };
            let p: Vec<f32> = z
                .chunks(n)
                .flat_map(|r| {
                    let m = r.iter().fold(f32::MIN, |a, &b| a.max(beta * b));
                    let s: f32 = r.iter().map(|v| (beta * v - m).exp()).sum();
                    r.iter().map(move |v| (beta * v - m).exp() / s).collect::<Vec<_>>()
                })
                .collect();
            let mut d = vec![0.0; batch * n];
            let l = softmax_cross_entropy(&z, &p, &y, n, beta, red, &mut d);
            let want = f(&z.iter().map(|&v| f64::from(v)).collect::<Vec<_>>())[0];
            assert!((f64::from(l) - want).abs() < 1e-5 * want.abs().max(1.0), "{l} vs {want}");
            close(&d, &numeric(&z, &[1.0], &f), "cce");
        }
    }

    #[test]
    fn accuracy_takes_the_first_maximum() {
        let pred = [0.1, 0.7, 0.2, 0.5, 0.5, 0.0, 0.3, 0.3, 0.4];
        let target = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0];
        // Row 2's prediction ties at 0 and 1: the first wins, which is not the label.
        assert!((categorical_accuracy(&pred, &target, 3) - 1.0 / 3.0).abs() < 1e-7);
    }

    #[test]
    fn optimizers_follow_keras() {
        let mut w = [1.0f32, -2.0];
        sgd(&mut w, &[0.5, 1.0], 0.1);
        assert_eq!(w, [0.95, -2.1]);
        let (mut w, mut v) = ([1.0f32], [0.0f32]);
        sgd_momentum(&mut w, &[1.0], &mut v, 0.1, 0.9, false);
        sgd_momentum(&mut w, &[1.0], &mut v, 0.1, 0.9, false);
        // v1 = -0.1, w1 = 0.9; v2 = -0.19, w2 = 0.71.
        assert!((w[0] - 0.71).abs() < 1e-6 && (v[0] + 0.19).abs() < 1e-6);
        let (mut w, mut v) = ([1.0f32], [0.0f32]);
        sgd_momentum(&mut w, &[1.0], &mut v, 0.1, 0.9, true);
        // v1 = -0.1, w1 = 1 + 0.9 * -0.1 - 0.1 = 0.81.
        assert!((w[0] - 0.81).abs() < 1e-6);
        // Adam's first step moves each weight by about lr, against its gradient's sign.
        let (mut w, mut m, mut v) = ([1.0f32, 1.0], [0.0f32; 2], [0.0f32; 2]);
        let (b1, b2, lr) = (0.9f32, 0.999f32, 0.01f32);
        let alpha = lr * (1.0 - b2).sqrt() / (1.0 - b1);
        adam(&mut w, &[0.3, -2.0], &mut m, &mut v, alpha, b1, b2, 1e-7);
        assert!((w[0] - 0.99).abs() < 1e-5 && (w[1] - 1.01).abs() < 1e-5, "{w:?}");
    }
}
