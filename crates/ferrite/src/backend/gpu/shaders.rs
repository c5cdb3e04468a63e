//! The WGSL compute shaders. Tensors are stored as `T`: `f32`, or `f16` in the
//! opt-in float16 precision (adapters with `SHADER_F16`), where only storage is
//! halved: every load is widened to f32 and arithmetic and accumulation stay f32,
//! so the error is float16 rounding of inputs, weights and outputs only, not of
//! long sums. Every shader reads its parameters from
//! binding 0 (an array of u32 words; floats are bit-cast), its inputs from the
//! following bindings (read-only) and writes its last binding (read-write): one
//! buffer per tensor, so no buffer is ever bound read-only and writable in the same
//! dispatch. Element-wise shaders take one invocation per output element over a
//! grid folded into two dimensions (`linear_index`), so maps past 65,535 workgroups
//! of 64 still run in one dispatch.

/// Shared by the element-wise shaders: parameter access and the folded grid index.
const PRELUDE: &str = r#"
@group(0) @binding(0) var<storage, read> p: array<u32>;
fn pf(i: u32) -> f32 { return bitcast<f32>(p[i]); }
fn pi(i: u32) -> i32 { return bitcast<i32>(p[i]); }
fn linear_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * 64u + lid.x;
}
// A clamp that lets NaN through, as the CPU kernels' fused activations do.
fn act(v: f32, lo: f32, hi: f32) -> f32 {
    if (v < lo) { return lo; }
    if (v > hi) { return hi; }
    return v;
}
"#;

/// `mad(a, b, c)`: `a * b + c` rounded once, as the CPU's FMA GEMM rounds it. On a
/// driver that fuses WGSL `fma` that is `fma` itself (no cost).
const MAD_FUSED: &str = r#"
fn mad(a: f32, b: f32, c: f32) -> f32 { return fma(a, b, c); }
"#;

/// `mad` on a driver that rounds `fma` twice (lavapipe lowers it to a multiply and
/// an add): the product's exact low part by Dekker's two-product, with halves made
/// by masking the significand (12 bits each, so every partial product is exact),
/// the sum's rounding error by Knuth's two-sum, and the two added to the rounded
/// sum last. In exact f32 arithmetic this is the once-rounded result but for rare
/// ties; on lavapipe 94% of random multiply-adds round as one rounding would (two
/// roundings: 53%), the rest as two (`tests/gpu.rs` measures it; why those escape
/// is not known: the same steps on the host agree every time). Products or sums
/// that are not finite or near overflow take the plain two roundings.
const MAD_EMULATED: &str = r#"
fn hi12(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0xFFFFF000u); }
fn mad(a: f32, b: f32, c: f32) -> f32 {
    let pr = a * b;
    let s = pr + c;
    if (!(abs(pr) < 1e30) || !(abs(s) < 1e30)) { return s; }
    let ah = hi12(a);
    let al = a - ah;
    let bh = hi12(b);
    let bl = b - bh;
    let e = ((ah * bh - pr) + ah * bl + al * bh) + al * bl;
    let z = s - pr;
    let t = (pr - (s - z)) + (c - z);
    return s + (t + e);
}
"#;

/// The WGSL of `mad` (emulated where the driver rounds `fma` twice).
pub(super) fn mad_source(emulate_fma: bool) -> &'static str {
    if emulate_fma {
        MAD_EMULATED
    } else {
        MAD_FUSED
    }
}

/// The shader named `name`, with the prelude, storing tensors as f16 when `half`;
/// `emulate_fma` for drivers that round WGSL `fma` twice.
pub(super) fn source(name: &str, half: bool, emulate_fma: bool) -> Option<String> {
    let body = match name {
        "unary" => UNARY,
        "binary" => BINARY,
        "copy" => COPY,
        "fill" => FILL,
        "conv" => CONV,
        "depthwise" => DEPTHWISE,
        "gemm" => GEMM,
        "pool" => POOL,
        "reduce" => REDUCE,
        "softmax" => SOFTMAX,
        "resize" => RESIZE,
        "transpose_conv" => TRANSPOSE_CONV,
        _ => return None,
    };
    // `enable` must come before any declaration.
    let storage = if half { "enable f16;\nalias T = f16;\n" } else { "alias T = f32;\n" };
    Some(format!("{storage}{PRELUDE}{}{body}", mad_source(emulate_fma)))
}

/// p: [n, op, a, b]. The exp-based activations clamp their argument where the
/// result has saturated, so no intermediate overflows to inf (tanh of a large
/// argument computed as a ratio of exponentials would be inf/inf).
const UNARY: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

