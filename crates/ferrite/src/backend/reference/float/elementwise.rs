//! Element-wise ops with numpy broadcasting: arithmetic (float32, int32, int64),
//! comparisons, logic, select, and unary float math and activations.

use super::{broadcast_shapes, broadcast_source, clamp, clamp_bounds, count, input, output, runtime};
use crate::backend::{Built, KernelFn, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// Binary arithmetic ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    SquaredDifference,
    Pow,
    FloorDiv,
    FloorMod,
    /// x >= 0 ? x : x * alpha, alpha broadcast.
    Prelu,
}

/// Comparisons (bool output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Equal,
    NotEqual,
}

/// Unary float ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnaryOp {
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Square,
    Sin,
    Cos,
    Floor,
    Ceil,
    Round,
    Sign,
    Relu,
    Relu6,
    ReluN1To1,
    Relu0To1,
    LeakyRelu,
    HardSwish,
    Logistic,
    Tanh,
    Gelu,
    Elu,
}

/// The broadcast output shape of inputs `i` and `j`.
fn broadcast(op: &OpContext<'_>, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    broadcast_shapes(a, b).ok_or_else(|| op.bad(format!("shapes {a:?} and {b:?} do not broadcast")))
}

/// out[i] = f(a[source_a(i)], b[source_b(i)]) over the broadcast output.
fn broadcast_map<A: Copy, C: Copy, O>(a: &[A], sa: &[usize], b: &[C], sb: &[usize], out: &mut [O], so: &[usize], mut f: impl FnMut(A, C) -> O) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(a[broadcast_source(i, so, sa)], b[broadcast_source(i, so, sb)]);
    }
}

/// Float32 definition of each binary op.
fn binary_f32(kind: BinaryOp, x: f32, y: f32) -> f32 {
    match kind {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        BinaryOp::SquaredDifference => (x - y) * (x - y),
        BinaryOp::Pow => x.powf(y),
        BinaryOp::FloorDiv => (x / y).floor(),
        // The remainder takes the divisor's sign (Python's modulo).
        BinaryOp::FloorMod => {
            let r = x % y;
            if r != 0.0 && (r < 0.0) != (y < 0.0) {
                r + y
            } else {
                r
            }
        }
        BinaryOp::Prelu => {
            if x >= 0.0 {
                x
            } else {
                x * y
            }
        }
    }
}

/// Integer definition of each binary op (wrapping like two's complement C), or
/// `None` for a division by zero.
fn binary_int(kind: BinaryOp, x: i64, y: i64) -> Option<i64> {
    Some(match kind {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div => x.checked_div(y)?,
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        BinaryOp::SquaredDifference => x.wrapping_sub(y).wrapping_mul(x.wrapping_sub(y)),
        // Negative exponents have no integer result; LiteRT's kernel yields 0 for them.
        BinaryOp::Pow => {
            if y < 0 {
                0
            } else {
                x.wrapping_pow(u32::try_from(y).unwrap_or(u32::MAX))
            }
        }
        // Rounds the quotient toward negative infinity.
        BinaryOp::FloorDiv => {
            let q = x.checked_div(y)?;
            if x.checked_rem(y)? != 0 && (x < 0) != (y < 0) {
                q - 1
            } else {
                q
            }
        }
        BinaryOp::FloorMod => {
            let r = x.checked_rem(y)?;
            if r != 0 && (r < 0) != (y < 0) {
                r + y
            } else {
                r
            }
        }
        BinaryOp::Prelu => return None,
    })
}

