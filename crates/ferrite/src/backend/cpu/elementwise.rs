//! Element-wise ops: broadcasting binary arithmetic, comparisons, logic,
//! select, and unary float activations.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::elementwise::{self as kel, broadcast_shape, Binary, Unary};

use super::{clamp_of, require_f32, runtime};
use crate::backend::{arg, typed, typed_mut, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

fn broadcast(op: &OpContext<'_>, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    broadcast_shape(a, b).ok_or_else(|| op.bad(format!("shapes {a:?} and {b:?} do not broadcast")))
}

pub(crate) fn binary(op: &OpContext<'_>, code: B, pool: Option<std::sync::Arc<ferrite_kernels::parallel::ThreadPool>>) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype {
        return Err(op.bad(format!("input types differ: {} and {}", a.dtype.name(), b.dtype.name())));
    }
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = broadcast(op, &sa, &sb)?;
    let act = match op.op.params {
        OpParams::Binary { activation, .. } => activation,
        _ => Activation::None,
    };
    let dtype = a.dtype;
    let os = out.clone();
    let kernel: crate::backend::KernelFn = match dtype {
        DType::F32 => {
            let clamp = clamp_of(op, act)?;
            let kind = match code {
                B::ADD => Binary::Add,
                B::SUB => Binary::Sub,
                B::MUL => Binary::Mul,
                B::DIV => Binary::Div,
                B::MAXIMUM => Binary::Max,
                B::MINIMUM => Binary::Min,
                B::SQUARED_DIFFERENCE => Binary::SquaredDifference,
                B::POW => Binary::Pow,
                B::FLOOR_DIV => Binary::FloorDiv,
                B::FLOOR_MOD => Binary::FloorMod,
                B::PRELU => Binary::Prelu,
                _ => return Err(op.unsupported("binary op")),
            };
            // Large ops split over the pool by rows of the last dimension, when each
            // operand is whole, a scalar, or one row (a per-channel alpha or bias):
            // memory-bound, they gain from a second core's cache and bandwidth.
            let n: usize = os.iter().product();
            let row = os.last().copied().unwrap_or(1).max(1);
            let splittable = |s: &[usize]| {
                let len: usize = s.iter().product();
                len == n || len == 1 || (len == row && s.last() == Some(&row))
            };
            let split = pool.filter(|_| os.len() >= 2 && n > 0 && splittable(&sa) && splittable(&sb));
            Box::new(move |ins, outs| {
                let (x, y) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?);
                let out = typed_mut::<f32>(outs[0])?;
                let Some(pool) = split.as_deref() else {
                    kel::binary_f32(kind, x, &sa, y, &sb, out, &os, clamp);
                    return Ok(());
                };
                let rows = n / row;
                super::for_row_chunks(Some(pool), 4 * n, out, rows, row, &|_, r, o| {
                    let part = |v: &'_ [f32]| -> (usize, usize) {
                        if v.len() == n {
                            (r.start * row, r.len() * row)
                        } else {
                            (0, v.len())
                        }
                    };
                    let ((xo, xl), (yo, yl)) = (part(x), part(y));
                    let shape = |l: usize| if l == r.len() * row && l != row { [r.len(), row] } else { [1, l] };
                    kel::binary_f32(kind, &x[xo..xo + xl], &shape(xl), &y[yo..yo + yl], &shape(yl), o, &[r.len(), row], clamp);
                    true
                })
            })
        }
        DType::I32 | DType::I64 => {
            if act != Activation::None && act != Activation::Relu && act != Activation::Relu6 {
                return Err(op.unsupported(format!("fused {} on integers", act.name())));
            }
            let f: fn(i64, i64) -> Option<i64> = match code {
                B::ADD => |x, y| Some(x.wrapping_add(y)),
                B::SUB => |x, y| Some(x.wrapping_sub(y)),
                B::MUL => |x, y| Some(x.wrapping_mul(y)),
                B::DIV => |x, y| x.checked_div(y),
                B::MAXIMUM => |x, y| Some(x.max(y)),
                B::MINIMUM => |x, y| Some(x.min(y)),
                B::SQUARED_DIFFERENCE => |x, y| Some((x - y).wrapping_mul(x - y)),
                B::FLOOR_DIV => |x, y| x.checked_div_euclid(y).map(|_| (x as f64 / y as f64).floor() as i64),
                B::FLOOR_MOD => |x, y| x.checked_rem(y).map(|r| if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r }),
                B::POW => |x, y| Some(if y < 0 { 0 } else { x.wrapping_pow(y.min(u32::MAX as i64) as u32) }),
                _ => return Err(op.unsupported(format!("{} on integers", op.op.code.name()))),
            };
            let (lo, hi) = match act {
                Activation::Relu => (0, i64::MAX),
                Activation::Relu6 => (0, 6),
                _ => (i64::MIN, i64::MAX),
            };
            let wide = dtype == DType::I64;
            Box::new(move |ins, outs| {
                let mut failed = false;
                macro_rules! go {
                    ($t:ty) => {{
                        let o = typed_mut::<$t>(outs[0])?;
                        kel::binary(typed::<$t>(arg(ins, 0)?)?, &sa, typed::<$t>(arg(ins, 1)?)?, &sb, o, &os, |x, y| match f(x as i64, y as i64) {
                            Some(v) => v.clamp(lo, hi) as $t,
                            None => {
                                failed = true;
                                0
                            }
                        });
                    }};
                }
                if wide {
                    go!(i64)
                } else {
                    go!(i32)
                }
                if failed {
                    return Err(runtime("integer division by zero"));
                }
                Ok(())
            })
        }
        t => return Err(op.unsupported(format!("element type {}", t.name()))),
    };
    Ok(Built { outputs: vec![(dtype, out)], kernel })
}

