//! Kernel micro-benchmarks: achieved GFLOP/s of the GEMM-based convolution and
//! fully-connected kernels and of depthwise convolution, against this machine's
//! measured single-core FMA peak. `cargo bench -p ferrite-kernels`.

use std::time::Instant;

use ferrite_kernels::conv::{out_size_and_pad, Window};
use ferrite_kernels::igemm::{self, Isa, Packed};
use ferrite_kernels::Clamp;

/// Median seconds of `runs` calls of `f` after a warm-up.
fn time(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

/// Peak single-core f32 FMA throughput, measured with independent FMA chains.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn fma_peak(isa: Isa) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        const ITERS: usize = 20_000_000;
        // 24 named accumulators (not an array) so every chain lives in a register.
        macro_rules! chains {
            ($name:ident, $feat:literal, $ty:ty, $set1:ident, $fma:ident, $first:ident) => {
                #[target_feature(enable = $feat)]
                unsafe fn $name() -> f32 {
                    let (a, b) = ($set1(0.999_999), $set1(1e-7));
                    let (mut c0, mut c1, mut c2, mut c3, mut c4, mut c5, mut c6, mut c7) =
                        ($set1(1.0), $set1(1.0), $set1(1.0), $set1(1.0), $set1(1.0), $set1(1.0), $set1(1.0), $set1(1.0));
                    let (mut d0, mut d1, mut d2, mut d3, mut d4, mut d5, mut d6, mut d7) = (c0, c1, c2, c3, c4, c5, c6, c7);
                    let (mut e0, mut e1, mut e2, mut e3, mut e4, mut e5, mut e6, mut e7) = (c0, c1, c2, c3, c4, c5, c6, c7);
                    for _ in 0..ITERS / 24 {
                        c0 = $fma(c0, a, b);
                        c1 = $fma(c1, a, b);
                        c2 = $fma(c2, a, b);
                        c3 = $fma(c3, a, b);
                        c4 = $fma(c4, a, b);
                        c5 = $fma(c5, a, b);
                        c6 = $fma(c6, a, b);
                        c7 = $fma(c7, a, b);
                        d0 = $fma(d0, a, b);
                        d1 = $fma(d1, a, b);
                        d2 = $fma(d2, a, b);
                        d3 = $fma(d3, a, b);
                        d4 = $fma(d4, a, b);
                        d5 = $fma(d5, a, b);
                        d6 = $fma(d6, a, b);
                        d7 = $fma(d7, a, b);
                        e0 = $fma(e0, a, b);
                        e1 = $fma(e1, a, b);
                        e2 = $fma(e2, a, b);
                        e3 = $fma(e3, a, b);
                        e4 = $fma(e4, a, b);
                        e5 = $fma(e5, a, b);
                        e6 = $fma(e6, a, b);
                        e7 = $fma(e7, a, b);
                    }
                    let all: [$ty; 24] = [c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, e0, e1, e2, e3, e4, e5, e6, e7];
                    all.iter().map(|v| $first(*v)).sum()
                }
            };
        }
        #[target_feature(enable = "avx512f")]
        fn first512(v: __m512) -> f32 {
            _mm512_cvtss_f32(v)
        }
        #[target_feature(enable = "avx")]
        fn first256(v: __m256) -> f32 {
            _mm256_cvtss_f32(v)
        }
        chains!(chains512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, first512);
        chains!(chains256, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, first256);
        let lanes = isa.lanes();
        if lanes < 8 {
            return 0.0;
        }
        let mut best = 0.0f64;
        for _ in 0..3 {
            let s = Instant::now();
            // SAFETY: the ISA token was made by feature detection on this CPU, and
            // 16 lanes means AVX-512F, 8 AVX2 + FMA.
            let sink = unsafe {
                if lanes == 16 {
                    chains512()
                } else {
                    chains256()
                }
            };
            let secs = s.elapsed().as_secs_f64();
            std::hint::black_box(sink);
            best = best.max((ITERS / 24 * 24 * lanes * 2) as f64 / secs / 1e9);
        }
        return best;
    }
    #[allow(unreachable_code)]
    0.0
}