/// ADD_N: the element-wise sum of every input (float32 in f64, int32 wrapping);
/// all inputs have one type and one shape.
pub(crate) fn add_n(op: &OpContext<'_>) -> Result<Built> {
    let first = op.input(0)?;
    let (dtype, shape) = (first.dtype, first.shape.clone());
    let k = op.inputs.len();
    for i in 1..k {
        let x = op.input(i)?;
        if x.dtype != dtype || x.shape != shape {
            return Err(op.bad(format!("input {i} ({} {:?}) differs from input 0 ({} {shape:?})", x.dtype.name(), x.shape, dtype.name())));
        }
    }
    if !matches!(dtype, DType::F32 | DType::I32) {
        return Err(op.unsupported(format!("ADD_N of {}", dtype.name())));
    }
    let n = count(op, &shape, 4)?;
    Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            if dtype == DType::F32 {
                let xs = (0..k).map(|i| input::<f32>(ins, i, n)).collect::<Result<Vec<_>>>()?;
                for (e, o) in output::<f32>(outs, 0, n)?.iter_mut().enumerate() {
                    *o = xs.iter().map(|x| f64::from(x[e])).sum::<f64>() as f32;
                }
            } else {
                let xs = (0..k).map(|i| input::<i32>(ins, i, n)).collect::<Result<Vec<_>>>()?;
                for (e, o) in output::<i32>(outs, 0, n)?.iter_mut().enumerate() {
                    // Two's-complement wrap of the exact sum, as int32 addition wraps.
                    *o = xs.iter().map(|x| i64::from(x[e])).sum::<i64>() as i32;
                }
            }
            Ok(())
        }),
    })
}

/// ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, POW, FLOOR_DIV,
/// FLOOR_MOD, PRELU with broadcasting; float32, and int32 / int64 (not PRELU).
pub(crate) fn binary(op: &OpContext<'_>, kind: BinaryOp) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype {
        return Err(op.bad(format!("input types differ: {} and {}", a.dtype.name(), b.dtype.name())));
    }
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let so = broadcast(op, &sa, &sb)?;
    let (na, nb, no) = (count(op, &sa, 8)?, count(op, &sb, 8)?, count(op, &so, 8)?);
    let act = match op.op.params {
        OpParams::Binary { activation, .. } => activation,
        _ => Activation::None,
    };
    let dtype = a.dtype;
    let kernel: KernelFn = match dtype {
        DType::F32 => {
            let bounds = clamp_bounds(act);
            let so2 = so.clone();
            Box::new(move |ins, outs| {
                let (x, y) = (input::<f32>(ins, 0, na)?, input::<f32>(ins, 1, nb)?);
                broadcast_map(x, &sa, y, &sb, output::<f32>(outs, 0, no)?, &so2, |x, y| clamp(binary_f32(kind, x, y), bounds));
                Ok(())
            })
        }
        DType::I32 | DType::I64 => {
            if kind == BinaryOp::Prelu {
                return Err(op.unsupported("PRELU on integers"));
            }
            let (lo, hi) = match act {
                Activation::None => (i64::MIN, i64::MAX),
                Activation::Relu => (0, i64::MAX),
                Activation::Relu6 => (0, 6),
                a => return Err(op.unsupported(format!("fused {} on integers", a.name()))),
            };
            let so2 = so.clone();
            Box::new(move |ins, outs| {
                let mut zero_division = false;
                let mut f = |x: i64, y: i64| match binary_int(kind, x, y) {
                    Some(v) => v.clamp(lo, hi),
                    None => {
                        zero_division = true;
                        0
                    }
                };
                if dtype == DType::I64 {
                    let (x, y) = (input::<i64>(ins, 0, na)?, input::<i64>(ins, 1, nb)?);
                    broadcast_map(x, &sa, y, &sb, output::<i64>(outs, 0, no)?, &so2, f);
                } else {
                    let (x, y) = (input::<i32>(ins, 0, na)?, input::<i32>(ins, 1, nb)?);
                    // int32 results wrap to 32 bits, as int32 arithmetic does.
                    broadcast_map(x, &sa, y, &sb, output::<i32>(outs, 0, no)?, &so2, |x, y| f(i64::from(x), i64::from(y)) as i32);
                }
                if zero_division {
                    return Err(runtime("integer division by zero"));
                }
                Ok(())
            })
        }
        t => return Err(op.unsupported(format!("element type {}", t.name()))),
    };
    Ok(Built { outputs: vec![(dtype, so)], kernel })
}

/// Holds for a comparison of two values.
fn compare_values<T: PartialOrd>(kind: CompareOp, x: T, y: T) -> bool {
    match kind {
        CompareOp::Less => x < y,
        CompareOp::LessEqual => x <= y,
        CompareOp::Greater => x > y,
        CompareOp::GreaterEqual => x >= y,
        CompareOp::Equal => x == y,
        CompareOp::NotEqual => x != y,
    }
}