pub(crate) fn compare(op: &OpContext<'_>, code: B) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype {
        return Err(op.bad(format!("input types differ: {} and {}", a.dtype.name(), b.dtype.name())));
    }
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = broadcast(op, &sa, &sb)?;
    let os = out.clone();
    let dtype = a.dtype;
    fn cmp<T: PartialOrd + Copy>(code: B) -> fn(T, T) -> bool {
        match code {
            B::LESS => |x, y| x < y,
            B::LESS_EQUAL => |x, y| x <= y,
            B::GREATER => |x, y| x > y,
            B::GREATER_EQUAL => |x, y| x >= y,
            B::EQUAL => |x, y| x == y,
            _ => |x, y| x != y,
        }
    }
    macro_rules! k {
        ($t:ty) => {{
            let f = cmp::<$t>(code);
            Box::new(move |ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]| {
                let o = typed_mut::<u8>(outs[0])?;
                kel::binary(typed::<$t>(arg(ins, 0)?)?, &sa, typed::<$t>(arg(ins, 1)?)?, &sb, o, &os, |x, y| f(x, y) as u8);
                Ok(())
            }) as crate::backend::KernelFn
        }};
    }
    let kernel = match dtype {
        DType::F32 => k!(f32),
        DType::I32 => k!(i32),
        DType::I64 => k!(i64),
        DType::U8 | DType::Bool => k!(u8),
        DType::I8 => k!(i8),
        DType::I16 => k!(i16),
        t => return Err(op.unsupported(format!("element type {}", t.name()))),
    };
    Ok(Built { outputs: vec![(DType::Bool, out)], kernel })
}

pub(crate) fn logical(op: &OpContext<'_>, code: B) -> Result<Built> {
    let a = op.input(0)?;
    if a.dtype != DType::Bool {
        return Err(op.bad("logical ops need bool inputs"));
    }
    if code == B::LOGICAL_NOT {
        return Ok(Built {
            outputs: vec![(DType::Bool, a.shape.clone())],
            kernel: Box::new(|ins, outs| {
                for (o, &i) in outs[0].iter_mut().zip(arg(ins, 0)?) {
                    *o = (i == 0) as u8;
                }
                Ok(())
            }),
        });
    }
    let b = op.input(1)?;
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = broadcast(op, &sa, &sb)?;
    let os = out.clone();
    let and = code == B::LOGICAL_AND;
    Ok(Built {
        outputs: vec![(DType::Bool, out)],
        kernel: Box::new(move |ins, outs| {
            kel::binary(arg(ins, 0)?, &sa, arg(ins, 1)?, &sb, outs[0], &os, |x, y| if and { (x != 0 && y != 0) as u8 } else { (x != 0 || y != 0) as u8 });
            Ok(())
        }),
    })
}