// erfc with a relative error below 2e-7 everywhere (a Chebyshev-fitted
// rational form of exp(-z^2) times a polynomial in 1/(1+|z|/2)).
fn erfc_(z: f32) -> f32 {
    let a = abs(z);
    let t = 1.0 / (1.0 + 0.5 * a);
    let poly = -a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * exp(max(poly, -87.0));
    if (z >= 0.0) { return r; }
    return 2.0 - r;
}

fn sigmoid(v: f32) -> f32 {
    let c = clamp(v, -87.0, 87.0);
    if (c >= 0.0) { return 1.0 / (1.0 + exp(-c)); }
    let e = exp(c);
    return e / (1.0 + e);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    let v = f32(x[i]);
    let a = pf(2u);
    let b = pf(3u);
    var r = v;
    switch p[1] {
        case 0u: { r = act(v, a, b); }                         // RELU family: clamp
        case 1u: { r = v * act(v + 3.0, 0.0, 6.0) / 6.0; }     // HARD_SWISH
        case 2u: { r = select(v, v * a, v < 0.0); }            // LEAKY_RELU
        case 3u: { r = sigmoid(v); }                           // LOGISTIC
        case 4u: { r = tanh(clamp(v, -10.0, 10.0)); }          // TANH (saturated past 10)
        case 5u: { r = 0.5 * v * erfc_(-v * 0.70710678118654752); }  // GELU
        case 6u: {                                             // GELU, tanh approximation
            let u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
            r = 0.5 * v * (1.0 + tanh(clamp(u, -10.0, 10.0)));
        }
        case 7u: { r = abs(v); }
        case 8u: { r = -v; }
        case 9u: { r = sqrt(v); }
        case 10u: { r = inverseSqrt(v); }
        case 11u: { r = v * v; }
        case 12u: { r = exp(min(v, 88.7)); }
        case 13u: { r = select(exp(max(v, -88.0)) - 1.0, v, v > 0.0); }  // ELU
        default: { r = v; }
    }
    y[i] = T(r);
}
"#;

/// p: [n, op, lo, hi, dims[6], a_strides[6], b_strides[6]]; a stride of 0
/// broadcasts that dimension.
const BINARY: &str = r#"
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 5; d >= 0; d = d - 1) {
        let dim = p[4u + u32(d)];
        let c = rem % dim;
        rem = rem / dim;
        ia = ia + c * p[10u + u32(d)];
        ib = ib + c * p[16u + u32(d)];
    }
    let u = f32(a[ia]);
    let v = f32(b[ib]);
    var r = 0.0;
    switch p[1] {
        case 0u: { r = u + v; }
        case 1u: { r = u - v; }
        case 2u: { r = u * v; }
        case 3u: { r = u / v; }
        case 4u: { r = max(u, v); }
        case 5u: { r = min(u, v); }
        case 6u: { r = (u - v) * (u - v); }
        case 7u: { r = select(u, u * v, u < 0.0); }  // PRELU: v is alpha
        default: { r = u; }
    }
    y[i] = T(act(r, pf(2u), pf(3u)));
}
"#;

/// p: [n, src_base, dst_base, dims[6], src_strides[6] (i32), dst_strides[6] (i32)]:
/// y[dst] = x[src] over a 6-D index space with signed strides (TRANSPOSE, slices,
/// one input of a CONCATENATION, PAD's interior, DEPTH_TO_SPACE).
const COPY: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    var rem = i;
    var s = pi(1u);
    var t = pi(2u);
    for (var d = 5; d >= 0; d = d - 1) {
        let dim = p[3u + u32(d)];
        let c = i32(rem % dim);
        rem = rem / dim;
        s = s + c * pi(9u + u32(d));
        t = t + c * pi(15u + u32(d));
    }
    y[u32(t)] = x[u32(s)];
}
"#;

/// p: [n, value].
const FILL: &str = r#"
@group(0) @binding(1) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    y[i] = T(pf(1u));
}
"#;