/// LESS .. NOT_EQUAL with broadcasting: bool output (one byte, 0 or 1).
pub(crate) fn compare(op: &OpContext<'_>, kind: CompareOp) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype {
        return Err(op.bad(format!("input types differ: {} and {}", a.dtype.name(), b.dtype.name())));
    }
    // Raw quantized values compare like the real values only under one quantization
    // (quantized int8 / uint8 take the rescaling kernel of the quantized half; LiteRT
    // compares int16 as stored whatever its quantization, and so does this one).
    let params = |q: Option<&crate::model::Quantization>| q.map(|q| (q.scale.clone(), q.zero_point.clone()));
    if matches!(a.dtype, DType::I8 | DType::U8) && params(a.quant) != params(b.quant) {
        return Err(op.unsupported("comparison of differently quantized inputs"));
    }
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let so = broadcast(op, &sa, &sb)?;
    let (na, nb, no) = (count(op, &sa, 8)?, count(op, &sb, 8)?, count(op, &so, 8)?);
    let dtype = a.dtype;
    let so2 = so.clone();
    macro_rules! kernel {
        ($t:ty) => {
            Box::new(move |ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]| {
                let (x, y) = (input::<$t>(ins, 0, na)?, input::<$t>(ins, 1, nb)?);
                broadcast_map(x, &sa, y, &sb, output::<u8>(outs, 0, no)?, &so2, |x, y| u8::from(compare_values(kind, x, y)));
                Ok(())
            }) as KernelFn
        };
    }
    let kernel = match dtype {
        DType::F32 => kernel!(f32),
        DType::I32 => kernel!(i32),
        DType::I64 => kernel!(i64),
        DType::U8 | DType::Bool => kernel!(u8),
        DType::I8 => kernel!(i8),
        DType::I16 => kernel!(i16),
        t => return Err(op.unsupported(format!("element type {}", t.name()))),
    };
    Ok(Built { outputs: vec![(DType::Bool, so)], kernel })
}

/// LOGICAL_AND (`Some(true)`), LOGICAL_OR (`Some(false)`) with broadcasting, and
/// LOGICAL_NOT (`None`), on bools (any non-zero byte is true).
pub(crate) fn logical(op: &OpContext<'_>, and: Option<bool>) -> Result<Built> {
    let a = op.input(0)?;
    if a.dtype != DType::Bool {
        return Err(op.bad("logical ops need bool inputs"));
    }
    let sa = a.shape.clone();
    let na = count(op, &sa, 1)?;
    let Some(and) = and else {
        return Ok(Built {
            outputs: vec![(DType::Bool, sa)],
            kernel: Box::new(move |ins, outs| {
                let x = input::<u8>(ins, 0, na)?;
                for (o, &v) in output::<u8>(outs, 0, na)?.iter_mut().zip(x) {
                    *o = u8::from(v == 0);
                }
                Ok(())
            }),
        });
    };
    let b = op.input(1)?;
    if b.dtype != DType::Bool {
        return Err(op.bad("logical ops need bool inputs"));
    }
    let sb = b.shape.clone();
    let so = broadcast(op, &sa, &sb)?;
    let (nb, no) = (count(op, &sb, 1)?, count(op, &so, 1)?);
    let so2 = so.clone();
    Ok(Built {
        outputs: vec![(DType::Bool, so)],
        kernel: Box::new(move |ins, outs| {
            let (x, y) = (input::<u8>(ins, 0, na)?, input::<u8>(ins, 1, nb)?);
            broadcast_map(x, &sa, y, &sb, output::<u8>(outs, 0, no)?, &so2, |x, y| u8::from(if and { x != 0 && y != 0 } else { x != 0 || y != 0 }));
            Ok(())
        }),
    })
}

