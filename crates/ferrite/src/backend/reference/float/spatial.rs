//! Mirror padding, space/batch rearrangements, the normalizations along the last
//! dimension, ATAN2, and the signal ops (RFFT2D as the direct sum of its
//! definition, COMPLEX_ABS, REAL, IMAG), written from their definitions: each output element is
//! found from its own multi-index (the input element it mirrors or moves from,
//! or the padding), or computed from the input elements the definition names,
//! sums in f64.

use super::{broadcast_shapes, broadcast_source, count, input, output, ravel, require_f32, runtime, unravel};
use crate::backend::{Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;

/// MIRROR_PAD: along each dimension, output position `i` reads input position
/// `i - before`, mirrored at the edges: REFLECT maps `-k` to `k` and `n - 1 + k`
/// to `n - 1 - k`; SYMMETRIC maps `-k` to `k - 1` and `n - 1 + k` to `n - k`.
pub(crate) fn mirror_pad(op: &OpContext<'_>) -> Result<Built> {
    let x = op.input(0)?;
    let OpParams::MirrorPad { symmetric } = op.op.params else { return Err(op.bad("missing MirrorPad options")) };
    let p = op.const_ints(1)?;
    let r = x.shape.len();
    let limit = |d: usize| x.shape[d] as i64 - if symmetric { 0 } else { 1 };
    if p.len() != 2 * r || p.chunks(2).enumerate().any(|(d, c)| c.iter().any(|&v| v < 0 || v > limit(d))) {
        return Err(op.bad(format!("paddings {p:?} invalid for shape {:?}", x.shape)));
    }
    let shape = x.shape.clone();
    let before: Vec<i64> = p.iter().step_by(2).copied().collect();
    let out_shape: Vec<usize> = shape.iter().zip(p.chunks(2)).map(|(&s, c)| s + (c[0] + c[1]) as usize).collect();
    let es = x.dtype.size().ok_or_else(|| op.unsupported("element type without a size"))?;
    let (n_in, n_out) = (count(op, &shape, es)?, count(op, &out_shape, es)?);
    let os = out_shape.clone();
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let out = output::<u8>(outs, 0, n_out * es)?;
            let (mut at, mut from) = (vec![0; r], vec![0; r]);
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                unravel(e, &os, &mut at);
                for d in 0..r {
                    let (n, i) = (shape[d] as i64, at[d] as i64 - before[d]);
                    let m = if i < 0 {
                        if symmetric {
                            -i - 1
                        } else {
                            -i
                        }
                    } else if i >= n {
                        if symmetric {
                            2 * n - 1 - i
                        } else {
                            2 * n - 2 - i
                        }
                    } else {
                        i
                    };
                    from[d] = usize::try_from(m).ok().filter(|&m| m < shape[d]).ok_or_else(|| runtime("MIRROR_PAD: padding past one reflection"))?;
                }
                let s = ravel(&from, &shape);
                o.copy_from_slice(&src[s * es..(s + 1) * es]);
            }
            Ok(())
        }),
    })
}

