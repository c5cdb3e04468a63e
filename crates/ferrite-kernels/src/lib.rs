//! Compute kernels for ferrite: pure functions over slices and shapes.
//!
//! Nothing here knows about graphs, tensors or sessions. Every kernel takes
//! plain slices plus the shapes and parameters it needs, writes into a caller
//! provided output slice, and is tested against a naive reference.
//! Layouts follow TensorFlow Lite: activations NHWC, conv filters OHWI,
//! depthwise filters 1HW(C*M), fully-connected weights [out, in].

#![warn(missing_docs)]

/// Defines `fn $name(args)` (with the given visibility) that runs `$body` compiled for AVX-512F, AVX2+FMA
/// or baseline x86-64, chosen at run time from the CPU's features (one cached
/// atomic load per call). The body is plain Rust that the compiler vectorizes
/// for each target; on other architectures only the portable build exists.
macro_rules! simd_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($p:ident: $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        $vis fn $name($($p: $t),*) {
            #[inline(always)]
            fn body($($p: $t),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($p: $t),*) { body($($p),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($p: $t),*) { body($($p),*) }
                if $crate::level::has_avx512f() {
                    // SAFETY: the CPU supports AVX-512F (checked just above).
                    return unsafe { avx512($($p),*) };
                }
                if $crate::level::has_avx2_fma() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    return unsafe { avx2($($p),*) };
                }
            }
            body($($p),*)
        }
    };
}

