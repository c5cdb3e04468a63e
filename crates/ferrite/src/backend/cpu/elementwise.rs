//! Element-wise binary ops with broadcasting (float, int32/int64, and quantized
//! ADD/SUB/MUL/PRELU/SQUARED_DIFFERENCE/MAXIMUM/MINIMUM), ADD_N, comparisons
//! (quantized ones rescaled as LiteRT does), logic, select and the bitwise RIGHT_SHIFT and
//! BITWISE_XOR.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::elementwise::{self as kel, broadcast_shape, IntBinary};
use ferrite_kernels::qelementwise::{binary_q, CompareScale, QBinary};
use ferrite_kernels::quant::{self as kq};

use super::quant::*;
use super::{clamp_of, runtime};
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::{Activation, OpParams};

/// The element-wise family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::ADD | B::SUB | B::MUL | B::PRELU | B::SQUARED_DIFFERENCE if op.is_int() && op.opt_input(0).is_some_and(|d| d.quant.is_some()) => {
            binary_int(op, code)
        }
        B::ADD | B::SUB | B::MUL | B::DIV | B::MAXIMUM | B::MINIMUM | B::SQUARED_DIFFERENCE | B::POW | B::FLOOR_DIV | B::FLOOR_MOD | B::PRELU => {
            binary(op, code, ctx.pool())
        }
        B::LESS | B::LESS_EQUAL | B::GREATER | B::GREATER_EQUAL | B::EQUAL | B::NOT_EQUAL => compare(op, code),
        B::LOGICAL_AND | B::LOGICAL_OR | B::LOGICAL_NOT => logical(op, code),
        B::SELECT | B::SELECT_V2 => select(op),
        B::RIGHT_SHIFT | B::BITWISE_XOR => bitwise(op, code),
        B::ATAN2 => atan2(op),
        B::ADD_N => add_n(op),
        _ => return None,
    })
}

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
            let kind = super::chain::binary_kind(code).ok_or_else(|| op.unsupported("binary op"))?;
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
            let kind = match code {
                B::ADD => IntBinary::Add,
                B::SUB => IntBinary::Sub,
                B::MUL => IntBinary::Mul,
                B::DIV => IntBinary::Div,
                B::MAXIMUM => IntBinary::Max,
                B::MINIMUM => IntBinary::Min,
                B::SQUARED_DIFFERENCE => IntBinary::SquaredDifference,
                B::FLOOR_DIV => IntBinary::FloorDiv,
                B::FLOOR_MOD => IntBinary::FloorMod,
                B::POW => IntBinary::Pow,
                _ => return Err(op.unsupported(format!("{} on integers", op.op.code.name()))),
            };
            let range = match act {
                Activation::Relu => (0, i64::MAX),
                Activation::Relu6 => (0, 6),
                _ => (i64::MIN, i64::MAX),
            };
            let wide = dtype == DType::I64;
            Box::new(move |ins, outs| {
                let ok = if wide {
                    kel::binary_i64(kind, typed(arg(ins, 0)?)?, &sa, typed(arg(ins, 1)?)?, &sb, typed_mut(outs[0])?, &os, range)
                } else {
                    kel::binary_i32(kind, typed(arg(ins, 0)?)?, &sa, typed(arg(ins, 1)?)?, &sb, typed_mut(outs[0])?, &os, range)
                };
                if !ok {
                    return Err(runtime("integer division by zero"));
                }
                Ok(())
            })
        }
        DType::I8 | DType::U8 | DType::I16 if matches!(code, B::MAXIMUM | B::MINIMUM) => {
            // LiteRT takes the larger (smaller) stored integer: the converter gives both
            // inputs and the output one quantization, under which that is the real max.
            let max = code == B::MAXIMUM;
            macro_rules! k {
                ($t:ty) => {
                    Box::new(move |ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]| {
                        let (x, y, o) = (typed::<$t>(arg(ins, 0)?)?, typed::<$t>(arg(ins, 1)?)?, typed_mut::<$t>(outs[0])?);
                        kel::binary(x, &sa, y, &sb, o, &os, |x: $t, y: $t| if max { x.max(y) } else { x.min(y) });
                        Ok(())
                    }) as crate::backend::KernelFn
                };
            }
            match dtype {
                DType::I8 => k!(i8),
                DType::U8 => k!(u8),
                _ => k!(i16),
            }
        }
        t => return Err(op.unsupported(format!("element type {}", t.name()))),
    };
    Ok(Built { outputs: vec![(dtype, out)], kernel })
}

