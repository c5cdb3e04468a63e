//! The ops of the StableHLO legalization: element-wise STABLEHLO_ADD, MULTIPLY,
//! MAXIMUM, MINIMUM and AND (equal shapes, no broadcasting), STABLEHLO_PAD and
//! DILATE (one padding kernel), and REDUCE_WINDOW. They compute on the stored
//! values of every numeric type and bool, as LiteRT's kernels do: int8 is a plain
//! integer to them, its quantization ignored.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_kernels::hlo::{self, Combine};

use super::by_size;
use crate::backend::{arg, typed, typed_mut, BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::DType;
use crate::ops::OpParams;
use crate::ops_hlo::{by_hlo_type, HloParams};

/// The StableHLO family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, _ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::STABLEHLO_ADD => binary(op, Combine::Add),
        B::STABLEHLO_MULTIPLY => binary(op, Combine::Mul),
        B::STABLEHLO_MAXIMUM => binary(op, Combine::Max),
        B::STABLEHLO_MINIMUM => binary(op, Combine::Min),
        B::STABLEHLO_AND => binary(op, Combine::And),
        B::STABLEHLO_PAD => stablehlo_pad(op),
        B::DILATE => dilate(op),
        B::REDUCE_WINDOW => reduce_window(op),
        B::STABLEHLO_REDUCE_WINDOW => stablehlo_reduce_window(op),
        B::STABLEHLO_GATHER => super::hlo_index::gather(op),
        B::STABLEHLO_SCATTER => super::hlo_index::scatter(op),
        _ => return None,
    })
}

/// A typed view of a kernel buffer. An empty tensor's buffer may sit at any
/// address, so it views as empty without the alignment check.
pub(super) fn view<T: bytemuck::Pod>(b: &[u8]) -> Result<&[T]> {
    if b.is_empty() {
        Ok(&[])
    } else {
        typed(b)
    }
}

/// [`view`] of an output buffer.
pub(super) fn view_mut<T: bytemuck::Pod>(b: &mut [u8]) -> Result<&mut [T]> {
    if b.is_empty() {
        Ok(&mut [])
    } else {
        typed_mut(b)
    }
}

/// A runtime error for a buffer of another size than the op was built for.
pub(super) fn sized(what: &'static str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(super::runtime(format!("{what}: a buffer of {got} elements, the op needs {want}")))
    }
}

/// The element-wise ops: both inputs of one type and one shape (StableHLO has no
/// implicit broadcasting, and LiteRT refuses differing shapes at prepare).
fn binary(op: &OpContext<'_>, c: Combine) -> Result<Built> {
    let (a, b) = (op.input(0)?, op.input(1)?);
    if a.dtype != b.dtype {
        return Err(op.bad(format!("inputs of types {} and {}", a.dtype.name(), b.dtype.name())));
    }
    if a.shape != b.shape {
        return Err(op.bad(format!("inputs of shapes {:?} and {:?} (no broadcasting)", a.shape, b.shape)));
    }
    if c == Combine::And && a.dtype == DType::F32 {
        return Err(op.unsupported("bitwise/logical AND of float32 (LiteRT refuses it too)"));
    }
    let (dtype, shape) = (a.dtype, a.shape.clone());
    let n = op.checked_elements(&shape, dtype.size().unwrap_or(1))?;
    by_hlo_type!(op, dtype, c, T => Ok(Built {
        outputs: vec![(dtype, shape)],
        kernel: Box::new(move |ins, outs| {
            let (x, y, o) = (view::<T>(arg(ins, 0)?)?, view::<T>(arg(ins, 1)?)?, view_mut::<T>(outs[0])?);
            sized("inputs", x.len().min(y.len()), n)?;
            sized("output", o.len(), n)?;
            hlo::binary(c, x, y, o);
            Ok(())
        }),
    }))
}

/// Padding shared by STABLEHLO_PAD and DILATE: input 0 padded with the first value
/// of input `value_input` (of input 0's type).
fn padded(op: &OpContext<'_>, value_input: usize, low: Vec<i64>, high: &[i64], interior: Vec<usize>) -> Result<Built> {
    let x = op.input(0)?;
    let v = op.input(value_input)?;
    if v.dtype != x.dtype {
        return Err(op.bad(format!("padding value of type {}, input of type {}", v.dtype.name(), x.dtype.name())));
    }
    if v.shape.iter().product::<usize>() == 0 {
        return Err(op.bad("empty padding value"));
    }
    let (dtype, shape) = (x.dtype, x.shape.clone());
    let out = hlo::pad_shape(&shape, &low, high, &interior).ok_or_else(|| {
        op.bad(format!("padding low {low:?}, high {high:?}, interior {interior:?} of input shape {shape:?} leaves a negative or unrepresentable size"))
    })?;
    let size = dtype.size().unwrap_or(1);
    let (n_in, n_out) = (op.checked_elements(&shape, size)?, op.checked_elements(&out, size)?);
    let out_shape = out.clone();
    by_size!(op, dtype, T => Ok(Built {
        outputs: vec![(dtype, out)],
        kernel: Box::new(move |ins, outs| {
            let (x, o) = (view::<T>(arg(ins, 0)?)?, view_mut::<T>(outs[0])?);
            let value = *view::<T>(arg(ins, value_input)?)?.first().ok_or_else(|| super::runtime("empty padding value"))?;
            sized("input", x.len(), n_in)?;
            sized("output", o.len(), n_out)?;
            hlo::pad(x, &shape, &low, &interior, value, &out_shape, o);
            Ok(())
        }),
    }))
}