pub(crate) fn select(op: &OpContext<'_>) -> Result<Built> {
    let (c, x, y) = (op.input(0)?, op.input(1)?, op.input(2)?);
    if c.dtype != DType::Bool || x.dtype != y.dtype {
        return Err(op.bad("select needs a bool condition and two inputs of one type"));
    }
    let (sc, sx, sy) = (c.shape.clone(), x.shape.clone(), y.shape.clone());
    let sxy = broadcast(op, &sx, &sy)?;
    // SELECT (v1) allows a rank-1 condition over the first dimension; lift it to broadcast.
    let sc = if sc.len() == 1 && sxy.len() > 1 && sc[0] == sxy[0] {
        let mut s = vec![1; sxy.len()];
        s[0] = sc[0];
        s
    } else {
        sc
    };
    let out = broadcast(op, &sc, &sxy)?;
    let os = out.clone();
    let dtype = x.dtype;
    super::by_size!(op, dtype, T => {
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                kel::select(arg(ins, 0)?, &sc, typed::<T>(arg(ins, 1)?)?, &sx, typed::<T>(arg(ins, 2)?)?, &sy, typed_mut::<T>(outs[0])?, &os);
                Ok(())
            }),
        })
    })
}

pub(crate) fn unary(op: &OpContext<'_>, code: B) -> Result<Built> {
    let x = op.input(0)?;
    let shape = x.shape.clone();
    if x.dtype == DType::I32 && matches!(code, B::ABS | B::NEG | B::SQUARE | B::RELU | B::SIGN) {
        let f: fn(i32) -> i32 = match code {
            B::ABS => i32::wrapping_abs,
            B::NEG => i32::wrapping_neg,
            B::SQUARE => |v| v.wrapping_mul(v),
            B::RELU => |v| v.max(0),
            _ => i32::signum,
        };
        return Ok(Built {
            outputs: vec![(DType::I32, shape)],
            kernel: Box::new(move |ins, outs| {
                for (o, &i) in typed_mut::<i32>(outs[0])?.iter_mut().zip(typed::<i32>(arg(ins, 0)?)?) {
                    *o = f(i);
                }
                Ok(())
            }),
        });
    }
    require_f32(op, &[0])?;
    let alpha = match op.op.params {
        OpParams::LeakyRelu { alpha } => alpha,
        _ => 0.0,
    };
    let approximate = matches!(op.op.params, OpParams::Gelu { approximate: true });
    let kind = match code {
        B::ABS => Unary::Abs,
        B::NEG => Unary::Neg,
        B::EXP => Unary::Exp,
        B::LOG => Unary::Log,
        B::SQRT => Unary::Sqrt,
        B::RSQRT => Unary::Rsqrt,
        B::SQUARE => Unary::Square,
        B::TANH => Unary::Tanh,
        B::LOGISTIC => Unary::Logistic,
        B::RELU => Unary::Relu,
        B::RELU6 => Unary::Relu6,
        B::RELU_N1_TO_1 => Unary::ReluN1To1,
        B::RELU_0_TO_1 => Unary::Relu0To1,
        B::HARD_SWISH => Unary::HardSwish,
        B::LEAKY_RELU => Unary::LeakyRelu(alpha),
        B::ELU => Unary::Elu,
        B::FLOOR => Unary::Floor,
        B::CEIL => Unary::Ceil,
        B::ROUND => Unary::Round,
        B::SIN => Unary::Sin,
        B::COS => Unary::Cos,
        B::GELU => Unary::Gelu(approximate),
        B::SIGN => Unary::Sign,
        _ => return Err(op.unsupported("unary op")),
    };
    Ok(Built {
        outputs: vec![(DType::F32, shape)],
        kernel: Box::new(move |ins, outs| {
            kel::unary_f32(kind, typed::<f32>(arg(ins, 0)?)?, typed_mut::<f32>(outs[0])?);
            Ok(())
        }),
    })
}