/// SPACE_TO_BATCH_ND (`to_batch`) and BATCH_TO_SPACE_ND. In space-to-batch
/// terms: output batch `q * b + n`, where `q` enumerates block offsets
/// `(o_1..o_m)` row-major, holds at spatial `y_k` the input element of batch `n`
/// at `y_k * block_k + o_k - pad_before_k` (zero, or the zero point, when that is
/// padding). Batch-to-space reads the same relation backwards, with crops.
pub(crate) fn space_batch(op: &OpContext<'_>, to_batch: bool) -> Result<Built> {
    let x = op.input(0)?;
    let (block, pc) = (op.const_ints(1)?, op.const_ints(2)?);
    let (r, m) = (x.shape.len(), block.len());
    if m == 0 || m + 1 > r || pc.len() != 2 * m || block.iter().any(|&b| !(1..=1 << 16).contains(&b)) || pc.iter().any(|&v| !(0..=1 << 24).contains(&v)) {
        return Err(op.bad(format!("block {block:?} and paddings/crops {pc:?} for shape {:?}", x.shape)));
    }
    let block: Vec<usize> = block.iter().map(|&b| b as usize).collect();
    let prod: usize = block.iter().product();
    let before: Vec<usize> = pc.iter().step_by(2).map(|&v| v as usize).collect();
    let mut out_shape = x.shape.clone();
    for k in 0..m {
        let (s, extra) = (x.shape[k + 1], (pc[2 * k] + pc[2 * k + 1]) as usize);
        out_shape[k + 1] = if to_batch {
            if !(s + extra).is_multiple_of(block[k]) {
                return Err(op.bad("padded size not a multiple of the block"));
            }
            (s + extra) / block[k]
        } else {
            (s * block[k]).checked_sub(extra).ok_or_else(|| op.bad("crops larger than the dimension"))?
        };
    }
    if to_batch {
        out_shape[0] = x.shape[0] * prod;
    } else {
        if !x.shape[0].is_multiple_of(prod) {
            return Err(op.bad("batch not a multiple of the block"));
        }
        out_shape[0] = x.shape[0] / prod;
    }
    let es = x.dtype.size().ok_or_else(|| op.unsupported("element type without a size"))?;
    let (n_in, n_out) = (count(op, &x.shape, es)?, count(op, &out_shape, es)?);
    let zp = x.quant.and_then(|q| q.zero_point.first().copied()).unwrap_or(0);
    let fill: Vec<u8> = zp.to_le_bytes()[..es].to_vec();
    let (ins_shape, os) = (x.shape.clone(), out_shape.clone());
    Ok(Built {
        outputs: vec![(x.dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let src = input::<u8>(ins, 0, n_in * es)?;
            let out = output::<u8>(outs, 0, n_out * es)?;
            // The space side (`[b, spatial.., rest..]`) and the batch side of the relation.
            let (space, batch) = if to_batch { (&ins_shape, &os) } else { (&os, &ins_shape) };
            let b = space[0];
            let (mut at, mut other) = (vec![0; r], vec![0; r]);
            for (e, o) in out.chunks_exact_mut(es).enumerate() {
                unravel(e, &os, &mut at);
                let found = if to_batch {
                    // `at` is on the batch side: find its space element.
                    let mut q = at[0] / b;
                    other[0] = at[0] % b;
                    let mut inside = true;
                    for k in (0..m).rev() {
                        let off = q % block[k];
                        q /= block[k];
                        let p = (at[k + 1] * block[k] + off) as i64 - before[k] as i64;
                        inside &= p >= 0 && (p as usize) < space[k + 1];
                        other[k + 1] = p.max(0) as usize;
                    }
                    other[m + 1..].copy_from_slice(&at[m + 1..]);
                    inside.then(|| ravel(&other, space))
                } else {
                    // `at` is on the space side: find its batch element.
                    let mut q = 0;
                    for k in 0..m {
                        let p = at[k + 1] + before[k];
                        q = q * block[k] + p % block[k];
                        other[k + 1] = p / block[k];
                    }
                    other[0] = q * b + at[0];
                    other[m + 1..].copy_from_slice(&at[m + 1..]);
                    Some(ravel(&other, batch))
                };
                match found {
                    Some(s) => o.copy_from_slice(&src[s * es..(s + 1) * es]),
                    None => o.copy_from_slice(&fill),
                }
            }
            Ok(())
        }),
    })
}

/// L2_NORMALIZATION (`l2`): each element over the L2 norm of its row along the
/// last dimension (at least 1e-6), then the fused activation; and
/// LOCAL_RESPONSE_NORMALIZATION: each element times
/// `(bias + alpha * sum of the squares within radius)^-beta`.
pub(crate) fn normalize(op: &OpContext<'_>, l2: bool) -> Result<Built> {
    require_f32(op, &[0])?;
    let s = op.input(0)?.shape.clone();
    let depth = *s.last().ok_or_else(|| op.bad("normalization of a scalar"))?;
    let n = count(op, &s, 4)?;
    let (bounds, lrn) = match op.op.params {
        OpParams::Activation(a) if l2 => (super::clamp_bounds(a), None),
        OpParams::LocalResponseNorm { radius, bias, alpha, beta } if !l2 && radius >= 0 => {
            ((f32::NEG_INFINITY, f32::INFINITY), Some((radius as usize, f64::from(bias), f64::from(alpha), f64::from(beta))))
        }
        _ => return Err(op.bad("missing or invalid normalization options")),
    };
    Ok(Built {
        outputs: vec![(DType::F32, s)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n)?;
            let out = output::<f32>(outs, 0, n)?;
            for (e, o) in out.iter_mut().enumerate() {
                let (row, c) = (e / depth * depth, e % depth);
                let v = f64::from(x[e]);
                *o = match lrn {
                    None => {
                        let sq: f64 = x[row..row + depth].iter().map(|&t| f64::from(t) * f64::from(t)).sum();
                        super::clamp((v / sq.sqrt().max(1e-6)) as f32, bounds)
                    }
                    Some((radius, bias, alpha, beta)) => {
                        let (lo, hi) = (c.saturating_sub(radius), (c + radius).min(depth - 1));
                        let sq: f64 = x[row + lo..=row + hi].iter().map(|&t| f64::from(t) * f64::from(t)).sum();
                        (v * (bias + alpha * sq).powf(-beta)) as f32
                    }
                };
            }
            Ok(())
        }),
    })
}

