//! Kernel micro-benchmarks: achieved GFLOP/s of the GEMM-based convolution and
//! fully-connected kernels and of depthwise convolution, against this machine's
//! measured single-core FMA peak. `cargo bench -p ferrite-kernels`.

use std::time::Instant;

use ferrite_kernels::conv::{out_size_and_pad, Window};
use ferrite_kernels::igemm::{self, Isa, Packed};
use ferrite_kernels::qgemm;
use ferrite_kernels::quant::{quantize_multiplier, QConv, Requant};
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
        // The best of many short repetitions, run for at least half a second: the
        // first ones can run before the core has reached its clock (three gave 95-213
        // GFLOP/s from one run to the next on this machine, below the GEMM's rate).
        let mut best = 0.0f64;
        let started = Instant::now();
        for rep in 0.. {
            if rep >= 3 && started.elapsed().as_secs_f64() > 0.5 {
                break;
            }
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

/// A square `hw` x `hw` map under a `k` x `k` filter at `stride`, SAME padding.
fn square_same(hw: usize, k: usize, stride: usize) -> Window {
    let (oh, pt) = out_size_and_pad(hw, k, stride, 1, true).unwrap();
    Window {
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
    }
}

/// The float GEMM's awkward families, each on the kernel the runtime picks for its
/// output channels: 1x1 convolutions to 1-16 channels on large maps, channel counts
/// just past a panel width, few input channels, tiny maps.
fn narrow_benches(filter: &str) {
    let cases = [
        (256usize, 8usize, 8usize, 1usize),
        (32, 8, 8, 1),
        (64, 8, 8, 1),
        (128, 8, 8, 1),
        (128, 16, 8, 1),
        (64, 48, 8, 1),
        (28, 24, 2, 1),
        (12, 256, 6, 1),
        (128, 16, 16, 1),
        (128, 24, 16, 1),
        (56, 144, 24, 1),
        (64, 144, 24, 1),
        (28, 240, 40, 1),
        (64, 48, 39, 1),
        (16, 384, 88, 1),
        (24, 128, 36, 1),
        (4, 288, 288, 1),
        (2, 288, 288, 1),
    ];
    for (hw, c_in, c_out, k) in cases {
        if !format!("{hw}x{hw}x{c_in} -> {c_out}").contains(filter) {
            continue;
        }
        let (name, gf) = conv_case(Isa::for_channels(c_out), "narrow", hw, c_in, c_out, k, 1);
        println!("{name:<48} {gf:7.1} GFLOP/s");
    }
}

fn conv_case(isa: Isa, name: &str, hw: usize, c_in: usize, c_out: usize, k: usize, stride: usize) -> (String, f64) {
    let g = square_same(hw, k, stride);
    let oh = g.out_h;
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

/// A window over an `h x w` input with SAME padding.
fn same_window(h: usize, w: usize, k_h: usize, k_w: usize, stride: usize) -> Window {
    dilated_window(h, w, k_h, k_w, stride, 1)
}

/// [`same_window`] with dilation `dil` along both axes.
fn dilated_window(h: usize, w: usize, k_h: usize, k_w: usize, stride: usize, dil: usize) -> Window {
    let (out_h, pad_top) = out_size_and_pad(h, k_h, stride, dil, true).unwrap();
    let (out_w, pad_left) = out_size_and_pad(w, k_w, stride, dil, true).unwrap();
    Window { batch: 1, in_h: h, in_w: w, out_h, out_w, k_h, k_w, stride_h: stride, stride_w: stride, dil_h: dil, dil_w: dil, pad_top, pad_left }
}

/// A byte buffer as int8 values (same size, alignment and valid bit patterns).
fn bytemuck_i8(b: &mut [u8]) -> &mut [i8] {
    // SAFETY: u8 and i8 have the same layout and every bit pattern is valid for both.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut i8, b.len()) }
}

fn int8_qconv(g: Window, in_c: usize, out_c: usize, depthwise: bool) -> QConv {
    let (multiplier, shift) = quantize_multiplier(0.0007);
    let rq = Requant { multiplier: vec![multiplier; out_c], shift: vec![shift; out_c], out_zp: -3, min: -128, max: 127 };
    QConv { g, in_c, out_c, depth_multiplier: usize::from(depthwise), in_zp: -128, w_zp: 0, rq }
}

/// int8 kernels by shape family: microseconds per call (the fastest of 501) and
/// giga-operations per second (a multiply-add counts 2), the int8 GEMM by every
/// kernel this CPU runs.
/// `filter`: only the cases whose names contain it.
fn int8_benches(filter: &str) {
    println!("int8 kernels (GEMM ISA {:?})", qgemm::QIsa::detect());
    let run = |name: String, macs: usize, f: &mut dyn FnMut()| {
        if name.contains(filter) {
            // The fastest of many short calls: on a shared machine the median
            // of calls this short mostly measures the neighbours.
            f();
            let secs = (0..501)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min);
            println!("{name:<52} {:8.2} us {:7.1} GOP/s", secs * 1e6, 2.0 * macs as f64 / secs / 1e9);
        }
    };
    for (rows, k, n) in [(64usize, 27usize, 8usize), (64, 288, 32), (64, 64, 64), (64, 576, 128), (1, 64, 64), (1, 1024, 256)] {
        let w: Vec<i8> = (0..n * k).map(|i| (i * 7 % 255) as i8).collect();
        let pk = qgemm::QPacked::new(&w, n, k);
        let a: Vec<u8> = (0..rows * pk.kq()).map(|i| (i * 13 % 256) as u8).collect();
        let mut out = vec![0i32; rows * n];
        for isa in qgemm::QIsa::available() {
            run(format!("gemm {isa:?}: {rows} x {k} x {n}"), rows * k * n, &mut || qgemm::gemm_with(isa, std::hint::black_box(&a), rows, &pk, &mut out));
        }
    }
    for (rows, n) in [(1024usize, 8usize), (64, 64)] {
        let q = int8_qconv(same_window(1, 1, 1, 1, 1), 1, n, false);
        let rr = qgemm::RowRequant::new(&q.rq, n);
        let dots: Vec<i32> = (0..rows * n).map(|i| (i as i32 * 7919) % 100_000 - 50_000).collect();
        let mut out = vec![0i8; rows * n];
        run(format!("requantize {rows} rows x {n}"), 0, &mut || rr.apply(std::hint::black_box(&dots), &mut out));
    }
    // (name, height, width, channels, output channels, filter height, width, stride, dilation)
    let convs = [
        ("first layer", 32, 32, 3, 8, 3, 3, 1, 1),
        ("1x1 few channels", 24, 24, 8, 8, 1, 1, 1, 1),
        ("1x1", 28, 28, 64, 64, 1, 1, 1, 1),
        ("3x3", 14, 14, 32, 32, 3, 3, 1, 1),
        ("3x3 dilated", 14, 14, 32, 32, 3, 3, 1, 2),
        ("3x3 stride 2", 16, 16, 8, 16, 3, 3, 2, 1),
        ("1xN temporal", 1, 49, 40, 64, 1, 5, 1, 1),
    ];
    for (name, h, w, c, oc, kh, kw, stride, dil) in convs {
        let g = dilated_window(h, w, kh, kw, stride, dil);
        let q = int8_qconv(g, c, oc, false);
        let x: Vec<u8> = (0..h * w * c).map(|i| (i * 31 % 256) as u8).collect();
        let wt: Vec<i8> = (0..oc * kh * kw * c).map(|i| (i * 7 % 255) as i8).collect();
        let pk = qgemm::QPacked::new(&wt, oc, kh * kw * c);
        let mut s = qgemm::ConvScratch::new(&pk, &q.rq);
        let mut out = vec![0i8; g.out_h * g.out_w * oc];
        let name = format!("conv {name}: {h}x{w}x{c} -> {oc}, {kh}x{kw}/{stride} dilation {dil}");
        run(name, g.out_h * g.out_w * oc * kh * kw * c, &mut || qgemm::conv_i8(std::hint::black_box(&x), &pk, None, &q, &mut out, &mut s));
    }
    // The 1-D family (audio / sensor maps laid out [1, 1, T, C], 1xN filters,
    // SAME): few-channel first layers, dilation, and uint8 with weight and input
    // zero points away from 128 (the models' legacy uint8 path).
    // (name, T, channels, output channels, filter width, dilation, uint8)
    let conv1d = [
        ("first layer", 128, 6, 16, 5, 1, false),
        ("first layer", 128, 6, 16, 5, 1, true),
        ("mid", 64, 16, 32, 5, 1, true),
        ("last", 32, 32, 64, 5, 1, true),
        ("dilated first layer", 200, 3, 12, 7, 2, false),
        ("dilated first layer", 200, 3, 12, 7, 2, true),
        ("dilated", 100, 12, 24, 7, 2, false),
        ("dilated", 100, 12, 24, 7, 2, true),
        ("dilated", 64, 32, 32, 3, 4, false),
        ("dilated", 50, 24, 48, 7, 2, true),
        ("1x1 narrow", 64, 8, 16, 1, 1, true),
    ];
    for (name, t, c, oc, k, dil, unsigned) in conv1d {
        let (out_w, pad_left) = out_size_and_pad(t, k, 1, dil, true).unwrap();
        let g = Window { batch: 1, in_h: 1, in_w: t, out_h: 1, out_w, k_h: 1, k_w: k, stride_h: 1, stride_w: 1, dil_h: 1, dil_w: dil, pad_top: 0, pad_left };
        let mut q = int8_qconv(g, c, oc, false);
        let x: Vec<u8> = (0..t * c).map(|i| (i * 31 % 256) as u8).collect();
        let wt: Vec<i8> = (0..oc * k * c).map(|i| (i * 7 % 255) as i8).collect();
        let pk = qgemm::QPacked::new(&wt, oc, k * c);
        let mut out = vec![0u8; out_w * oc];
        let macs = out_w * oc * k * c;
        let name = format!("conv1d {name} {}: {t}x{c} -> {oc}, 1x{k} dilation {dil}", if unsigned { "uint8" } else { "int8" });
        if unsigned {
            (q.in_zp, q.w_zp) = (127, 121);
            q.rq = Requant { out_zp: 0, min: 0, max: 255, ..q.rq };
            let mut s = qgemm::ConvScratch::new_u8(&pk, &q.rq);
            run(name, macs, &mut || qgemm::conv_u8(std::hint::black_box(&x), &pk, None, &q, &mut out, &mut s));
        } else {
            let mut s = qgemm::ConvScratch::new(&pk, &q.rq);
            let out = bytemuck_i8(&mut out);
            run(name, macs, &mut || qgemm::conv_i8(std::hint::black_box(&x), &pk, None, &q, out, &mut s));
        }
    }
    // (name, height, width, input channels, multiplier, filter height, width, stride)
    let depthwise = [
        ("3x3", 24, 24, 8, 1, 3, 3, 1),
        ("3x3 stride 2", 24, 24, 8, 1, 3, 3, 2),
        ("3x3", 56, 56, 64, 1, 3, 3, 1),
        ("3x3 small map", 25, 5, 64, 1, 3, 3, 1),
        ("3x3 stride 2", 49, 40, 24, 1, 3, 3, 2),
        ("1xN temporal", 1, 49, 64, 1, 1, 5, 1),
        ("Nx1 temporal column", 101, 1, 96, 1, 9, 1, 2),
        ("Nx1 temporal column", 51, 1, 96, 1, 9, 1, 1),
        ("one channel x16", 49, 40, 1, 16, 3, 3, 1),
        ("one channel x8", 96, 96, 1, 8, 5, 5, 2),
    ];
    for (name, h, w, c, m, kh, kw, stride) in depthwise {
        let g = same_window(h, w, kh, kw, stride);
        let mut q = int8_qconv(g, c, c * m, true);
        q.depth_multiplier = m;
        let x: Vec<u8> = (0..h * w * c).map(|i| (i * 31 % 256) as u8).collect();
        let wt: Vec<i8> = (0..kh * kw * c * m).map(|i| (i * 7 % 255) as i8).collect();
        let mut d = qgemm::Depthwise::new(&wt, &q);
        let mut out = vec![0i8; g.out_h * g.out_w * c * m];
        let name = format!("depthwise {name}: {h}x{w}x{c} x{m}, {kh}x{kw}/{stride}");
        run(name, g.out_h * g.out_w * c * m * kh * kw, &mut || qgemm::depthwise_i8(std::hint::black_box(&x), &mut d, None, &q, &mut out));
    }
}

/// CPU time this thread has run, in seconds (`CLOCK_THREAD_CPUTIME_ID`; 0 where
/// it cannot be read).
fn thread_cpu_secs() -> f64 {
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn clock_gettime(clock: i32, ts: *mut [i64; 2]) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut ts = [0i64; 2];
        // SAFETY: `ts` is a writable timespec (two 64-bit fields on 64-bit Linux).
        if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return ts[0] as f64 + ts[1] as f64 * 1e-9;
        }
    }
    #[allow(unreachable_code)]
    0.0
}

