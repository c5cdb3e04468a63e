//! Test helpers of the backward kernels: a seeded generator, a finite-difference
//! check against the forward kernel, and the thread-count determinism check.

/// A small seeded generator (the tests need no dependency and must be reproducible).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn bits(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 32) as u32
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn size(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.bits() as usize % (hi - lo + 1)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn unit(&mut self) -> f32 {
        (f64::from(self.bits()) / 2_147_483_648.0 - 1.0) as f32
    }

    /// `n` values uniform in [-1, 1).
    pub(crate) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}

/// `sum(dy * f(x))` in f64: the scalar whose gradient the kernels compute.
fn loss(dy: &[f32], y: &[f32]) -> f64 {
    assert_eq!(dy.len(), y.len(), "forward output and dy differ in length");
    dy.iter().zip(y).map(|(&d, &v)| f64::from(d) * f64::from(v)).sum()
}

/// Checks `grad` (the kernel's gradient of `sum(dy * f(x))` at `x`) against
/// central differences of the forward kernel `f`: element by element (all of
/// them, or 48 spread over a large `x`) and along two random directions.
/// `linear`: `f` is linear in `x`, so a step of 1 is exact up to rounding;
/// otherwise the step is 1e-3 and `x` must keep away from kinks.
pub(crate) fn assert_grad(what: &str, x: &[f32], grad: &[f32], dy: &[f32], f: impl Fn(&[f32]) -> Vec<f32>, linear: bool) {
    assert_eq!(x.len(), grad.len(), "{what}: gradient length");
    let eps = if linear { 1.0f32 } else { 1e-3 };
    let scale = dy.iter().map(|v| v.abs()).sum::<f32>().max(1.0) / (dy.len().max(1) as f32).sqrt();
    let tol = |g: f64| if linear { 2e-4 * (1.0 + g.abs()) * f64::from(scale) } else { 2e-2 * (1.0 + g.abs()) };
    let step = (x.len() / 48).max(1);
    let mut xp = x.to_vec();
    for i in (0..x.len()).step_by(step) {
        xp[i] = x[i] + eps;
        let up = loss(dy, &f(&xp));
        xp[i] = x[i] - eps;
        let down = loss(dy, &f(&xp));
        xp[i] = x[i];
        let fd = (up - down) / (2.0 * f64::from(eps));
        let g = f64::from(grad[i]);
        assert!((fd - g).abs() <= tol(g), "{what}: element {i} of {}: gradient {g}, finite difference {fd}", x.len());
    }
    let mut rng = Rng::new(x.len() as u64 + 7);
    for _ in 0..2 {
        let v = rng.vec(x.len());
        let along: f64 = grad.iter().zip(&v).map(|(&g, &d)| f64::from(g) * f64::from(d)).sum();
        let shifted = |s: f32| x.iter().zip(&v).map(|(&a, &d)| a + s * eps * d).collect::<Vec<f32>>();
        let fd = (loss(dy, &f(&shifted(1.0))) - loss(dy, &f(&shifted(-1.0)))) / (2.0 * f64::from(eps));
        let t = tol(along) * (x.len() as f64).sqrt();
        assert!((fd - along).abs() <= t, "{what}: along a random direction: gradient {along}, finite difference {fd}");
    }
}

/// Runs `run(threads)` on 1 and on 4 threads and asserts the same bits; returns
/// the one-thread result.
pub(crate) fn bits_equal_across_threads(run: impl Fn(usize) -> Vec<Vec<f32>>) -> Vec<Vec<f32>> {
    let one = run(1);
    let four = run(4);
    for (i, (a, b)) in one.iter().zip(&four).enumerate() {
        let same = a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "output {i} differs between 1 and 4 threads");
    }
    one
}