/// SELECT / SELECT_V2: out = cond ? x : y, all three broadcast; any element type
/// (elements are moved as bytes).
pub(crate) fn select(op: &OpContext<'_>) -> Result<Built> {
    let (c, x, y) = (op.input(0)?, op.input(1)?, op.input(2)?);
    if c.dtype != DType::Bool || x.dtype != y.dtype {
        return Err(op.bad("select needs a bool condition and two inputs of one type"));
    }
    super::same_quantization(op, 1)?;
    super::same_quantization(op, 2)?;
    let es = x.dtype.size().ok_or_else(|| op.unsupported(format!("element type {}", x.dtype.name())))?;
    let (sx, sy) = (x.shape.clone(), y.shape.clone());
    let sxy = broadcast(op, &sx, &sy)?;
    // SELECT (v1) takes a rank-1 condition over the first dimension of higher-rank values.
    let sc = if c.shape.len() == 1 && sxy.len() > 1 && c.shape[0] == sxy[0] {
        let mut s = vec![1; sxy.len()];
        s[0] = c.shape[0];
        s
    } else {
        c.shape.clone()
    };
    let so = broadcast(op, &sc, &sxy)?;
    let (nc, nx, ny, no) = (count(op, &sc, 1)?, count(op, &sx, es)?, count(op, &sy, es)?, count(op, &so, es)?);
    let dtype = x.dtype;
    let so2 = so.clone();
    Ok(Built {
        outputs: vec![(dtype, so)],
        kernel: Box::new(move |ins, outs| {
            let cond = input::<u8>(ins, 0, nc)?;
            let (xv, yv) = (input::<u8>(ins, 1, nx * es)?, input::<u8>(ins, 2, ny * es)?);
            let out = output::<u8>(outs, 0, no * es)?;
            for (i, o) in out.chunks_exact_mut(es).enumerate() {
                let src = if cond[broadcast_source(i, &so2, &sc)] != 0 {
                    &xv[broadcast_source(i, &so2, &sx) * es..][..es]
                } else {
                    &yv[broadcast_source(i, &so2, &sy) * es..][..es]
                };
                o.copy_from_slice(src);
            }
            Ok(())
        }),
    })
}

/// The error function, to double precision: its Maclaurin series near 0 and the
/// continued fraction of erfc further out (where the series would cancel badly).
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(a) = 2/sqrt(pi) * sum over n of (-1)^n a^(2n+1) / (n! (2n+1)).
        let mut term = a;
        let mut sum = a;
        for n in 1..100 {
            term *= -a * a / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // erfc(a) = exp(-a^2) / sqrt(pi) / (a + (1/2) / (a + 1 / (a + (3/2) / (a + ...)))).
        let mut k = a;
        for n in (1..=80).rev() {
            k = a + (n as f64 / 2.0) / k;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * k)
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// Float32 definition of each unary op; transcendental ones are computed in f64
/// and rounded once.
fn unary_f32(kind: UnaryOp, x: f32, alpha: f32, approximate: bool) -> f32 {
    let d = f64::from(x);
    match kind {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Exp => d.exp() as f32,
        UnaryOp::Log => d.ln() as f32,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => (1.0 / d.sqrt()) as f32,
        UnaryOp::Square => x * x,
        UnaryOp::Sin => d.sin() as f32,
        UnaryOp::Cos => d.cos() as f32,
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Relu6 => x.clamp(0.0, 6.0),
        UnaryOp::ReluN1To1 => x.clamp(-1.0, 1.0),
        UnaryOp::Relu0To1 => x.clamp(0.0, 1.0),
        UnaryOp::LeakyRelu => {
            if x >= 0.0 {
                x
            } else {
                x * alpha
            }
        }
        // x * relu6(x + 3) / 6.
        UnaryOp::HardSwish => (d * (d + 3.0).clamp(0.0, 6.0) / 6.0) as f32,
        UnaryOp::Logistic => (1.0 / (1.0 + (-d).exp())) as f32,
        UnaryOp::Tanh => d.tanh() as f32,
        UnaryOp::Gelu => {
            if approximate {
                // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
                (0.5 * d * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (d + 0.044715 * d * d * d)).tanh())) as f32
            } else {
                // 0.5 x (1 + erf(x / sqrt 2)).
                (0.5 * d * (1.0 + erf(d / std::f64::consts::SQRT_2))) as f32
            }
        }
        UnaryOp::Elu => {
            if x >= 0.0 {
                x
            } else {
                d.exp_m1() as f32
            }
        }
    }
}