fn conv_case(isa: Isa, name: &str, hw: usize, c_in: usize, c_out: usize, k: usize, stride: usize) -> (String, f64) {
    let (oh, pt) = out_size_and_pad(hw, k, stride, 1, true).unwrap();
    let g = Window {
        batch: 1,
        in_h: hw,
        in_w: hw,
        out_h: oh,
        out_w: oh,
        k_h: k,
        k_w: k,
        stride_h: stride,
        stride_w: stride,
        dil_h: 1,
        dil_w: 1,
        pad_top: pt,
        pad_left: pt,
    };
    let x: Vec<f32> = (0..hw * hw * c_in).map(|i| (i % 13) as f32 * 0.1).collect();
    let w: Vec<f32> = (0..c_out * k * k * c_in).map(|i| (i % 7) as f32 * 0.01).collect();
    // As the runtime packs them: few input channels merge each filter row into one tap.
    let pk = if c_in <= 8 && k > 1 { Packed::with_merged_rows(isa, &w, None, c_out, k, k, c_in) } else { Packed::new(isa, &w, None, c_out, k * k, c_in) };
    let mut out = vec![0.0f32; oh * oh * c_out];
    let mut scratch = pk.scratch(&g);
    let secs = time(21, || {
        igemm::conv2d(std::hint::black_box(&x), &pk, &g, Clamp::NONE, &mut out, 0..oh, &mut scratch);
        std::hint::black_box(&mut out);
    });
    let flops = 2.0 * (oh * oh * c_out * k * k * c_in) as f64;
    (format!("conv {name}: {hw}x{hw}x{c_in} -> {c_out}, {k}x{k}/{stride}"), flops / secs / 1e9)
}

/// Nominal single-core peak: 2 FMA ports x lanes x 2 flops x the clock /proc/cpuinfo reports.
fn nominal_peak(isa: Isa) -> f64 {
    let mhz = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("cpu MHz")).and_then(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok()))
        .unwrap_or(0.0);
    let lanes = match isa.lanes() {
        1 => 0.0,
        l => l as f64,
    };
    2.0 * lanes * 2.0 * mhz / 1e3
}

fn main() {
    let isa = Isa::detect();
    let chains = fma_peak(isa);
    let nominal = nominal_peak(isa);
    // Dependent-chain loops under-measure on some CPUs (the GEMM kernels below beat
    // them), so percentages use the larger of the two.
    let peak = chains.max(nominal);
    println!("kernel ISA {isa:?}; FMA peak per core: {chains:.1} GFLOP/s measured with FMA chains, {nominal:.1} GFLOP/s nominal (2 ports x lanes x 2 x clock)");
    let mut rows = vec![
        conv_case(isa, "1x1", 56, 128, 128, 1, 1),
        conv_case(isa, "1x1", 28, 256, 256, 1, 1),
        conv_case(isa, "3x3", 28, 128, 128, 3, 1),
        conv_case(isa, "3x3 first layer", 224, 3, 32, 3, 2),
    ];
    // Fully connected, batch 1 and 8.
    for batch in [1usize, 8] {
        let (k, n) = (1024, 1000);
        let w: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 * 0.01).collect();
        let x: Vec<f32> = (0..batch * k).map(|i| (i % 5) as f32).collect();
        let pk = Packed::new(isa, &w, None, n, 1, k);
        let mut out = vec![0.0f32; batch * n];
        let secs = time(51, || {
            igemm::fully_connected(std::hint::black_box(&x), batch, &pk, Clamp::NONE, &mut out);
            std::hint::black_box(&mut out);
        });
        rows.push((format!("fully connected: batch {batch}, {k} -> {n}"), 2.0 * (batch * k * n) as f64 / secs / 1e9));
    }
    // Depthwise 3x3 and 5x5.
    for (hw, c, k) in [(112usize, 32usize, 3usize), (48, 64, 5)] {
        let (oh, pt) = out_size_and_pad(hw, k, 1, 1, true).unwrap();
        let g = Window {
            batch: 1,
            in_h: hw,
            in_w: hw,
            out_h: oh,
            out_w: oh,
            k_h: k,
            k_w: k,
            stride_h: 1,
            stride_w: 1,
            dil_h: 1,
            dil_w: 1,
            pad_top: pt,
            pad_left: pt,
        };
        let x: Vec<f32> = (0..hw * hw * c).map(|i| (i % 13) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..k * k * c).map(|i| (i % 7) as f32 * 0.01).collect();
        let mut out = vec![0.0f32; oh * oh * c];
        let secs = time(21, || {
            ferrite_kernels::conv::depthwise_conv2d(std::hint::black_box(&x), c, 1, &w, None, &g, Clamp::NONE, &mut out, 0..oh);
            std::hint::black_box(&mut out);
        });
        rows.push((format!("depthwise {k}x{k}: {hw}x{hw}x{c}"), 2.0 * (oh * oh * c * k * k) as f64 / secs / 1e9));
    }
    for (name, gf) in rows {
        let pct = if peak > 0.0 { format!("{:5.1}% of peak", 100.0 * gf / peak) } else { String::new() };
        println!("{name:<48} {gf:7.1} GFLOP/s  {pct}");
    }
}
