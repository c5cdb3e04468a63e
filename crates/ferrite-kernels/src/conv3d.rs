//! 3-D convolutions over NDHWC tensors (float32): CONV_3D with a DHWIO filter and
//! CONV_3D_TRANSPOSE with a DHWOI filter, both with strides, dilations, padding and
//! a clamp for the fused activation.
//!
//! Direct loops: each output position gathers its taps, and the innermost loop runs
//! over contiguous channels of input and filter. Video and volumetric blocks are
//! small enough that a packed GEMM would not pay for its packing here.

use crate::Clamp;

/// Geometry of a 3-D convolution: sizes per axis are (depth, height, width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window3 {
    /// Batch size.
    pub batch: usize,
    /// Input spatial sizes.
    pub input: [usize; 3],
    /// Output spatial sizes.
    pub output: [usize; 3],
    /// Filter spatial sizes.
    pub kernel: [usize; 3],
    /// Strides.
    pub stride: [usize; 3],
    /// Dilations.
    pub dilation: [usize; 3],
    /// Padding before the first element, per axis.
    pub pad: [usize; 3],
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
}

impl Window3 {
    /// Input coordinate on axis `a` for output coordinate `o` and tap `k` (forward
    /// convolution), or `None` in the padding.
    #[inline(always)]
    fn tap(&self, a: usize, o: usize, k: usize) -> Option<usize> {
        (o * self.stride[a] + k * self.dilation[a]).checked_sub(self.pad[a]).filter(|&i| i < self.input[a])
    }
}

/// Checks CONV_3D's shapes and derives its geometry: `x` [batch, d, h, w, c] and
/// `filter` [kd, kh, kw, c, out_c]; `same` pads as TensorFlow's SAME (half before,
/// the odd one after), else VALID. Errors say what does not fit.
pub fn conv3d_geometry(x: &[usize], filter: &[usize], stride: [usize; 3], dilation: [usize; 3], same: bool) -> Result<Window3, String> {
    let ([n, d, h, w, c], [kd, kh, kw, fc, oc]) = (rank5(x, "input")?, rank5(filter, "filter")?);
    if fc != c || c == 0 || oc == 0 {
        return Err(format!("filter {filter:?} does not match input {x:?}"));
    }
    let mut output = [0; 3];
    let mut pad = [0; 3];
    for (a, (&size, &k)) in [d, h, w].iter().zip(&[kd, kh, kw]).enumerate() {
        let (o, p) = crate::conv::out_size_and_pad(size, k, stride[a], dilation[a], same)
            .ok_or_else(|| format!("window {:?} (dilation {dilation:?}, stride {stride:?}) does not fit input {x:?}", [kd, kh, kw]))?;
        output[a] = o;
        pad[a] = p;
    }
    Ok(Window3 { batch: n, input: [d, h, w], output, kernel: [kd, kh, kw], stride, dilation, pad, in_c: c, out_c: oc })
}

/// Checks CONV_3D_TRANSPOSE's shapes and derives its geometry (in the forward
/// convolution's view, see [`conv3d_transpose`]): `out` is the requested output
/// shape [batch, od, oh, ow, out_c], `filter` [kd, kh, kw, out_c, c], `x`
/// [batch, d, h, w, c]. The padding is the forward convolution's from the output
/// back onto `x`.
pub fn conv3d_transpose_geometry(
    out: &[usize],
    filter: &[usize],
    x: &[usize],
    stride: [usize; 3],
    dilation: [usize; 3],
    same: bool,
) -> Result<Window3, String> {
    let ([n, od, oh, ow, oc], [kd, kh, kw, fo, fi], [xn, d, h, w, c]) = (rank5(out, "output_shape")?, rank5(filter, "filter")?, rank5(x, "input")?);
    if xn != n || fo != oc || fi != c || c == 0 || oc == 0 {
        return Err(format!("output_shape {out:?}, filter {filter:?} and input {x:?} do not fit together"));
    }
    if stride.contains(&0) || dilation.contains(&0) {
        return Err(format!("stride {stride:?} and dilation {dilation:?} must be positive"));
    }
    let mut pad = [0; 3];
    for (a, ((&o, &i), &k)) in [od, oh, ow].iter().zip(&[d, h, w]).zip(&[kd, kh, kw]).enumerate() {
        // The span the input covers through the filter; checked for every padding,
        // so the kernels' coordinate arithmetic cannot overflow.
        let span = (k.max(1) - 1).checked_mul(dilation[a]).and_then(|e| (i.max(1) - 1).checked_mul(stride[a])?.checked_add(e + 1));
        let span = span.ok_or_else(|| format!("stride {stride:?} and dilation {dilation:?} overflow for input {x:?}"))?;
        if same {
            pad[a] = span.saturating_sub(o) / 2;
        }
    }
    Ok(Window3 { batch: n, input: [od, oh, ow], output: [d, h, w], kernel: [kd, kh, kw], stride, dilation, pad, in_c: oc, out_c: c })
}