/// General convolution, one invocation per output element. p: [n_out, H, W, C,
/// OH, OW, O, KH, KW, sh, sw, dh, dw, pad_t, pad_l, lo, hi, has_bias, group_c,
/// group_o]; input NHWC, filter OHWI (I = channels per group).
const CONV: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> w: array<T>;
@group(0) @binding(3) var<storage, read> bias: array<T>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    let H = p[1]; let W = p[2]; let C = p[3]; let OH = p[4]; let OW = p[5]; let O = p[6];
    let KH = p[7]; let KW = p[8];
    let gc = p[18]; let go = p[19];
    let o = i % O;
    let ox = (i / O) % OW;
    let oy = (i / (O * OW)) % OH;
    let n = i / (O * OW * OH);
    let c0 = (o / go) * gc;
    var acc = 0.0;
    if (p[17] != 0u) { acc = f32(bias[o]); }
    for (var ky = 0u; ky < KH; ky = ky + 1u) {
        let iy = i32(oy * p[9] + ky * p[11]) - pi(13u);
        if (iy < 0 || iy >= i32(H)) { continue; }
        for (var kx = 0u; kx < KW; kx = kx + 1u) {
            let ix = i32(ox * p[10] + kx * p[12]) - pi(14u);
            if (ix < 0 || ix >= i32(W)) { continue; }
            let xb = ((n * H + u32(iy)) * W + u32(ix)) * C + c0;
            let wb = ((o * KH + ky) * KW + kx) * gc;
            for (var c = 0u; c < gc; c = c + 1u) {
                acc = mad(f32(x[xb + c]), f32(w[wb + c]), acc);
            }
        }
    }
    y[i] = T(act(acc, pf(15u), pf(16u)));
}
"#;

/// Depthwise convolution, any multiplier. p: [n_out, H, W, C, OH, OW, OC, KH, KW,
/// sh, sw, dh, dw, pad_t, pad_l, lo, hi, has_bias, multiplier]; filter [1, KH, KW, OC].
const DEPTHWISE: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> w: array<T>;
@group(0) @binding(3) var<storage, read> bias: array<T>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    let H = p[1]; let W = p[2]; let C = p[3]; let OH = p[4]; let OW = p[5]; let OC = p[6];
    let KH = p[7]; let KW = p[8];
    let oc = i % OC;
    let ox = (i / OC) % OW;
    let oy = (i / (OC * OW)) % OH;
    let n = i / (OC * OW * OH);
    let c = oc / p[18];
    var acc = 0.0;
    if (p[17] != 0u) { acc = f32(bias[oc]); }
    for (var ky = 0u; ky < KH; ky = ky + 1u) {
        let iy = i32(oy * p[9] + ky * p[11]) - pi(13u);
        if (iy < 0 || iy >= i32(H)) { continue; }
        for (var kx = 0u; kx < KW; kx = kx + 1u) {
            let ix = i32(ox * p[10] + kx * p[12]) - pi(14u);
            if (ix < 0 || ix >= i32(W)) { continue; }
            // Rounded twice, as the CPU's depthwise kernels (plain Rust, which never
            // contracts) do; a driver may still contract it.
            acc = acc + f32(x[((n * H + u32(iy)) * W + u32(ix)) * C + c]) * f32(w[(ky * KW + kx) * OC + oc]);
        }
    }
    y[i] = T(act(acc, pf(15u), pf(16u)));
}
"#;

/// Tiled GEMM with workgroup memory: C[b, m, n] = sum_k A[b, m, k] B[b, n, k]
/// (+ bias[n]), clamped. Element addresses come from strides so one shader
/// serves FULLY_CONNECTED (B = weights [N, K]), 1x1 convolutions and BATCH_MATMUL
/// (either operand transposed). p: [M, N, K, batch, a_m, a_k, a_b, b_n, b_k,
/// b_b, lo, hi, has_bias, m_tiles]. Workgroups: x = N tiles, (y, z) = the (M
/// tile, batch) pairs folded past the per-dimension limit.
const GEMM: &str = r#"
@group(0) @binding(1) var<storage, read> A: array<T>;
@group(0) @binding(2) var<storage, read> B: array<T>;
@group(0) @binding(3) var<storage, read> bias: array<T>;
@group(0) @binding(4) var<storage, read_write> C: array<T>;