/// STABLEHLO_PAD (input, padding value): edge padding (negative crops) and interior
/// padding per dimension, from the op's options.
fn stablehlo_pad(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Hlo(HloParams::Pad { low, high, interior }) = &op.op.params else {
        // LiteRT refuses the op without its options table as well.
        return Err(op.bad("missing StablehloPadOptions"));
    };
    let r = op.input(0)?.shape.len();
    if low.len() != r || high.len() != r || interior.len() != r {
        return Err(op.bad(format!("padding lists of {}, {} and {} values for an input of rank {r}", low.len(), high.len(), interior.len())));
    }
    let interior = interior
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| op.bad(format!("interior padding {interior:?} must be non-negative"))))
        .collect::<Result<Vec<_>>>()?;
    padded(op, 1, low.clone(), high, interior)
}

/// DILATE (input, dilations int32 `[rank]`, padding value): `dilation - 1` padding
/// values between neighbouring elements of each dimension.
fn dilate(op: &OpContext<'_>) -> Result<Built> {
    let r = op.input(0)?.shape.len();
    if op.input(1)?.dtype != DType::I32 {
        return Err(op.unsupported(format!("dilations of type {} (LiteRT takes int32 only)", op.input(1)?.dtype.name())));
    }
    let d = op.const_ints(1)?;
    if d.len() != r {
        return Err(op.bad(format!("{} dilations for an input of rank {r}", d.len())));
    }
    let interior = d.iter().map(|&k| usize::try_from(k - 1).map_err(|_| op.bad(format!("dilations {d:?} must be at least 1")))).collect::<Result<Vec<_>>>()?;
    padded(op, 2, vec![0; r], &vec![0; r], interior)
}

/// REDUCE_WINDOW (input, init value, window shape, strides, dilations; the three
/// lists int64 `[rank]`, constant): each output element reduces one window with the
/// options' function, starting from the init value. No padding (the legalization
/// emits a separate pad).
fn reduce_window(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Hlo(HloParams::ReduceWindow { function }) = op.op.params else {
        return Err(op.bad("missing ReduceWindowOptions"));
    };
    let c = Combine::of_reduce_function(function).ok_or_else(|| op.unsupported(format!("reduce function code {function} (LiteRT refuses it too)")))?;
    let (x, init) = (op.input(0)?, op.input(1)?);
    if init.dtype != x.dtype || init.shape.iter().product::<usize>() == 0 {
        return Err(op.bad(format!("init value of type {} and shape {:?} for an input of type {}", init.dtype.name(), init.shape, x.dtype.name())));
    }
    let r = x.shape.len();
    let mut lists = Vec::with_capacity(3);
    for (i, name) in [(2, "window shape"), (3, "window strides"), (4, "window dilations")] {
        if op.input(i)?.dtype != DType::I64 {
            return Err(op.unsupported(format!("{name} of type {} (LiteRT takes int64 only)", op.input(i)?.dtype.name())));
        }
        lists.push(op.const_ints(i)?);
    }
    let geometry =
        Geometry { window: lists[0].clone(), strides: lists[1].clone(), window_dilations: lists[2].clone(), base_dilations: vec![], padding: vec![] };
    windowed(op, c, &geometry.resolve(op, r)?)
}

/// A window reduction's lists as the options give them; empty optional lists take
/// StableHLO's defaults.
struct Geometry {
    window: Vec<i64>,
    strides: Vec<i64>,
    window_dilations: Vec<i64>,
    base_dilations: Vec<i64>,
    padding: Vec<i64>,
}

/// The checked geometry: sizes per dimension, padding low and high.
struct Resolved {
    window: Vec<usize>,
    strides: Vec<usize>,
    window_dilations: Vec<usize>,
    base_interior: Vec<usize>,
    low: Vec<i64>,
    high: Vec<i64>,
}

impl Geometry {
    fn resolve(&self, op: &OpContext<'_>, r: usize) -> Result<Resolved> {
        let positive = |v: &[i64], name: &str, default: bool| -> Result<Vec<usize>> {
            if v.is_empty() && default {
                return Ok(vec![1; r]);
            }
            if v.len() != r || v.iter().any(|&k| k < 1) {
                return Err(op.bad(format!("{name} {v:?} must hold {r} positive values")));
            }
            Ok(v.iter().map(|&k| usize::try_from(k).unwrap_or(usize::MAX)).collect())
        };
        let padding = if self.padding.is_empty() { vec![0; 2 * r] } else { self.padding.clone() };
        if padding.len() != 2 * r {
            return Err(op.bad(format!("padding {padding:?} must hold {} values (low and high per dimension)", 2 * r)));
        }
        Ok(Resolved {
            window: positive(&self.window, "window dimensions", false)?,
            strides: positive(&self.strides, "window strides", true)?,
            window_dilations: positive(&self.window_dilations, "window dilations", true)?,
            base_interior: positive(&self.base_dilations, "base dilations", true)?.iter().map(|b| b - 1).collect(),
            low: padding.iter().step_by(2).copied().collect(),
            high: padding.iter().skip(1).step_by(2).copied().collect(),
        })
    }
}