fn rank5(s: &[usize], what: &str) -> Result<[usize; 5], String> {
    <[usize; 5]>::try_from(s).map_err(|_| format!("{what} must be 5-D, got {s:?}"))
}

/// CONV_3D: `x` [batch, d, h, w, in_c], `filter` [kd, kh, kw, in_c, out_c],
/// optional `bias` [out_c], into `y` [batch, od, oh, ow, out_c].
pub fn conv3d(x: &[f32], filter: &[f32], bias: Option<&[f32]>, g: &Window3, clamp: Clamp, y: &mut [f32]) {
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [kd, kh, kw] = g.kernel;
    let (ic, oc) = (g.in_c, g.out_c);
    for n in 0..g.batch {
        for z in 0..od {
            for yy in 0..oh {
                for xx in 0..ow {
                    // Accumulate in the output element itself: no scratch per run.
                    let acc = &mut y[(((n * od + z) * oh + yy) * ow + xx) * oc..][..oc];
                    match bias {
                        Some(b) => acc.copy_from_slice(&b[..oc]),
                        None => acc.fill(0.0),
                    }
                    for a in 0..kd {
                        let Some(iz) = g.tap(0, z, a) else { continue };
                        for b in 0..kh {
                            let Some(iy) = g.tap(1, yy, b) else { continue };
                            for c in 0..kw {
                                let Some(ix) = g.tap(2, xx, c) else { continue };
                                let xin = &x[(((n * id + iz) * ih + iy) * iw + ix) * ic..][..ic];
                                let taps = &filter[((a * kh + b) * kw + c) * ic * oc..][..ic * oc];
                                for (ci, &v) in xin.iter().enumerate() {
                                    for (s, &w) in acc.iter_mut().zip(&taps[ci * oc..(ci + 1) * oc]) {
                                        *s += v * w;
                                    }
                                }
                            }
                        }
                    }
                    for o in acc.iter_mut() {
                        *o = o.max(clamp.min).min(clamp.max);
                    }
                }
            }
        }
    }
}