/// First layers of image models (RGB and gray inputs, 3x3 to 7x7 filters at
/// stride 1 and 2, 8 to 64 output channels, SAME padding, a ReLU6) in GFLOP/s:
/// the implicit GEMM with merged filter rows, then [`conv::FirstLayer`].
fn first_layer_benches(filter: &str) {
    use ferrite_kernels::conv::FirstLayer;
    let isa = Isa::detect();
    let cases = [
        (224usize, 3usize, 24usize, 3usize, 2usize),
        (256, 3, 24, 3, 2),
        (256, 3, 16, 3, 2),
        (192, 3, 32, 5, 2),
        (224, 3, 32, 3, 2),
        (224, 3, 64, 7, 2),
        (128, 3, 8, 3, 1),
        (128, 3, 16, 3, 1),
        (96, 1, 16, 3, 2),
        (96, 1, 32, 3, 1),
        (160, 4, 40, 3, 2),
        (112, 3, 48, 3, 2),
        (64, 3, 12, 5, 1),
    ];
    let relu6 = Clamp { min: 0.0, max: 6.0 };
    for (hw, c, n, k, s) in cases {
        let name = format!("first {k}x{k}/{s}: {hw}x{hw}x{c} -> {n}");
        if !name.contains(filter) {
            continue;
        }
        let g = square_same(hw, k, s);
        let oh = g.out_h;
        let x: Vec<f32> = (0..hw * hw * c).map(|i| (i % 13) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..n * k * k * c).map(|i| (i % 7) as f32 * 0.01).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut out = vec![0.0f32; oh * oh * n];
        let flops = 2.0 * (oh * oh * n * k * k * c) as f64;
        // The least CPU time of many calls: this machine may be shared, and a call
        // preempted midway would count the other programs' time in wall-clock terms.
        let best = |f: &mut dyn FnMut()| {
            f();
            (0..200)
                .map(|_| {
                    let t0 = thread_cpu_secs();
                    f();
                    thread_cpu_secs() - t0
                })
                .fold(f64::INFINITY, f64::min)
        };
        let pk = Packed::with_merged_rows(Isa::for_channels(n), &w, Some(&b), n, k, k, c);
        let mut scratch = pk.scratch(&g);
        let gemm = best(&mut || {
            igemm::conv2d(std::hint::black_box(&x), &pk, &g, relu6, &mut out, 0..oh, &mut scratch);
        });
        let first = FirstLayer::new(&w, Some(&b), n, k, k, c).map(|fl| {
            let mut sc = fl.scratch(&g);
            best(&mut || {
                fl.run(std::hint::black_box(&x), &g, relu6, &mut out, 0..oh, &mut sc);
            })
        });
        let first = first.map_or("-".to_string(), |t| format!("{:7.1} GFLOP/s ({:6.1} us)", flops / t / 1e9, t * 1e6));
        println!("{name:<36} gemm {:7.1} GFLOP/s ({:6.1} us)  first {first}  [{isa:?}]", flops / gemm / 1e9, gemm * 1e6);
    }
}