/// ADD / SUB / MUL (int8, uint8, int16) and PRELU (int8, uint8, and int16 with an
/// int8 alpha) with broadcasting, as LiteRT's builtin kernels: ADD and SUB shift
/// both inputs left (20 bits, 15 for int16), rescale them to twice the larger input
/// scale, combine, and rescale to the output; MUL rescales the product; PRELU
/// rescales x or x * alpha.
/// ADD_N: the sum of one or more float32 or int32 tensors of one shape (no
/// broadcasting: LiteRT requires equal shapes), added in input order.
pub(crate) fn add_n(op: &OpContext<'_>) -> Result<Built> {
    let first = op.input(0)?;
    let (dtype, shape) = (first.dtype, first.shape.clone());
    let count = op.inputs.len();
    for i in 1..count {
        let x = op.input(i)?;
        if x.dtype != dtype || x.shape != shape {
            return Err(op.bad(format!("ADD_N input {i} is {} {:?}, input 0 is {} {shape:?}", x.dtype.name(), x.shape, dtype.name())));
        }
    }
    let n = op.checked_elements(&shape, 4)?;
    macro_rules! summed {
        ($T:ty) => {
            Ok(Built {
                outputs: vec![(dtype, shape)],
                kernel: Box::new(move |ins, outs| {
                    let xs = (0..count).map(|i| typed::<$T>(arg(ins, i)?)).collect::<Result<Vec<_>>>()?;
                    let out = typed_mut::<$T>(outs[0])?;
                    if out.len() != n || xs.iter().any(|x| x.len() != n) {
                        return Err(runtime("ADD_N buffers do not match the planned shape"));
                    }
                    kel::add_n(&xs, out);
                    Ok(())
                }),
            })
        };
    }
    match dtype {
        DType::F32 => summed!(f32),
        DType::I32 => summed!(i32),
        t => Err(op.unsupported(format!("ADD_N of {} (LiteRT takes float32 and int32)", t.name()))),
    }
}

