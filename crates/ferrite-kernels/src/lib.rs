//! Compute kernels for ferrite: pure functions over slices and shapes.
//!
//! Nothing here knows about graphs, tensors or sessions. Every kernel takes
//! plain slices plus the shapes and parameters it needs, writes into a caller
//! provided output slice, and is tested against a naive reference.
//! Layouts follow TensorFlow Lite: activations NHWC, conv filters OHWI,
//! depthwise filters 1HW(C*M), fully-connected weights [out, in].

#![warn(missing_docs)]

/// Defines `pub fn $name(args)` that runs `$body` compiled for AVX-512F, AVX2+FMA
/// or baseline x86-64, chosen at run time from the CPU's features (one cached
/// atomic load per call). The body is plain Rust that the compiler vectorizes
/// for each target; on other architectures only the portable build exists.
macro_rules! simd_fn {
    ($(#[$m:meta])* pub fn $name:ident($($p:ident: $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        pub fn $name($($p: $t),*) {
            #[inline(always)]
            fn body($($p: $t),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($p: $t),*) { body($($p),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($p: $t),*) { body($($p),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports AVX-512F (checked just above).
                    return unsafe { avx512($($p),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    return unsafe { avx2($($p),*) };
                }
            }
            body($($p),*)
        }
    };
}

/// Sum of 16 lane accumulators in a fixed pairwise order (halving stages that
/// compile to vector adds), so a vectorized sum gives the same bits every time.
#[inline(always)]
pub(crate) fn hsum16(lanes: [f32; 16]) -> f32 {
    let mut h8 = [0.0f32; 8];
    for j in 0..8 {
        h8[j] = lanes[j] + lanes[j + 8];
    }
    let mut h4 = [0.0f32; 4];
    for j in 0..4 {
        h4[j] = h8[j] + h8[j + 4];
    }
    (h4[0] + h4[2]) + (h4[1] + h4[3])
}

pub mod conv;
pub mod elementwise;
pub mod fixed16;
pub mod gemm;
pub mod igemm;
pub mod movement;
pub mod parallel;
pub mod pool;
pub mod qgemm;
pub mod quant;
pub mod reduce;
pub mod resize;
pub mod softmax;

/// Output clamp applied by a fused activation (`NONE` is an infinite range).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clamp {
    /// Lower bound.
    pub min: f32,
    /// Upper bound.
    pub max: f32,
}

impl Clamp {
    /// No clamping.
    pub const NONE: Clamp = Clamp { min: f32::NEG_INFINITY, max: f32::INFINITY };
    /// RELU.
    pub const RELU: Clamp = Clamp { min: 0.0, max: f32::INFINITY };
    /// RELU6.
    pub const RELU6: Clamp = Clamp { min: 0.0, max: 6.0 };
    /// RELU_N1_TO_1.
    pub const RELU_N1_TO_1: Clamp = Clamp { min: -1.0, max: 1.0 };

    /// Applies the clamp to one value.
    #[inline(always)]
    pub fn apply(self, v: f32) -> f32 {
        v.max(self.min).min(self.max)
    }

    /// Applies the clamp to a slice in place.
    pub fn apply_slice(self, s: &mut [f32]) {
        if self != Clamp::NONE {
            for v in s {
                *v = self.apply(*v);
            }
        }
    }
}

/// Largest rank the kernels handle. Index state lives in fixed arrays of this size
/// so kernels never allocate; the runtime rejects higher ranks before running.
pub const MAX_DIMS: usize = 16;

/// Row-major strides of a shape (rank at most [`MAX_DIMS`]), on the stack.
pub fn strides(shape: &[usize]) -> [usize; MAX_DIMS] {
    let mut s = [1usize; MAX_DIMS];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}