/// Unary float32 math and activations; ABS, NEG, SQUARE, RELU and SIGN also on int32.
pub(crate) fn unary(op: &OpContext<'_>, kind: UnaryOp) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    let n = count(op, &shape, 4)?;
    if x.dtype == DType::I32 {
        let f: fn(i32) -> i32 = match kind {
            UnaryOp::Abs => i32::wrapping_abs,
            UnaryOp::Neg => i32::wrapping_neg,
            UnaryOp::Square => |v| v.wrapping_mul(v),
            UnaryOp::Relu => |v| v.max(0),
            UnaryOp::Sign => i32::signum,
            _ => return Err(op.unsupported("this unary op on int32")),
        };
        return Ok(Built {
            outputs: vec![(DType::I32, shape)],
            kernel: Box::new(move |ins, outs| {
                let x = input::<i32>(ins, 0, n)?;
                for (o, &v) in output::<i32>(outs, 0, n)?.iter_mut().zip(x) {
                    *o = f(v);
                }
                Ok(())
            }),
        });
    }
    super::require_f32(op, &[0])?;
    let alpha = match op.op.params {
        OpParams::LeakyRelu { alpha } => alpha,
        _ => 0.0,
    };
    let approximate = matches!(op.op.params, OpParams::Gelu { approximate: true });
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |ins, outs| {
            let x = input::<f32>(ins, 0, n)?;
            for (o, &v) in output::<f32>(outs, 0, n)?.iter_mut().zip(x) {
                *o = unary_f32(kind, v, alpha, approximate);
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::float_test_util::*;
    use super::*;
    use ferrite_format::ops::BuiltinOp as B;

    fn binary_params(activation: Activation) -> OpParams {
        OpParams::Binary { activation, pot_scale_int16: true }
    }

    /// ADD_N on both backends, float32 and int32; mismatched shapes are refused.
    #[test]
    fn add_n_matches_cpu() {
        let mut r = Rng::new(0xadd2);
        for case in 0..60 {
            let shape: Vec<usize> = (0..r.below(4)).map(|_| r.range(1, 5)).collect();
            let n: usize = shape.iter().product();
            let k = r.range(2, 5);
            let xs: Vec<_> = (0..k).map(|_| f32_input(&shape, &r.floats(n))).collect();
            TestOp::new(B::ADD_N, OpParams::None, xs, 1).compare_with_cpu(1e-6, &format!("case {case}"));
            let xs: Vec<_> = (0..k).map(|_| raw_input(DType::I32, &shape, (0..n).flat_map(|_| (r.next() as i32).to_le_bytes()).collect())).collect();
            TestOp::typed(B::ADD_N, OpParams::None, xs, vec![DType::I32]).compare_with_cpu(0.0, &format!("int case {case}"));
        }
        let t = TestOp::new(B::ADD_N, OpParams::None, vec![f32_input(&[2], &[1.0, 2.0]), f32_input(&[1], &[1.0])], 1);
        assert!(t.reference().is_err() && t.cpu().is_err());
    }

    #[test]
    fn hand_computed_binary_and_unary() {
        let t = TestOp::new(B::SUB, binary_params(Activation::Relu), vec![f32_input(&[2, 1], &[1.0, 5.0]), f32_input(&[3], &[0.0, 2.0, 4.0])], 1);
        assert_eq!(t.reference_f32(), (vec![2, 3], vec![1.0, 0.0, 0.0, 5.0, 3.0, 1.0]));
        let t = TestOp::new(B::FLOOR_MOD, OpParams::None, vec![f32_input(&[2], &[-7.0, 7.0]), f32_input(&[1], &[3.0])], 1);
        assert_eq!(t.reference_f32().1, vec![2.0, 1.0]);
        let t = TestOp::new(B::ROUND, OpParams::None, vec![f32_input(&[4], &[0.5, 1.5, 2.5, -0.5])], 1);
        assert_eq!(t.reference_f32().1, vec![0.0, 2.0, 2.0, -0.0]);
        let t = TestOp::new(B::PRELU, OpParams::None, vec![f32_input(&[1, 2], &[-2.0, 3.0]), f32_const(&[2], &[0.5, 0.25])], 1);
        assert_eq!(t.reference_f32().1, vec![-1.0, 3.0]);
        let t = TestOp::new(B::HARD_SWISH, OpParams::None, vec![f32_input(&[3], &[-4.0, 0.0, 3.0])], 1);
        assert_eq!(t.reference_f32().1, vec![0.0, 0.0, 3.0]);
        assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
        assert!((erf(3.0) - 0.999_977_909_503_001_4).abs() < 1e-15);
        // Integers: floor division rounds down, division by zero is an error.
        let i32s = |v: &[i32]| raw_input(DType::I32, &[v.len()], bytemuck::cast_slice(v).to_vec());
        let t = TestOp::typed(B::FLOOR_DIV, OpParams::None, vec![i32s(&[-7, 7]), i32s(&[2, -2])], vec![DType::I32]);
        assert_eq!(t.reference().unwrap()[0].2, bytemuck::cast_slice::<i32, u8>(&[-4, -4]));
        let t = TestOp::typed(B::DIV, binary_params(Activation::None), vec![i32s(&[1]), i32s(&[0])], vec![DType::I32]);
        assert!(t.reference().is_err());
    }

    #[test]
    fn hand_computed_compare_logic_select() {
        let t = TestOp::typed(B::LESS, OpParams::None, vec![f32_input(&[3], &[1.0, 2.0, 3.0]), f32_input(&[], &[2.0])], vec![DType::Bool]);
        assert_eq!(t.reference().unwrap()[0].2, vec![1, 0, 0]);
        let bools = |v: &[u8]| raw_input(DType::Bool, &[v.len()], v.to_vec());
        let t = TestOp::typed(B::LOGICAL_OR, OpParams::None, vec![bools(&[0, 1, 0]), bools(&[0, 0, 1])], vec![DType::Bool]);
        assert_eq!(t.reference().unwrap()[0].2, vec![0, 1, 1]);
        // SELECT v1 with a rank-1 condition picks whole rows.
        let t = TestOp::new(
            B::SELECT,
            OpParams::None,
            vec![bools(&[1, 0]), f32_input(&[2, 2], &[1.0, 2.0, 3.0, 4.0]), f32_input(&[2, 2], &[5.0, 6.0, 7.0, 8.0])],
            1,
        );
        assert_eq!(t.reference_f32().1, vec![1.0, 2.0, 7.0, 8.0]);
    }

    /// A random shape of rank 0..=4 and a second shape broadcastable with it.
    fn broadcast_pair(r: &mut Rng) -> (Vec<usize>, Vec<usize>) {
        let rank = r.range(0, 4);
        let a: Vec<usize> = (0..rank).map(|_| r.range(1, 4)).collect();
        let drop = r.range(0, rank);
        let b: Vec<usize> = a[drop..].iter().map(|&d| if r.coin() { 1 } else { d }).collect();
        if r.coin() {
            (a, b)
        } else {
            (b, a)
        }
    }

    #[test]
    fn random_elementwise_match_cpu() {
        let mut r = Rng::new(0xe1e7_3e27);
        let mut worst = 0.0f64;
        let binaries = [
            (B::ADD, true),
            (B::SUB, true),
            (B::MUL, true),
            (B::DIV, true),
            (B::MAXIMUM, false),
            (B::MINIMUM, false),
            (B::SQUARED_DIFFERENCE, false),
            (B::POW, false),
            (B::FLOOR_DIV, false),
            (B::FLOOR_MOD, false),
            (B::PRELU, false),
        ];
        let acts = [Activation::None, Activation::Relu, Activation::Relu6, Activation::ReluN1To1, Activation::SignBit];
        for case in 0..300 {
            let (code, fused) = binaries[case % binaries.len()];
            let (sa, sb) = broadcast_pair(&mut r);
            let mut x = r.floats(sa.iter().product());
            let y: Vec<f32> = r.floats(sb.iter().product()).iter().map(|v| if code == B::POW { v.abs() + 0.5 } else { v + 2.0 * v.signum() }).collect();
            if code == B::POW {
                x.iter_mut().for_each(|v| *v = v.abs() * 3.0);
            }
            let params = if fused { binary_params(acts[r.below(acts.len())]) } else { OpParams::None };
            let t = TestOp::new(code, params, vec![f32_input(&sa, &x), f32_input(&sb, &y)], 1);
            worst = worst.max(t.compare_with_cpu(1e-5, &format!("{code:?} {sa:?} {sb:?}")));
            // The same op on int32 (except PRELU and POW) and a comparison.
            let xi: Vec<i32> = x.iter().map(|v| (v * 50.0) as i32).collect();
            let yi: Vec<i32> = y.iter().map(|v| (v * 7.0) as i32).filter(|&v| v != 0).chain([3]).cycle().take(y.len()).collect();
            let ints = |s: &[usize], v: &[i32]| raw_input(DType::I32, s, bytemuck::cast_slice(v).to_vec());
            if !matches!(code, B::PRELU | B::POW) {
                let params = if fused { binary_params([Activation::None, Activation::Relu, Activation::Relu6][r.below(3)]) } else { OpParams::None };
                let t = TestOp::typed(code, params, vec![ints(&sa, &xi), ints(&sb, &yi)], vec![DType::I32]);
                t.compare_with_cpu(0.0, &format!("int {code:?} {sa:?} {sb:?}"));
            }
            let cmp = [B::LESS, B::LESS_EQUAL, B::GREATER, B::GREATER_EQUAL, B::EQUAL, B::NOT_EQUAL][r.below(6)];
            let t = TestOp::typed(cmp, OpParams::None, vec![ints(&sa, &xi), ints(&sb, &yi)], vec![DType::Bool]);
            t.compare_with_cpu(0.0, &format!("{cmp:?}"));
            // Select over the broadcast of the two, with a broadcast condition.
            let cond: Vec<u8> = (0..sb.iter().product()).map(|_| u8::from(r.coin())).collect();
            let t = TestOp::new(B::SELECT_V2, OpParams::None, vec![raw_input(DType::Bool, &sb, cond), f32_input(&sa, &x), f32_input(&sb, &y)], 1);
            t.compare_with_cpu(0.0, "select");
        }
        let unaries = [
            B::ABS,
            B::NEG,
            B::EXP,
            B::LOG,
            B::SQRT,
            B::RSQRT,
            B::SQUARE,
            B::SIN,
            B::COS,
            B::FLOOR,
            B::CEIL,
            B::ROUND,
            B::SIGN,
            B::RELU,
            B::RELU6,
            B::RELU_N1_TO_1,
            B::RELU_0_TO_1,
            B::LEAKY_RELU,
            B::HARD_SWISH,
            B::LOGISTIC,
            B::TANH,
            B::GELU,
            B::ELU,
        ];
        let mut worst_unary = 0.0f64;
        for (case, &code) in unaries.iter().cycle().take(unaries.len() * 4).enumerate() {
            let n = r.range(1, 200);
            let scale = if matches!(code, B::RELU6 | B::HARD_SWISH | B::EXP | B::TANH | B::LOGISTIC | B::GELU | B::ELU) { 8.0 } else { 3.0 };
            let mut x: Vec<f32> = r.floats(n).iter().map(|v| v * scale).collect();
            if matches!(code, B::LOG | B::SQRT | B::RSQRT) {
                x.iter_mut().for_each(|v| *v = v.abs() + 1e-3);
            }
            let params = match code {
                B::LEAKY_RELU => OpParams::LeakyRelu { alpha: 0.2 },
                B::GELU => OpParams::Gelu { approximate: case % 2 == 0 },
                _ => OpParams::None,
            };
            let t = TestOp::new(code, params, vec![f32_input(&[n], &x)], 1);
            worst_unary = worst_unary.max(t.compare_with_cpu(1e-5, &format!("{code:?}")));
        }
        eprintln!("random element-wise: worst relative error binary {worst:e}, unary {worst_unary:e}");
    }
}