pub(crate) fn binary_int(op: &OpContext<'_>, code: ferrite_format::ops::BuiltinOp) -> Result<Built> {
    use ferrite_format::ops::BuiltinOp as B;
    let (a, b) = (op.input(0)?, op.input(1)?);
    let dtype = a.dtype;
    // LiteRT's int16 PRELU reads its alpha as int8 (the int16x8 scheme).
    let alpha16x8 = code == B::PRELU && dtype == DType::I16;
    let b_type = if alpha16x8 { DType::I8 } else { dtype };
    if !matches!(dtype, DType::I8 | DType::U8 | DType::I16) || b.dtype != b_type || op.outputs[0].dtype != dtype {
        return Err(op.unsupported(format!("quantized {} of {} and {}", op.op.code.name(), a.dtype.name(), b.dtype.name())));
    }
    let (s1, z1) = per_tensor(op, a.quant, "input 0")?;
    let (s2, z2) = per_tensor(op, b.quant, "input 1")?;
    let (so, zo) = per_tensor(op, op.outputs[0].quant.as_ref(), "output")?;
    let (act, pot_scale_int16) = match op.op.params {
        OpParams::Binary { activation, pot_scale_int16 } => (activation, pot_scale_int16),
        _ => (Activation::None, false),
    };
    let (lo, hi) = activation_range(act, so, zo, dtype);
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = ferrite_kernels::elementwise::broadcast_shape(&sa, &sb).ok_or_else(|| op.bad(format!("shapes {sa:?} and {sb:?} do not broadcast")))?;
    let os = out.clone();
    let pot_exponent = |s: f32| {
        let l = f64::from(s).log2();
        ((l - l.round()).abs() < 1e-3).then_some(l.round() as i32)
    };
    let pot = (pot_exponent(s1), pot_exponent(s2), pot_exponent(so));
    let p = match (code, pot) {
        (B::ADD | B::SUB, (Some(l1), Some(l2), Some(lo_exp))) if dtype == DType::I16 && pot_scale_int16 => {
            // LiteRT's shift-only int16 path: every scale a power of two, one input
            // already at the output's scale, the other shifted right onto it.
            if z1 != 0 || z2 != 0 || zo != 0 {
                return Err(op.bad("int16 ADD / SUB require zero points of 0"));
            }
            let (e1, e2) = (l1 - lo_exp, l2 - lo_exp);
            if (e1 != 0 && e2 != 0) || e1 > 0 || e2 > 0 {
                return Err(op.bad(format!("int16 {} with power-of-two scales needs one input at the output's scale and the other finer", op.op.code.name())));
            }
            QBinary::PotAddSub { e1, e2, sign: if code == B::SUB { -1 } else { 1 }, min: lo, max: hi }
        }
        (B::ADD | B::SUB, _) => QBinary::add_sub((s1, z1), (s2, z2), (so, zo), code == B::SUB, dtype == DType::I16, (lo, hi)),
        (B::PRELU, _) => QBinary::prelu((s1, z1), (s2, z2), (so, zo), (lo, hi)),
        (B::MUL, _) => QBinary::mul((s1, z1), (s2, z2), (so, zo), (lo, hi)),
        // LiteRT's SQUARED_DIFFERENCE takes no fused activation and is int8 only.
        (B::SQUARED_DIFFERENCE, _) if dtype == DType::I8 => QBinary::squared_difference((s1, z1), (s2, z2), (so, zo), int_range(dtype)),
        _ => return Err(op.unsupported(format!("quantized {}", op.op.code.name()))),
    };
    Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (x, y, o) = (arg(ins, 0)?, arg(ins, 1)?, &mut *outs[0]);
            // ADD / SUB of equal shapes: the vectorized loops.
            if let QBinary::AddSub(p) = &p {
                if sa == sb {
                    match dtype {
                        DType::I8 => kq::add_sub_i8(typed(x)?, typed(y)?, p, typed_mut(o)?),
                        DType::U8 => kq::add_sub_u8(x, y, p, o),
                        _ => kq::add_sub_i16(typed(x)?, typed(y)?, p, typed_mut(o)?),
                    }
                    return Ok(());
                }
            }
            match dtype {
                DType::I8 => binary_q::<i8, i8, i8>(&p, typed(x)?, &sa, typed(y)?, &sb, typed_mut(o)?, &os),
                DType::U8 => binary_q::<u8, u8, u8>(&p, x, &sa, y, &sb, o, &os),
                _ if alpha16x8 => binary_q::<i16, i8, i16>(&p, typed(x)?, &sa, typed(y)?, &sb, typed_mut(o)?, &os),
                _ => binary_q::<i16, i16, i16>(&p, typed(x)?, &sa, typed(y)?, &sb, typed_mut(o)?, &os),
            }
            Ok(())
        }),
    })
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
    // int8 / uint8 with quantization: LiteRT compares each operand rescaled by its own
    // scale (int16 and plain integers compare as stored).
    if let (DType::I8 | DType::U8, Some(qa), Some(qb)) = (dtype, a.quant, b.quant) {
        let scaled = |q: &crate::model::Quantization, what: &str| {
            let (s, z) = (q.scale.first().copied().unwrap_or(0.0), q.zero_point.first().copied().unwrap_or(0) as i32);
            CompareScale::new(s, z)
                .ok_or_else(|| op.unsupported(format!("quantized comparison with {what}'s scale {s} (LiteRT's rescale is undefined for scales >= 1)")))
        };
        let (ca, cb) = (scaled(qa, "input 0")?, scaled(qb, "input 1")?);
        let f = cmp::<i32>(code);
        macro_rules! q {
            ($t:ty) => {
                Box::new(move |ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]| {
                    let o = typed_mut::<u8>(outs[0])?;
                    kel::binary(typed::<$t>(arg(ins, 0)?)?, &sa, typed::<$t>(arg(ins, 1)?)?, &sb, o, &os, |x: $t, y: $t| {
                        f(ca.apply(i32::from(x)), cb.apply(i32::from(y))) as u8
                    });
                    Ok(())
                }) as crate::backend::KernelFn
            };
        }
        let kernel = if dtype == DType::I8 { q!(i8) } else { q!(u8) };
        return Ok(Built { outputs: vec![(DType::Bool, out)], kernel });
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