/// ATAN2: each output element is atan2(y, x) of the broadcast pair (y = input 0).
pub(crate) fn atan2(op: &OpContext<'_>) -> Result<Built> {
    require_f32(op, &[0, 1])?;
    let (sa, sb) = (op.input(0)?.shape.clone(), op.input(1)?.shape.clone());
    let out_shape = broadcast_shapes(&sa, &sb).ok_or_else(|| op.bad(format!("shapes {sa:?} and {sb:?} do not broadcast")))?;
    let (n_a, n_b, n_out) = (count(op, &sa, 4)?, count(op, &sb, 4)?, count(op, &out_shape, 4)?);
    let os = out_shape.clone();
    Ok(Built {
        outputs: vec![(DType::F32, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let (y, x) = (input::<f32>(ins, 0, n_a)?, input::<f32>(ins, 1, n_b)?);
            for (e, o) in output::<f32>(outs, 0, n_out)?.iter_mut().enumerate() {
                *o = f64::from(y[broadcast_source(e, &os, &sa)]).atan2(f64::from(x[broadcast_source(e, &os, &sb)])) as f32;
            }
            Ok(())
        }),
    })
}

/// RFFT2D: output element `(.., k, l)` is the sum over the input's `(m, n)`
/// (within fft_length; the rest is zero padding) of
/// `x[m, n] * exp(-2 pi i (k m / fft_rows + l n / fft_cols))`, in f64.
pub(crate) fn rfft2d(op: &OpContext<'_>) -> Result<Built> {
    require_f32(op, &[0])?;
    let x = op.input(0)?;
    let r = x.shape.len();
    let len = op.const_ints(1)?;
    let [fr, fc] = len[..] else { return Err(op.bad("fft_length must hold 2 values")) };
    if r < 2 || !(1..=1 << 20).contains(&fr) || !(1..=1 << 20).contains(&fc) || fr & (fr - 1) != 0 || fc & (fc - 1) != 0 {
        return Err(op.bad(format!("RFFT2D of shape {:?} with fft_length {len:?}", x.shape)));
    }
    let (fr, fc) = (fr as usize, fc as usize);
    let (rows, cols, half) = (x.shape[r - 2], x.shape[r - 1], fc / 2 + 1);
    let mut out_shape = x.shape[..r - 2].to_vec();
    out_shape.extend([fr, half]);
    let (n_in, n_out) = (count(op, &x.shape, 4)?, count(op, &out_shape, 8)?);
    Ok(Built {
        outputs: vec![(DType::Complex64, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n_in)?;
            let out = output::<f32>(outs, 0, 2 * n_out)?;
            for (e, o) in out.chunks_exact_mut(2).enumerate() {
                let (b, k, l) = (e / (fr * half), e / half % fr, e % half);
                let (mut re, mut im) = (0.0f64, 0.0f64);
                for m in 0..rows.min(fr) {
                    for n in 0..cols.min(fc) {
                        let a = -2.0 * std::f64::consts::PI * (((k * m) % fr) as f64 / fr as f64 + ((l * n) % fc) as f64 / fc as f64);
                        let v = f64::from(x[(b * rows + m) * cols + n]);
                        re += v * a.cos();
                        im += v * a.sin();
                    }
                }
                o[0] = re as f32;
                o[1] = im as f32;
            }
            Ok(())
        }),
    })
}