/// CONV_3D_TRANSPOSE: the gradient of CONV_3D with respect to its input. `x`
/// [batch, d, h, w, in_c] is scattered through `filter` [kd, kh, kw, out_c, in_c]
/// into `y` [batch, od, oh, ow, out_c]; `g.input` is the size of `y` and
/// `g.output` that of `x` (the forward convolution's view), `g.in_c` is `y`'s
/// channels and `g.out_c` `x`'s.
pub fn conv3d_transpose(x: &[f32], filter: &[f32], bias: Option<&[f32]>, g: &Window3, clamp: Clamp, y: &mut [f32]) {
    let [yd, yh, yw] = g.input;
    let [xd, xh, xw] = g.output;
    let [kd, kh, kw] = g.kernel;
    // Channels: y has g.in_c, x has g.out_c (the forward convolution's naming).
    let (yc, xc) = (g.in_c, g.out_c);
    y.fill(0.0);
    for n in 0..g.batch {
        for z in 0..xd {
            for yy in 0..xh {
                for xx in 0..xw {
                    let xin = &x[(((n * xd + z) * xh + yy) * xw + xx) * xc..][..xc];
                    for a in 0..kd {
                        let Some(oz) = g.tap(0, z, a) else { continue };
                        for b in 0..kh {
                            let Some(oy) = g.tap(1, yy, b) else { continue };
                            for c in 0..kw {
                                let Some(ox) = g.tap(2, xx, c) else { continue };
                                let out = &mut y[(((n * yd + oz) * yh + oy) * yw + ox) * yc..][..yc];
                                let taps = &filter[((a * kh + b) * kw + c) * yc * xc..][..yc * xc];
                                for (co, o) in out.iter_mut().enumerate() {
                                    let w = &taps[co * xc..(co + 1) * xc];
                                    *o += w.iter().zip(xin).map(|(w, v)| w * v).sum::<f32>();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for px in y.chunks_exact_mut(yc) {
        for (co, o) in px.iter_mut().enumerate() {
            let v = *o + bias.map_or(0.0, |b| b[co]);
            *o = v.max(clamp.min).min(clamp.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one output element at a time, with signed coordinates.
    fn naive(x: &[f32], f: &[f32], bias: &[f32], g: &Window3) -> Vec<f32> {
        let [id, ih, iw] = g.input;
        let [od, oh, ow] = g.output;
        let [kd, kh, kw] = g.kernel;
        let (ic, oc) = (g.in_c, g.out_c);
        let mut y = vec![0f32; g.batch * od * oh * ow * oc];
        for n in 0..g.batch {
            for (z, yy, xx) in (0..od).flat_map(|z| (0..oh).flat_map(move |a| (0..ow).map(move |b| (z, a, b)))) {
                for o in 0..oc {
                    let mut s = bias[o];
                    for (a, b, c) in (0..kd).flat_map(|a| (0..kh).flat_map(move |b| (0..kw).map(move |c| (a, b, c)))) {
                        let p = |o: usize, k: usize, ax: usize| (o * g.stride[ax] + k * g.dilation[ax]) as i64 - g.pad[ax] as i64;
                        let (pz, py, px) = (p(z, a, 0), p(yy, b, 1), p(xx, c, 2));
                        if pz < 0 || py < 0 || px < 0 || pz >= id as i64 || py >= ih as i64 || px >= iw as i64 {
                            continue;
                        }
                        for i in 0..ic {
                            let xv = x[(((n * id + pz as usize) * ih + py as usize) * iw + px as usize) * ic + i];
                            s += xv * f[(((a * kh + b) * kw + c) * ic + i) * oc + o];
                        }
                    }
                    y[(((n * od + z) * oh + yy) * ow + xx) * oc + o] = s;
                }
            }
        }
        y
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 17) as f32 / 8.0 - 1.0).collect()
    }

    fn geometry() -> Window3 {
        // Strides 2/1/2, a dilation, padding on two axes, odd sizes.
        Window3 { batch: 2, input: [5, 4, 7], output: [3, 4, 3], kernel: [2, 3, 3], stride: [2, 1, 2], dilation: [1, 2, 1], pad: [0, 2, 0], in_c: 3, out_c: 4 }
    }

    #[test]
    fn conv3d_matches_its_definition() {
        let g = geometry();
        let x = values(g.batch * 5 * 4 * 7 * 3, 1);
        let f = values(2 * 3 * 3 * 3 * 4, 2);
        let b = values(4, 3);
        let mut y = vec![0f32; 2 * 3 * 4 * 3 * 4];
        conv3d(&x, &f, Some(&b), &g, Clamp::NONE, &mut y);
        let want = naive(&x, &f, &b, &g);
        for (a, w) in y.iter().zip(&want) {
            assert!((a - w).abs() < 1e-4, "{a} vs {w}");
        }
        conv3d(&x, &f, Some(&b), &g, Clamp::RELU, &mut y);
        assert!(y.iter().zip(&want).all(|(a, w)| (a - w.max(0.0)).abs() < 1e-4));
    }

    #[test]
    fn transpose_is_the_adjoint_of_conv3d() {
        // <conv(x), u> == <x, conv_transpose(u)>: the transpose scatters through the
        // same taps the convolution gathers from.
        let g = geometry();
        let (xn, un) = (g.batch * 5 * 4 * 7 * 3, g.batch * 3 * 4 * 3 * 4);
        let x = values(xn, 4);
        let u = values(un, 5);
        let f = values(2 * 3 * 3 * 3 * 4, 6);
        let mut cx = vec![0f32; un];
        conv3d(&x, &f, None, &g, Clamp::NONE, &mut cx);
        // The transpose's filter is DHWOI with O its output channels (x's 3) and I its
        // input channels (u's 4): the forward DHWIO filter's layout, read as is.
        let tg = Window3 { in_c: 3, out_c: 4, ..g };
        let mut tu = vec![0f32; xn];
        conv3d_transpose(&u, &f, None, &tg, Clamp::NONE, &mut tu);
        let lhs: f32 = cx.iter().zip(&u).map(|(a, b)| a * b).sum();
        let rhs: f32 = x.iter().zip(&tu).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-2 * lhs.abs().max(1.0), "{lhs} vs {rhs}");
    }
}