/// RIGHT_SHIFT and BITWISE_XOR on plain 8-, 16- and 32-bit integers (signed and
/// unsigned) of one type, with broadcasting.
pub(crate) fn bitwise(op: &OpContext<'_>, code: B) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype {
        return Err(op.bad(format!("input types differ: {} and {}", a.dtype.name(), b.dtype.name())));
    }
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let out = broadcast(op, &sa, &sb)?;
    let (dtype, os) = (a.dtype, out.clone());
    let (n_a, n_b) = (op.checked_elements(&sa, 4)?, op.checked_elements(&sb, 4)?);
    let n_out = op.checked_elements(&out, 4)?;
    let shift = code == B::RIGHT_SHIFT;
    macro_rules! bits {
        ($T:ty) => {
            Box::new(move |ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]| {
                let (x, y, o) = (typed::<$T>(arg(ins, 0)?)?, typed::<$T>(arg(ins, 1)?)?, typed_mut::<$T>(outs[0])?);
                if x.len() != n_a || y.len() != n_b || o.len() != n_out {
                    return Err(runtime(format!(
                        "{} buffers of {}, {} and {} elements for shapes {sa:?}, {sb:?} -> {os:?}",
                        if shift { "RIGHT_SHIFT" } else { "BITWISE_XOR" },
                        x.len(),
                        y.len(),
                        o.len()
                    )));
                }
                if shift {
                    kel::right_shift(x, &sa, y, &sb, o, &os);
                } else {
                    kel::bitwise_xor(x, &sa, y, &sb, o, &os);
                }
                Ok(())
            }) as crate::backend::KernelFn
        };
    }
    let kernel = match dtype {
        DType::I8 => bits!(i8),
        DType::U8 => bits!(u8),
        DType::I16 => bits!(i16),
        DType::U16 => bits!(u16),
        DType::I32 => bits!(i32),
        DType::U32 => bits!(u32),
        t => return Err(op.unsupported(format!("{} of {}", op.op.code.name(), t.name()))),
    };
    Ok(Built { outputs: vec![(dtype, out)], kernel })
}

/// ATAN2 (float32): the angle of the point (x = input 1, y = input 0), with broadcasting.
pub(crate) fn atan2(op: &OpContext<'_>) -> Result<Built> {
    super::require_f32(op, &[0, 1])?;
    let (sa, sb) = (op.input(0)?.shape.clone(), op.input(1)?.shape.clone());
    let out = broadcast(op, &sa, &sb)?;
    let os = out.clone();
    let (n_a, n_b, n_out) = (op.checked_elements(&sa, 4)?, op.checked_elements(&sb, 4)?, op.checked_elements(&out, 4)?);
    Ok(Built {
        outputs: vec![(DType::F32, out)],
        kernel: Box::new(move |ins, outs| {
            let (y, x, o) = (typed::<f32>(arg(ins, 0)?)?, typed::<f32>(arg(ins, 1)?)?, typed_mut::<f32>(outs[0])?);
            if y.len() != n_a || x.len() != n_b || o.len() != n_out {
                return Err(runtime(format!("ATAN2 buffers of {}, {} and {} elements for shapes {sa:?}, {sb:?} -> {os:?}", y.len(), x.len(), o.len())));
            }
            kel::binary(y, &sa, x, &sb, o, &os, f32::atan2);
            Ok(())
        }),
    })
}