/// Run-time x86-64 feature checks for the kernels that pick a vector width
/// themselves ([`simd_fn!`] bodies, depthwise rows, requantization). Tests can
/// cap the level per thread ([`level::with_cap`]) so that on an AVX-512 machine
/// the AVX2 + FMA and baseline builds run too; outside tests the checks are the
/// plain cached feature tests.
pub mod level {
    /// A vector level, in increasing order.
    #[cfg(test)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub(crate) enum Level {
        /// Baseline x86-64 (or another architecture).
        Baseline,
        /// aarch64 NEON (baseline there; capped off in tests so the portable code runs too).
        Neon,
        /// AVX2 + FMA.
        Avx2,
        /// AVX-512F.
        Avx512,
    }

    #[cfg(test)]
    thread_local! {
        static CAP: std::cell::Cell<Level> = const { std::cell::Cell::new(Level::Avx512) };
    }

    /// Whether the kernels may use `l` (always, outside tests).
    #[cfg(test)]
    fn allowed(l: Level) -> bool {
        CAP.with(|c| c.get() >= l)
    }

    /// The widest x86-64 vector level the process may use, from `FERRITE_CPU_MAX_ISA`
    /// (`avx512`, `avx2` or `baseline`; unset or anything else: no limit), read once.
    /// It lets a user (or a benchmark) run the AVX2 or baseline kernels on an AVX-512
    /// machine, e.g. to compare them or to match what a smaller deployment target runs.
    /// 2 = AVX-512 allowed, 1 = up to AVX2 + FMA, 0 = baseline only.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn env_max() -> u8 {
        static MAX: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
        *MAX.get_or_init(|| match std::env::var("FERRITE_CPU_MAX_ISA").as_deref().map(str::to_ascii_lowercase).as_deref() {
            Ok("avx2") => 1,
            Ok("baseline") | Ok("sse2") | Ok("portable") => 0,
            _ => 2,
        })
    }

    /// Whether this build carries the AVX-512 kernels: on x86-64 with the `avx512`
    /// feature (default), or when the compilation target itself has AVX-512F
    /// (`-C target-cpu=...`). A build for a device without AVX-512 turns the
    /// feature off and links none of them (the checks below are then constant
    /// false, so the calls and the kernels they reach are dropped).
    pub const AVX512: bool = cfg!(all(target_arch = "x86_64", any(feature = "avx512", target_feature = "avx512f")));

    /// Whether this build carries the AVX2 + FMA kernels: on x86-64 with the `avx2`
    /// feature (default), or when the compilation target has AVX2 and FMA.
    pub const AVX2: bool = cfg!(all(target_arch = "x86_64", any(feature = "avx2", all(target_feature = "avx2", target_feature = "fma"))));

    /// The compilation target guarantees AVX-512F: the check is constant true, so
    /// the narrower copies behind it are dropped (and `FERRITE_CPU_MAX_ISA` cannot
    /// go below the level the whole build is compiled for).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const AVX512_TARGET: bool = cfg!(all(target_arch = "x86_64", target_feature = "avx512f"));

    /// The compilation target guarantees AVX2 and FMA (`-C target-cpu=x86-64-v3` or later).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const AVX2_TARGET: bool = cfg!(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma"));

    /// Whether the CPU has AVX-512F, the build carries its kernels ([`AVX512`]) and
    /// the process may use them (`FERRITE_CPU_MAX_ISA`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn cpu_avx512f() -> bool {
        #[cfg(target_arch = "x86_64")]
        return AVX512 && (AVX512_TARGET || (env_max() >= 2 && std::arch::is_x86_feature_detected!("avx512f")));
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether the CPU has AVX2 and FMA, the build carries their kernels ([`AVX2`])
    /// and the process may use them (`FERRITE_CPU_MAX_ISA`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn cpu_avx2_fma() -> bool {
        #[cfg(target_arch = "x86_64")]
        return AVX2 && (AVX2_TARGET || (env_max() >= 1 && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")));
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether the CPU has AVX2 and the build carries the AVX2 kernels (the int8
    /// GEMM's AVX2 kernel needs no FMA).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn cpu_avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        return AVX2 && (AVX2_TARGET || (env_max() >= 1 && std::arch::is_x86_feature_detected!("avx2")));
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether AVX-512F kernels may run: the CPU has it (and no test cap forbids it).
    #[inline(always)]
    pub(crate) fn has_avx512f() -> bool {
        #[cfg(test)]
        if !allowed(Level::Avx512) {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        return cpu_avx512f();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether AVX2 + FMA kernels may run: the CPU has both (and no test cap forbids them).
    #[inline(always)]
    #[cfg_attr(all(not(test), not(target_arch = "x86_64")), allow(dead_code))]
    pub(crate) fn has_avx2_fma() -> bool {
        #[cfg(test)]
        if !allowed(Level::Avx2) {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        return cpu_avx2_fma();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether the NEON kernels that have a portable twin may run: on aarch64
    /// (where NEON is baseline), unless a test cap forbids them.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub(crate) fn has_neon() -> bool {
        #[cfg(test)]
        if !allowed(Level::Neon) {
            return false;
        }
        cfg!(target_arch = "aarch64")
    }

    /// Every level this CPU runs, best first.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Level> {
        let (avx512, avx2, neon) = with_cap(Level::Avx512, || (has_avx512f(), has_avx2_fma(), has_neon()));
        [(Level::Avx512, avx512), (Level::Avx2, avx2), (Level::Neon, neon), (Level::Baseline, true)].into_iter().filter_map(|(l, ok)| ok.then_some(l)).collect()
    }

    /// Runs `f` with the kernels on this thread limited to `cap`.
    #[cfg(test)]
    pub(crate) fn with_cap<R>(cap: Level, f: impl FnOnce() -> R) -> R {
        let old = CAP.with(|c| c.replace(cap));
        let r = f();
        CAP.with(|c| c.set(old));
        r
    }

    /// Runs `f` once under every level this CPU runs, passing the level.
    #[cfg(test)]
    pub(crate) fn each(mut f: impl FnMut(Level)) {
        for l in available() {
            // Shown with a failing test's output: which build failed.
            eprintln!("kernels capped at {l:?}");
            with_cap(l, || f(l));
        }
    }
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

pub mod aligned;
pub mod conv;
pub mod conv3d;
pub mod detection;
pub mod elementwise;
pub mod feature;
pub mod fixed16;
pub mod gemm;
pub mod grad;
pub mod hlo;
pub mod hlo_index;
pub mod hybrid;
pub mod igemm;
pub mod index;
pub mod mediapipe;
pub mod movement;
pub mod movement_bytes;
pub mod parallel;
pub mod pool;
pub mod qactivation;
pub mod qelem;
pub mod qelementwise;
pub mod qgemm;
pub mod qlstm_basic;
pub mod qmatmul;
pub mod qnorm;
pub mod qrecurrent;
pub mod qreduce;
pub mod quant;
pub mod random;
pub mod recurrent;
pub mod reduce;
pub mod resize;
pub mod signal;
pub mod softmax;
pub mod strings;
#[cfg(test)]
mod testutil;
pub mod text;

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

/// Whether a buffer of `len` elements holds the product of `dims` (false if the
/// product overflows): the size checks the unsafe kernels rely on.
pub(crate) fn holds(len: usize, dims: &[usize]) -> bool {
    product(dims).is_some_and(|need| need <= len)
}

/// Product of `dims`, None if it overflows.
pub(crate) fn product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

#[cfg(test)]
mod tests {
    use crate::level::{self, Level};

    /// The per-thread cap really switches off the wider builds, so tests run
    /// under [`level::each`] exercise the AVX2 + FMA and baseline code on an
    /// AVX-512 machine.
    #[test]
    fn level_cap_selects_each_build() {
        let all = level::available();
        assert_eq!(all.last(), Some(&Level::Baseline));
        assert_eq!(all.contains(&Level::Neon), cfg!(target_arch = "aarch64"));
        level::with_cap(Level::Baseline, || {
            assert!(!level::has_avx512f() && !level::has_avx2_fma() && !level::has_neon());
            assert!(!crate::conv::depthwise_masks_tails());
        });
        level::with_cap(Level::Avx2, || {
            assert!(!level::has_avx512f());
            assert_eq!(level::has_avx2_fma(), all.contains(&Level::Avx2));
        });
        assert_eq!(level::has_avx512f(), all.contains(&Level::Avx512));
        let mut seen = Vec::new();
        level::each(|l| seen.push(l));
        assert_eq!(seen, all);
    }
}