/// COMPLEX_ABS (`|z|`), REAL and IMAG of each complex64 element (`which` 0, 1, 2).
pub(crate) fn complex_part(op: &OpContext<'_>, which: u8) -> Result<Built> {
    let x = op.input(0)?;
    if x.dtype != DType::Complex64 {
        return Err(op.unsupported(format!("{} of {}", op.op.code.name(), x.dtype.name())));
    }
    let n = count(op, &x.shape, 8)?;
    Ok(Built {
        outputs: vec![(DType::F32, x.shape.clone())],
        kernel: Box::new(move |ins, outs| {
            let z = input::<f32>(ins, 0, 2 * n)?;
            for (o, p) in output::<f32>(outs, 0, n)?.iter_mut().zip(z.chunks_exact(2)) {
                let (re, im) = (f64::from(p[0]), f64::from(p[1]));
                *o = match which {
                    0 => (re * re + im * im).sqrt() as f32,
                    1 => p[0],
                    _ => p[1],
                };
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use crate::model::{DType, Quantization};
    use crate::ops::OpParams;
    use ferrite_format::ops::BuiltinOp as B;

    #[test]
    fn random_spatial_ops_match_cpu() {
        let mut r = Rng::new(0x5ba7);
        for _ in 0..150 {
            let rank = r.range(1, 4);
            let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
            let n: usize = shape.iter().product();
            let x = f32_input(&shape, &r.floats(n));
            let symmetric = r.coin();
            let pads: Vec<i32> = shape.iter().flat_map(|&d| [0, 1].map(|_| r.below(d + usize::from(symmetric)) as i32)).collect();
            let t = TestOp::new(B::MIRROR_PAD, OpParams::MirrorPad { symmetric }, vec![x.clone(), i32_const(&[rank, 2], &pads)], 1);
            t.compare_with_cpu(0.0, "mirror_pad");
            let t = TestOp::new(B::L2_NORMALIZATION, OpParams::Activation(crate::ops::Activation::None), vec![x.clone()], 1);
            t.compare_with_cpu(1e-6, "l2_normalization");
            let params = OpParams::LocalResponseNorm { radius: r.below(3) as i32, bias: 1.0 + r.floats(1)[0].abs(), alpha: 0.3, beta: 0.75 };
            TestOp::new(B::LOCAL_RESPONSE_NORMALIZATION, params, vec![x.clone()], 1).compare_with_cpu(1e-5, "lrn");
            let skip = r.below(rank);
            let other: Vec<usize> = shape.iter().map(|&d| if r.coin() { 1 } else { d }).skip(skip).collect();
            let y = f32_input(&other, &r.floats(other.iter().product()));
            TestOp::new(B::ATAN2, OpParams::None, vec![x.clone(), y], 1).compare_with_cpu(1e-6, "atan2");
            // Space to batch and back on [b, s_1..s_m, c], int8 with a zero point to pad with.
            let m = r.range(1, 2);
            let mut s = vec![r.range(1, 2)];
            for _ in 0..m {
                s.push(r.range(1, 5));
            }
            s.push(r.range(1, 2));
            let block: Vec<i32> = (0..m).map(|_| r.range(1, 3) as i32).collect();
            let mut pads = vec![];
            for k in 0..m {
                let b = block[k] as usize;
                let before = r.below(b + 1);
                let after = (b - (s[k + 1] + before) % b) % b;
                pads.extend([before as i32, after as i32]);
            }
            let mut q = raw_input(DType::I8, &s, (0..s.iter().product::<usize>()).map(|_| r.next() as u8).collect());
            if let Some(q) = q.as_mut() {
                q.quant = Some(Quantization { scale: vec![0.1], zero_point: vec![-7], axis: 0 });
            }
            let t = TestOp::typed(B::SPACE_TO_BATCH_ND, OpParams::None, vec![q, i32_const(&[m], &block), i32_const(&[m, 2], &pads)], vec![DType::I8]);
            t.compare_with_cpu(0.0, "space_to_batch");
            let mut bs = s.clone();
            bs[0] *= block.iter().product::<i32>() as usize;
            let crops: Vec<i32> = (0..m).flat_map(|k| [r.below(s[k + 1].min(2)) as i32, 0]).collect();
            let xb = f32_input(&bs, &r.floats(bs.iter().product()));
            let t = TestOp::new(B::BATCH_TO_SPACE_ND, OpParams::None, vec![xb, i32_const(&[m], &block), i32_const(&[m, 2], &crops)], 1);
            t.compare_with_cpu(0.0, "batch_to_space");
            // RFFT2D into each part of its complex output (powers of two, cropping and padding).
            let (fr, fc) = ([1usize, 2, 4][r.below(3)], [1usize, 2, 4, 8][r.below(4)]);
            let t = TestOp::typed(B::RFFT2D, OpParams::None, vec![x.clone(), i32_const(&[2], &[fr as i32, fc as i32])], vec![DType::Complex64]);
            if rank >= 2 {
                let (a, b) = (t.reference().unwrap(), t.cpu().unwrap());
                assert_eq!(a[0].1, b[0].1);
                for (p, q) in f32s(&a[0].2).iter().zip(f32s(&b[0].2)) {
                    assert!((p - q).abs() <= 1e-5 * p.abs().max(1.0), "rfft2d {p} {q}");
                }
                let z = raw_input(DType::Complex64, &a[0].1, a[0].2.clone());
                for code in [B::COMPLEX_ABS, B::REAL, B::IMAG] {
                    TestOp::new(code, OpParams::None, vec![z.clone()], 1).compare_with_cpu(1e-7, "complex part");
                }
            } else {
                assert!(t.reference().is_err() && t.cpu().is_err());
            }
        }
    }
}