var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let M = p[0]; let N = p[1]; let K = p[2];
    let lin = wid.z * nwg.y + wid.y;
    let batch = lin / p[13];
    if (batch >= p[3]) { return; }
    let m0 = (lin % p[13]) * 16u;
    let n0 = wid.x * 16u;
    let row = m0 + lid.y;
    let col = n0 + lid.x;
    let abase = batch * p[6];
    let bbase = batch * p[9];
    // The bias first, then the products in k order with fma: the CPU's GEMM
    // kernels sum in this order with FMA, so where the driver fuses fma the two
    // round alike (lavapipe rounds the product first: ~1e-7 apart per op).
    var acc = 0.0;
    if (p[12] != 0u && col < N) { acc = f32(bias[col]); }
    for (var k0 = 0u; k0 < K; k0 = k0 + 16u) {
        // ta[r][k]: A row m0+r, column k0+k; tb[c][k]: B row n0+c, column k0+k.
        let ka = k0 + lid.x;
        var va = 0.0;
        if (row < M && ka < K) { va = f32(A[abase + row * p[4] + ka * p[5]]); }
        ta[lid.y][lid.x] = va;
        let nb = n0 + lid.y;
        var vb = 0.0;
        if (nb < N && ka < K) { vb = f32(B[bbase + nb * p[7] + ka * p[8]]); }
        tb[lid.y][lid.x] = vb;
        workgroupBarrier();
        for (var k = 0u; k < 16u; k = k + 1u) {
            acc = mad(ta[lid.y][k], tb[lid.x][k], acc);
        }
        workgroupBarrier();
    }
    if (row < M && col < N) {
        C[(batch * M + row) * N + col] = T(act(acc, pf(10u), pf(11u)));
    }
}
"#;

/// MAX / AVERAGE_POOL_2D. p: [n_out, H, W, C, OH, OW, KH, KW, sh, sw, pad_t,
/// pad_l, is_max, lo, hi]. The average counts only the taps inside the input.
const POOL: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    let H = p[1]; let W = p[2]; let C = p[3]; let OH = p[4]; let OW = p[5];
    let c = i % C;
    let ox = (i / C) % OW;
    let oy = (i / (C * OW)) % OH;
    let n = i / (C * OW * OH);
    let is_max = p[12] != 0u;
    var acc = 0.0;
    if (is_max) { acc = -3.4028234663852886e38; }
    var count = 0u;
    for (var ky = 0u; ky < p[6]; ky = ky + 1u) {
        let iy = i32(oy * p[8] + ky) - pi(10u);
        if (iy < 0 || iy >= i32(H)) { continue; }
        for (var kx = 0u; kx < p[7]; kx = kx + 1u) {
            let ix = i32(ox * p[9] + kx) - pi(11u);
            if (ix < 0 || ix >= i32(W)) { continue; }
            let v = f32(x[((n * H + u32(iy)) * W + u32(ix)) * C + c]);
            if (is_max) { acc = max(acc, v); } else { acc = acc + v; }
            count = count + 1u;
        }
    }
    if (!is_max) { acc = acc / f32(max(count, 1u)); }
    y[i] = T(act(acc, pf(13u), pf(14u)));
}
"#;

/// Reductions over any axes. p: [n_out, op, count, out_dims[6], out_strides[6]
/// (into the input), red_dims[6], red_strides[6]]; op 0 mean, 1 sum, 2 max, 3 min.
const REDUCE: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    var rem = i;
    var base = 0u;
    for (var d = 5; d >= 0; d = d - 1) {
        let dim = p[3u + u32(d)];
        base = base + (rem % dim) * p[9u + u32(d)];
        rem = rem / dim;
    }
    let op = p[1];
    var acc = 0.0;
    if (op == 2u) { acc = -3.4028234663852886e38; }
    if (op == 3u) { acc = 3.4028234663852886e38; }
    for (var r = 0u; r < p[2]; r = r + 1u) {
        var rr = r;
        var off = base;
        for (var d = 5; d >= 0; d = d - 1) {
            let dim = p[15u + u32(d)];
            off = off + (rr % dim) * p[21u + u32(d)];
            rr = rr / dim;
        }
        let v = f32(x[off]);
        if (op == 2u) { acc = max(acc, v); } else if (op == 3u) { acc = min(acc, v); } else { acc = acc + v; }
    }
    if (op == 0u) { acc = acc / f32(max(p[2], 1u)); }
    y[i] = T(acc);
}
"#;

/// SOFTMAX over the last axis, one invocation per row. p: [rows, len, beta].
const SOFTMAX: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = linear_index(wid, lid, nwg);
    if (r >= p[0]) { return; }
    let len = p[1];
    let beta = pf(2u);
    let base = r * len;
    var m = -3.4028234663852886e38;
    for (var j = 0u; j < len; j = j + 1u) { m = max(m, f32(x[base + j])); }
    var s = 0.0;
    for (var j = 0u; j < len; j = j + 1u) { s = s + exp((f32(x[base + j]) - m) * beta); }
    // The exponentials are computed again rather than kept in y: a float16 y would
    // round them before the division.
    for (var j = 0u; j < len; j = j + 1u) { y[base + j] = T(exp((f32(x[base + j]) - m) * beta) / s); }
}
"#;

/// RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR. p: [n_out, H, W, C, OH, OW,
/// scale_y, scale_x, bilinear, align_corners, half_pixel_centers].
const RESIZE: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    let H = p[1]; let W = p[2]; let C = p[3]; let OH = p[4]; let OW = p[5];
    let c = i % C;
    let ox = (i / C) % OW;
    let oy = (i / (C * OW)) % OH;
    let n = i / (C * OW * OH);
    let sy = pf(6u); let sx = pf(7u);
    let half = p[10] != 0u;
    let base = n * H * W * C + c;
    if (p[8] != 0u) {
        var fy = f32(oy) * sy;
        var fx = f32(ox) * sx;
        if (half) { fy = (f32(oy) + 0.5) * sy - 0.5; fx = (f32(ox) + 0.5) * sx - 0.5; }
        let y0f = floor(fy); let x0f = floor(fx);
        let y0 = u32(max(y0f, 0.0)); let x0 = u32(max(x0f, 0.0));
        let y1 = min(u32(max(ceil(fy), 0.0)), H - 1u); let x1 = min(u32(max(ceil(fx), 0.0)), W - 1u);
        let dy = fy - y0f; let dx = fx - x0f;
        let v00 = f32(x[base + (y0 * W + x0) * C]); let v01 = f32(x[base + (y0 * W + x1) * C]);
        let v10 = f32(x[base + (y1 * W + x0) * C]); let v11 = f32(x[base + (y1 * W + x1) * C]);
        y[i] = T(v00 * (1.0 - dy) * (1.0 - dx) + v01 * (1.0 - dy) * dx + v10 * dy * (1.0 - dx) + v11 * dy * dx);
    } else {
        var fy = f32(oy) * sy;
        var fx = f32(ox) * sx;
        if (half) { fy = (f32(oy) + 0.5) * sy; fx = (f32(ox) + 0.5) * sx; }
        var iy: u32; var ix: u32;
        // Halves round away from zero as LiteRT's std::round does; WGSL's round()
        // goes to even, which picks the other pixel at exactly .5 (align_corners
        // with 7 outputs over 2 or 6 inputs). The coordinates are never negative.
        if (p[9] != 0u) { iy = u32(max(floor(fy + 0.5), 0.0)); ix = u32(max(floor(fx + 0.5), 0.0)); }
        else { iy = u32(max(floor(fy), 0.0)); ix = u32(max(floor(fx), 0.0)); }
        y[i] = x[base + (min(iy, H - 1u) * W + min(ix, W - 1u)) * C];
    }
}
"#;

/// TRANSPOSE_CONV (and MediaPipe's Convolution2DTransposeBias), gathered per
/// output element. p: [n_out, H, W, C, OH, OW, O, KH, KW, sh, sw, pad_t, pad_l,
/// lo, hi, has_bias]; filter [O, KH, KW, C].
const TRANSPOSE_CONV: &str = r#"
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> w: array<T>;
@group(0) @binding(3) var<storage, read> bias: array<T>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p[0]) { return; }
    let H = p[1]; let W = p[2]; let C = p[3]; let OH = p[4]; let OW = p[5]; let O = p[6];
    let KH = p[7]; let KW = p[8]; let sh = i32(p[9]); let sw = i32(p[10]);
    let o = i % O;
    let ox = (i / O) % OW;
    let oy = (i / (O * OW)) % OH;
    let n = i / (O * OW * OH);
    var acc = 0.0;
    if (p[15] != 0u) { acc = f32(bias[o]); }
    for (var ky = 0u; ky < KH; ky = ky + 1u) {
        let ty = i32(oy) + pi(11u) - i32(ky);
        if (ty < 0 || ty % sh != 0) { continue; }
        let iy = ty / sh;
        if (iy >= i32(H)) { continue; }
        for (var kx = 0u; kx < KW; kx = kx + 1u) {
            let tx = i32(ox) + pi(12u) - i32(kx);
            if (tx < 0 || tx % sw != 0) { continue; }
            let ix = tx / sw;
            if (ix >= i32(W)) { continue; }
            let xb = ((n * H + u32(iy)) * W + u32(ix)) * C;
            let wb = ((o * KH + ky) * KW + kx) * C;
            for (var c = 0u; c < C; c = c + 1u) { acc = fma(f32(x[xb + c]), f32(w[wb + c]), acc); }
        }
    }
    y[i] = T(act(acc, pf(13u), pf(14u)));
}
"#;
