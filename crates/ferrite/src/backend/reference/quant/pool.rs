//! AVERAGE_POOL_2D and MAX_POOL_2D on int8, uint8 and int16, as LiteRT's reference
//! kernels: input and output share their quantization; each window covers only
//! the positions inside the input; the average of `count` values rounds half
//! away from zero (`(sum ± count / 2) / count`, truncating); the result is clamped
//! to the fused activation's range.

use super::{activation_range, elements, int_range, out_and_pad, per_tensor, read_ints, write_ints};
use crate::backend::{arg, Built, OpContext};
use crate::error::{Error, Result};
use crate::ops::{OpParams, Padding};

/// AVERAGE_POOL_2D (`max` false) or MAX_POOL_2D over an NHWC input.
pub(super) fn pool(op: &OpContext<'_>, max: bool) -> Result<Built> {
    let OpParams::Pool2D { padding, stride, filter, activation } = op.op.params else { return Err(op.bad("missing Pool2D options")) };
    let x = op.input(0)?;
    let dtype = x.dtype;
    let out = op.outputs.first().ok_or_else(|| op.bad("missing output"))?;
    let &[batch, in_h, in_w, c] = &x.shape[..] else { return Err(op.unsupported(format!("quantized pooling of {:?}", x.shape))) };
    if out.dtype != dtype {
        return Err(op.unsupported(format!("quantized pooling of {} to {}", dtype.name(), out.dtype.name())));
    }
    let (scale, zp) = per_tensor(op, out.quant.as_ref(), out.dtype, "output")?;
    let (lo, hi) = activation_range(activation, scale, zp, dtype);
    let same = padding == Padding::Same;
    let (out_h, pad_top) = out_and_pad(op, in_h, filter.0, stride.0, 1, same)?;
    let (out_w, pad_left) = out_and_pad(op, in_w, filter.1, stride.1, 1, same)?;
    let out_shape = vec![batch, out_h, out_w, c];
    let n_out = elements(op, &out_shape)?;
    let n_in = elements(op, &x.shape)?;
    Ok(Built {
        outputs: vec![(dtype, out_shape)],
        kernel: Box::new(move |ins, outs| {
            let input = read_ints(dtype, arg(ins, 0)?, n_in, "input")?;
            let mut result = vec![0i32; n_out];
            for b in 0..batch {
                for oy in 0..out_h {
                    for ox in 0..out_w {
                        for ch in 0..c {
                            let (mut sum, mut count, mut largest) = (0i32, 0i32, int_range(dtype).0);
                            for fy in 0..filter.0 {
                                let Some(iy) = (oy * stride.0 + fy).checked_sub(pad_top).filter(|&y| y < in_h) else { continue };
                                for fx in 0..filter.1 {
                                    let Some(ix) = (ox * stride.1 + fx).checked_sub(pad_left).filter(|&v| v < in_w) else { continue };
                                    let v = input[((b * in_h + iy) * in_w + ix) * c + ch];
                                    sum = sum.wrapping_add(v);
                                    count += 1;
                                    largest = largest.max(v);
                                }
                            }
                            if count == 0 {
                                return Err(Error::Runtime("pooling window outside the input".into()));
                            }
                            let v = if max {
                                largest
                            } else if sum >= 0 {
                                (sum + count / 2) / count
                            } else {
                                (sum - count / 2) / count
                            };
                            result[((b * out_h + oy) * out_w + ox) * c + ch] = v.clamp(lo, hi);
                        }
                    }
                }
            }
            write_ints(dtype, &result, outs[0])
        }),
    })
}

#[cfg(test)]
mod tests {
    use ferrite_format::ops::BuiltinOp as B;

    use super::super::super::quant_test_util::{mismatches, out, q, run_ref, Rng, T};
    use crate::model::DType;
    use crate::ops::{Activation, OpParams, Padding};

    #[test]
    fn average_rounds_half_away_from_zero() {
        // Window of [-1, -2] averages to -1.5 -> -2; [1, 2] to 1.5 -> 2; max of [3, -4] is 3.
        let x = T::ints(DType::I8, &[1, 1, 2, 3], q(1.0, 0), &[-1, 1, 3, -2, 2, -4]);
        let p = OpParams::Pool2D { padding: Padding::Valid, stride: (1, 1), filter: (1, 2), activation: Activation::None };
        let (_, avg) = run_ref(B::AVERAGE_POOL_2D, &p, &[Some(&x)], &out(DType::I8, q(1.0, 0))).expect("average pool");
        assert_eq!(avg.iter().map(|&v| v as i8).collect::<Vec<_>>(), vec![-2, 2, -1]);
        let (_, mx) = run_ref(B::MAX_POOL_2D, &p, &[Some(&x)], &out(DType::I8, q(1.0, 0))).expect("max pool");
        assert_eq!(mx.iter().map(|&v| v as i8).collect::<Vec<_>>(), vec![-1, 2, 3]);
    }

    #[test]
    fn pools_match_cpu() {
        let mut rng = Rng::new(5);
        let acts = [Activation::None, Activation::Relu, Activation::Relu6, Activation::ReluN1To1];
        for case in 0..90 {
            let dtype = [DType::I8, DType::U8, DType::I16][case % 3];
            let max = case % 2 == 0;
            let filter = (rng.usize(1, 3), rng.usize(1, 3));
            let (h, w, c) = (rng.usize(filter.0, 7), rng.usize(filter.1, 7), rng.usize(1, 4));
            let scale = rng.scale(0.05);
            let quant = q(scale, rng.zp(dtype));
            let x = T::ints(dtype, &[1, h, w, c], quant.clone(), &rng.ints(dtype, h * w * c));
            let padding = if rng.one_in(2) { Padding::Same } else { Padding::Valid };
            let p = OpParams::Pool2D { padding, stride: (rng.usize(1, 2), rng.usize(1, 2)), filter, activation: acts[case % 4] };
            let code = if max { B::MAX_POOL_2D } else { B::AVERAGE_POOL_2D };
            let n = mismatches(code, &p, &[Some(&x)], &out(dtype, quant));
            assert_eq!(n, 0, "case {case}: {n} mismatching outputs ({dtype:?}, max {max}, {h}x{w}x{c}, {p:?})");
        }
    }
}