/// Float depthwise layers of the shapes mobile vision models use (3x3 and 5x5
/// filters at stride 1 and 2, SAME padding, channel counts that are multiples of 8
/// and of 16, maps from 7 to 112 pixels wide, a ReLU6), in GFLOP/s.
fn float_depthwise_benches() {
    let cases = [
        (112usize, 24usize, 3usize, 1usize),
        (40, 24, 3, 1),
        (28, 144, 3, 1),
        (56, 144, 3, 1),
        (28, 96, 3, 1),
        (14, 480, 3, 1),
        (14, 672, 5, 1),
        (7, 1152, 5, 1),
        (7, 1152, 3, 1),
        (112, 64, 3, 2),
        (56, 144, 5, 2),
        (56, 24, 3, 2),
        (28, 240, 3, 2),
        (14, 672, 5, 2),
        (14, 288, 3, 2),
        (128, 24, 3, 1),
        (128, 16, 3, 1),
        (128, 8, 3, 1),
        (256, 8, 3, 1),
        (64, 24, 3, 1),
        (16, 384, 3, 1),
        (16, 88, 3, 1),
        (128, 64, 3, 2),
        (34, 192, 3, 2),
        (20, 528, 5, 2),
        (64, 144, 5, 2),
        (96, 32, 5, 1),
        (48, 64, 5, 1),
        (24, 128, 5, 1),
        (12, 256, 5, 1),
        (64, 8, 5, 1),
        (64, 16, 5, 1),
        (64, 24, 5, 1),
    ];
    let filter = std::env::var("FDW_ONLY").unwrap_or_default();
    for (hw, c, k, s) in cases {
        if !filter.is_empty() && !format!("{k}x{k}/{s}: {hw}x{hw}x{c}").contains(filter.as_str()) {
            continue;
        }
        let g = square_same(hw, k, s);
        let oh = g.out_h;
        // Input and output start on a cache line, as tensors in ferrite's arena do;
        // `FDW_SHIFT=K` starts them K floats past one instead (K = 4: where large
        // blocks from the system allocator start, and where the arena's tensors did
        // before it was allocated by cache lines).
        let xa: Vec<f32> = (0..hw * hw * c + 16).map(|i| (i % 13) as f32 * 0.1).collect();
        let mut oa = vec![0.0f32; oh * oh * c + 16];
        let shift = std::env::var("FDW_SHIFT").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        let xo = ((64 - (xa.as_ptr() as usize % 64)) / 4 + shift) % 16;
        let oo = ((64 - (oa.as_ptr() as usize % 64)) / 4 + shift) % 16;
        let x = &xa[xo..xo + hw * hw * c];
        let out = &mut oa[oo..oo + oh * oh * c];
        // Weights on a cache line too, or `FDW_WSHIFT=K` floats past one (constant
        // weights are read in place from the model file, at whatever alignment it gives).
        let wa: Vec<f32> = (0..k * k * c + 16).map(|i| (i % 7) as f32 * 0.01).collect();
        let wshift = std::env::var("FDW_WSHIFT").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        let wo = ((64 - (wa.as_ptr() as usize % 64)) / 4 + wshift) % 16;
        let w = &wa[wo..wo + k * k * c];
        let b: Vec<f32> = (0..c).map(|i| (i % 5) as f32 * 0.1).collect();
        let relu6 = Clamp { min: 0.0, max: 6.0 };
        // The fastest of several medians: this machine may be shared.
        let secs = (0..5)
            .map(|_| {
                time(41, || {
                    ferrite_kernels::conv::depthwise_conv2d(std::hint::black_box(x), c, 1, w, Some(&b), &g, relu6, out, 0..oh);
                    std::hint::black_box(&mut *out);
                })
            })
            .fold(f64::INFINITY, f64::min);
        println!("depthwise {k}x{k}/{s}: {hw}x{hw}x{c:<5} {:7.1} GFLOP/s", 2.0 * (oh * oh * c * k * k) as f64 / secs / 1e9);
    }
}