/// The window reduction of input 0 from the init value of input 1: the input is
/// padded (edges and base dilation) with the init value, as StableHLO defines it,
/// then each window position is reduced.
fn windowed(op: &OpContext<'_>, c: Combine, g: &Resolved) -> Result<Built> {
    let x = op.input(0)?;
    let (dtype, shape) = (x.dtype, x.shape.clone());
    let padded = hlo::pad_shape(&shape, &g.low, &g.high, &g.base_interior)
        .ok_or_else(|| op.bad(format!("padding low {:?}, high {:?} leaves a negative size of input shape {shape:?}", g.low, g.high)))?;
    let out = hlo::window_shape(&padded, &g.window, &g.strides, &g.window_dilations)
        .ok_or_else(|| op.bad(format!("window {:?}, strides {:?}, dilations {:?} for padded shape {padded:?}", g.window, g.strides, g.window_dilations)))?;
    let size = dtype.size().unwrap_or(1);
    let (n_in, n_pad, n_out) = (op.checked_elements(&shape, size)?, op.checked_elements(&padded, size)?, op.checked_elements(&out, size)?);
    // The window's taps are enumerated per output element: bound their number.
    op.checked_elements(&g.window, size)?;
    let (window, strides, dilations, low, interior) = (g.window.clone(), g.strides.clone(), g.window_dilations.clone(), g.low.clone(), g.base_interior.clone());
    // Without padding the input is reduced in place; else it is padded into scratch
    // sized at the first run.
    let plain = low.iter().chain(&g.high).all(|&p| p == 0) && interior.iter().all(|&i| i == 0);
    let out_shape = out.clone();
    by_hlo_type!(op, dtype, c, T => {
        let mut scratch: Vec<T> = Vec::new();
        Ok(Built {
            outputs: vec![(dtype, out)],
            kernel: Box::new(move |ins, outs| {
                let (x, o) = (view::<T>(arg(ins, 0)?)?, view_mut::<T>(outs[0])?);
                let init = *view::<T>(arg(ins, 1)?)?.first().ok_or_else(|| super::runtime("empty init value"))?;
                sized("input", x.len(), n_in)?;
                sized("output", o.len(), n_out)?;
                let src = if plain {
                    x
                } else {
                    scratch.resize(n_pad, init);
                    hlo::pad(x, &shape, &low, &interior, init, &padded, &mut scratch);
                    &scratch[..]
                };
                hlo::reduce_window(c, src, if plain { &shape } else { &padded }, init, &window, &strides, &dilations, &out_shape, o);
                Ok(())
            }),
        })
    })
}

/// STABLEHLO_REDUCE_WINDOW (input, init value): the window reduction its body
/// subgraph's single op names (LiteRT runs ADD, MUL, MAXIMUM, MINIMUM, LOGICAL_AND
/// and LOGICAL_OR bodies, builtin or StableHLO; AND combines truth values there).
fn stablehlo_reduce_window(op: &OpContext<'_>) -> Result<Built> {
    let OpParams::Hlo(HloParams::StablehloReduceWindow { window, strides, base_dilations, window_dilations, padding, body, .. }) = &op.op.params else {
        return Err(op.bad("missing StablehloReduceWindowOptions"));
    };
    let code = body.as_ref().map_err(|why| op.unsupported(why))?;
    let c = match code {
        B::ADD | B::STABLEHLO_ADD => Combine::Add,
        B::MUL | B::STABLEHLO_MULTIPLY => Combine::Mul,
        B::MAXIMUM | B::STABLEHLO_MAXIMUM => Combine::Max,
        B::MINIMUM | B::STABLEHLO_MINIMUM => Combine::Min,
        B::LOGICAL_AND | B::STABLEHLO_AND => Combine::All,
        B::LOGICAL_OR => Combine::Any,
        other => return Err(op.unsupported(format!("reduction body op {other} (LiteRT runs ADD, MUL, MAXIMUM, MINIMUM, LOGICAL_AND, LOGICAL_OR bodies)"))),
    };
    let (x, init) = (op.input(0)?, op.input(1)?);
    if init.dtype != x.dtype || init.shape.iter().product::<usize>() == 0 {
        return Err(op.bad(format!("init value of type {} and shape {:?} for an input of type {}", init.dtype.name(), init.shape, x.dtype.name())));
    }
    let geometry = Geometry {
        window: window.clone(),
        strides: strides.clone(),
        window_dilations: window_dilations.clone(),
        base_dilations: base_dilations.clone(),
        padding: padding.clone(),
    };
    windowed(op, c, &geometry.resolve(op, x.shape.len())?)
}