fn main() {
    // `cargo bench -p ferrite-kernels -- int8 [FILTER]`: the int8 kernels alone.
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "int8") {
        int8_benches(args.get(i + 1).filter(|f| !f.starts_with("--")).map_or("", |f| f.as_str()));
        return;
    }
    // `cargo bench -p ferrite-kernels -- first`: first-layer convolutions (1-4
    // input channels), the implicit GEMM beside the first-layer kernel.
    if let Some(i) = args.iter().position(|a| a == "first") {
        first_layer_benches(args.get(i + 1).filter(|f| !f.starts_with("--")).map_or("", |f| f.as_str()));
        return;
    }
    // `cargo bench -p ferrite-kernels -- dw`: the float depthwise families alone.
    if args.iter().any(|a| a == "dw") {
        float_depthwise_benches();
        return;
    }
    // `cargo bench -p ferrite-kernels -- narrow`: the float GEMM on few output
    // channels, channel counts off the panel width, and tiny maps.
    if let Some(i) = args.iter().position(|a| a == "narrow") {
        narrow_benches(args.get(i + 1).filter(|f| !f.starts_with("--")).map_or("", |f| f.as_str()));
        return;
    }
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
        let g = square_same(hw, k, 1);
        let oh = g.out_h;
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
    int8_benches("");
}
