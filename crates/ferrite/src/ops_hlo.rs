//! Parameters of the ops the StableHLO legalization emits, read from the format's
//! second options union (`builtin_options_2`): the first union is full, so these
//! tables live apart from the ones `ops::parse_params` reads.

use ferrite_format::ops::BuiltinOp;
use ferrite_format::schema as fb;
use ferrite_format::Table;

use crate::error::{invalid, Result};
use crate::model::OpCode;
use crate::ops::OpParams;

/// Runs `$body` with `$T` the Rust type of `$dtype` and the combination `$c`
/// rebound for booleans (bytes combined as logic); refuses other types. Shared by
/// the CPU and reference backends' StableHLO families, whose kernels differ but
/// whose element types are LiteRT's same list.
macro_rules! by_hlo_type {
    ($op:expr, $dtype:expr, $c:ident, $T:ident => $body:expr) => {{
        match $dtype {
            $crate::model::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::model::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::model::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::model::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::model::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::model::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::model::DType::Bool => {
                type $T = u8;
                let $c = ferrite_kernels::hlo::bool_combine($c);
                $body
            }
            t => Err($op.unsupported(format!("element type {}", t.name()))),
        }
    }};
}
pub(crate) use by_hlo_type;

/// Parameters of a StableHLO-derived op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HloParams {
    /// STABLEHLO_PAD: per-dimension low and high edge padding (negative crops) and
    /// interior padding, as written (checked against the input rank at prepare).
    Pad {
        /// Before the first element.
        low: Vec<i64>,
        /// After the last element.
        high: Vec<i64>,
        /// Between neighbouring elements.
        interior: Vec<i64>,
    },
    /// REDUCE_WINDOW: the raw `ReduceWindowFunction` code (an unknown one is refused
    /// at prepare with the code in the message, as LiteRT refuses it).
    ReduceWindow {
        /// The function code.
        function: i32,
    },
    /// STABLEHLO_REDUCE_WINDOW: window geometry per dimension (absent lists take
    /// StableHLO's defaults: strides and dilations 1, padding 0), padding as
    /// `[low0, high0, ...]`, and the op its body subgraph computes.
    StablehloReduceWindow {
        /// Window size.
        window: Vec<i64>,
        /// Window stride.
        strides: Vec<i64>,
        /// Input dilation (interior padding plus one, filled with the init value).
        base_dilations: Vec<i64>,
        /// Spacing of the window's elements.
        window_dilations: Vec<i64>,
        /// Edge padding (negative crops), low and high per dimension.
        padding: Vec<i64>,
        /// The body subgraph.
        body_subgraph: i32,
        /// The body's single op, once [`resolve_bodies`] has looked (`Err` says why
        /// it could not name one).
        body: std::result::Result<BuiltinOp, String>,
    },
    /// STABLEHLO_RNG_BIT_GENERATOR: the raw `RngAlgorithm` code (0 DEFAULT, 1 PHILOX,
    /// 2 THREEFRY; another one is refused by the builders, with the code).
    RngBitGenerator {
        /// The algorithm code.
        algorithm: i8,
    },
    /// STABLEHLO_GATHER: the dimension numbers as written (checked against the
    /// operand and indices shapes at prepare).
    Gather {
        /// Output dimensions indexing within a slice.
        offset_dims: Vec<i64>,
        /// Operand dimensions of slice size 1 left out of the output.
        collapsed_slice_dims: Vec<i64>,
        /// Operand dimension each index vector element starts.
        start_index_map: Vec<i64>,
        /// The indices' dimension holding the index vectors.
        index_vector_dim: i64,
        /// Slice size per operand dimension.
        slice_sizes: Vec<i64>,
    },
    /// STABLEHLO_SCATTER: the dimension numbers as written and the update
    /// computation its body subgraph names.
    Scatter {
        /// Updates' dimensions indexing within a window.
        update_window_dims: Vec<i64>,
        /// Operand dimensions a window does not span.
        inserted_window_dims: Vec<i64>,
        /// Operand dimension each index vector element starts.
        scatter_dims_to_operand_dims: Vec<i64>,
        /// The indices' dimension holding the index vectors.
        index_vector_dim: i64,
        /// The update computation's subgraph.
        body_subgraph: i32,
        /// The body's single op, `None` for a body that returns the update as it
        /// is, once [`resolve_bodies`] has looked (`Err` says why it could not).
        body: std::result::Result<Option<BuiltinOp>, String>,
    },
}

/// The parameters of `op` from the operator table `o`, for the ops that read the
/// second options union; `None` for every other op. A table of another union member
/// than the op reads is ignored (read with the wrong layout it would be garbage),
/// which leaves the op without options: its builder refuses it then.
pub fn parse(op: BuiltinOp, o: Table<'_>) -> Result<Option<HloParams>> {
    use fb::BuiltinOptions2 as T;
    let expected = match op {
        BuiltinOp::STABLEHLO_PAD => T::StablehloPadOptions,
        BuiltinOp::REDUCE_WINDOW => T::ReduceWindowOptions,
        BuiltinOp::STABLEHLO_REDUCE_WINDOW => T::StablehloReduceWindowOptions,
        BuiltinOp::STABLEHLO_RNG_BIT_GENERATOR => T::StablehloRngBitGeneratorOptions,
        BuiltinOp::STABLEHLO_GATHER => T::StablehloGatherOptions,
        BuiltinOp::STABLEHLO_SCATTER => T::StablehloScatterOptions,
        _ => return Ok(None),
    };
    let kind = o.scalar::<u8>(fb::Operator::VT_BUILTIN_OPTIONS_2_TYPE, 0)?;
    let Some(t) = o.table(fb::Operator::VT_BUILTIN_OPTIONS_2)?.filter(|_| kind == expected.0) else {
        return Ok(None);
    };
    // These lists have one entry per dimension; anything longer than the deepest
    // rank a tensor may have is malformed, and messages print them.
    let list = |slot: u16, name: &str| -> Result<Vec<i64>> {
        let v = t.vec_of::<i64>(slot)?;
        if v.len() > 2 * crate::model::MAX_RANK {
            return Err(invalid(format!("{op}: {name} lists {} values", v.len())));
        }
        Ok(v)
    };
    Ok(Some(match op {
        BuiltinOp::STABLEHLO_PAD => {
            use fb::StablehloPadOptions as O;
            HloParams::Pad {
                low: list(O::VT_EDGE_PADDING_LOW, "edge_padding_low")?,
                high: list(O::VT_EDGE_PADDING_HIGH, "edge_padding_high")?,
                interior: list(O::VT_INTERIOR_PADDING, "interior_padding")?,
            }
        }
        BuiltinOp::STABLEHLO_REDUCE_WINDOW => {
            use fb::StablehloReduceWindowOptions as O;
            HloParams::StablehloReduceWindow {
                window: list(O::VT_WINDOW_DIMENSIONS, "window_dimensions")?,
                strides: list(O::VT_WINDOW_STRIDES, "window_strides")?,
                base_dilations: list(O::VT_BASE_DILATIONS, "base_dilations")?,
                window_dilations: list(O::VT_WINDOW_DILATIONS, "window_dilations")?,
                padding: list(O::VT_PADDING, "padding")?,
                body_subgraph: t.scalar::<i32>(O::VT_BODY_SUBGRAPH_INDEX, 0)?,
                body: Err("not looked up".into()),
            }
        }
        BuiltinOp::STABLEHLO_GATHER => {
            use fb::StablehloGatherOptions as O;
            HloParams::Gather {
                offset_dims: list(O::VT_OFFSET_DIMS, "offset_dims")?,
                collapsed_slice_dims: list(O::VT_COLLAPSED_SLICE_DIMS, "collapsed_slice_dims")?,
                start_index_map: list(O::VT_START_INDEX_MAP, "start_index_map")?,
                index_vector_dim: t.scalar::<i64>(O::VT_INDEX_VECTOR_DIM, 0)?,
                slice_sizes: list(O::VT_SLICE_SIZES, "slice_sizes")?,
            }
        }
        BuiltinOp::STABLEHLO_SCATTER => {
            use fb::StablehloScatterOptions as O;
            HloParams::Scatter {
                update_window_dims: list(O::VT_UPDATE_WINDOW_DIMS, "update_window_dims")?,
                inserted_window_dims: list(O::VT_INSERTED_WINDOW_DIMS, "inserted_window_dims")?,
                scatter_dims_to_operand_dims: list(O::VT_SCATTER_DIMS_TO_OPERAND_DIMS, "scatter_dims_to_operand_dims")?,
                index_vector_dim: t.scalar::<i64>(O::VT_INDEX_VECTOR_DIM, 0)?,
                body_subgraph: t.scalar::<i32>(O::VT_UPDATE_COMPUTATION_SUBGRAPH_INDEX, 0)?,
                body: Err("not looked up".into()),
            }
        }
        BuiltinOp::STABLEHLO_RNG_BIT_GENERATOR => {
            HloParams::RngBitGenerator { algorithm: t.scalar::<i8>(fb::StablehloRngBitGeneratorOptions::VT_ALGORITHM, 0)? }
        }
        _ => HloParams::ReduceWindow { function: t.scalar::<i32>(fb::ReduceWindowOptions::VT_REDUCE_FUNCTION, 0)? },
    }))
}

/// Names the op each STABLEHLO_REDUCE_WINDOW's and STABLEHLO_SCATTER's body
/// subgraph computes: a body of one op whose two inputs are the body's inputs and
/// whose output is its output (the only form LiteRT runs), or for a scatter also a
/// body of no op that returns its second input (the update replaces the value).
/// Other bodies are left with the reason, for the builder's error; a model is not
/// refused here, as an op that never runs may stay unread.
pub fn resolve_bodies(subgraphs: &mut [crate::model::Subgraph]) {
    let mut found = vec![];
    let mut scatters = vec![];
    for (si, sg) in subgraphs.iter().enumerate() {
        for (oi, op) in sg.ops.iter().enumerate() {
            match &op.params {
                OpParams::Hlo(HloParams::StablehloReduceWindow { body_subgraph, .. }) => found.push((si, oi, body_of(subgraphs, *body_subgraph))),
                OpParams::Hlo(HloParams::Scatter { body_subgraph, .. }) => scatters.push((si, oi, scatter_body_of(subgraphs, *body_subgraph))),
                _ => {}
            }
        }
    }
    for (si, oi, b) in found {
        if let OpParams::Hlo(HloParams::StablehloReduceWindow { body, .. }) = &mut subgraphs[si].ops[oi].params {
            *body = b;
        }
    }
    for (si, oi, b) in scatters {
        if let OpParams::Hlo(HloParams::Scatter { body, .. }) = &mut subgraphs[si].ops[oi].params {
            *body = b;
        }
    }
}

/// A scatter's update computation: `None` for a body without ops returning its
/// second input (the update), else its single op as [`body_of`] names it.
fn scatter_body_of(subgraphs: &[crate::model::Subgraph], index: i32) -> std::result::Result<Option<BuiltinOp>, String> {
    let g = usize::try_from(index).ok().and_then(|i| subgraphs.get(i)).ok_or_else(|| format!("body subgraph {index} does not exist"))?;
    if g.ops.is_empty() {
        // LiteRT takes any body without ops as "replace"; one returning its first
        // input would keep the operand instead, which it would compute wrongly.
        return match (g.inputs.as_slice(), g.outputs.as_slice()) {
            ([_, update], [out]) if update == out => Ok(None),
            _ => Err(format!("body subgraph {index} has no op and does not return its second input (only the update itself is supported)")),
        };
    }
    body_of(subgraphs, index).map(Some)
}

fn body_of(subgraphs: &[crate::model::Subgraph], index: i32) -> std::result::Result<BuiltinOp, String> {
    let g = usize::try_from(index).ok().and_then(|i| subgraphs.get(i)).ok_or_else(|| format!("body subgraph {index} does not exist"))?;
    let [op] = g.ops.as_slice() else {
        return Err(format!("body subgraph {index} has {} ops; only a single-op body is supported (as in LiteRT)", g.ops.len()));
    };
    let OpCode::Builtin(code) = op.code else {
        return Err(format!("body subgraph {index} computes {}, not a builtin op", op.code.name()));
    };
    let ins: Vec<usize> = op.inputs.iter().flatten().copied().collect();
    if g.inputs.len() != 2 || ins != g.inputs || op.outputs != g.outputs {
        return Err(format!("body subgraph {index}: its {code} op does not map the body's two inputs to its output"));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;
    use ferrite_format::writer::{HloOptions, ModelSpec, OpCode, Options, TensorSpec, TensorType};

    fn one_op(op: BuiltinOp, inputs: usize, options: Options) -> Vec<u8> {
        let mut m = ModelSpec::default();
        let ins: Vec<i32> = (0..inputs).map(|i| m.add_tensor(TensorSpec::activation(&format!("x{i}"), TensorType::FLOAT32, &[2]))).collect();
        let out = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2]));
        m.add_op(OpCode::Builtin(op.operator()), &ins, &[out], options);
        m.inputs = ins;
        m.outputs = vec![out];
        m.to_bytes().expect("writes")
    }

    #[test]
    fn second_union_options_round_trip() {
        let pad = HloOptions::Pad { low: vec![1, -2], high: vec![0, 3], interior: vec![2, 0] };
        let want = HloParams::Pad { low: vec![1, -2], high: vec![0, 3], interior: vec![2, 0] };
        let model = Model::from_bytes(std::sync::Arc::new(one_op(BuiltinOp::STABLEHLO_PAD, 2, Options::Hlo(pad)))).expect("loads");
        assert_eq!(model.subgraphs[0].ops[0].params, OpParams::Hlo(want));
        let rw = HloOptions::ReduceWindow { function: 4 };
        let model = Model::from_bytes(std::sync::Arc::new(one_op(BuiltinOp::REDUCE_WINDOW, 5, Options::Hlo(rw)))).expect("loads");
        assert_eq!(model.subgraphs[0].ops[0].params, OpParams::Hlo(HloParams::ReduceWindow { function: 4 }));
        let mut m = ModelSpec::default();
        let state = m.add_tensor(TensorSpec::activation("state", TensorType::UINT64, &[2]));
        let (next, bits) =
            (m.add_tensor(TensorSpec::activation("next", TensorType::UINT64, &[2])), m.add_tensor(TensorSpec::activation("bits", TensorType::UINT32, &[5])));
        let rng = HloOptions::RngBitGenerator { algorithm: 2 };
        m.add_op(OpCode::Builtin(BuiltinOp::STABLEHLO_RNG_BIT_GENERATOR.operator()), &[state], &[next, bits], Options::Hlo(rng));
        (m.inputs, m.outputs) = (vec![state], vec![next, bits]);
        let model = Model::from_bytes(std::sync::Arc::new(m.to_bytes().expect("writes"))).expect("loads");
        assert_eq!(model.subgraphs[0].ops[0].params, OpParams::Hlo(HloParams::RngBitGenerator { algorithm: 2 }));
        // A table of the wrong member is not read as this op's.
        let wrong = HloOptions::ReduceWindow { function: 4 };
        let model = Model::from_bytes(std::sync::Arc::new(one_op(BuiltinOp::STABLEHLO_PAD, 2, Options::Hlo(wrong)))).expect("loads");
        assert_eq!(model.subgraphs[0].ops[0].params, OpParams::None);
    }

    /// Gather and scatter options round trip; a scatter body of no op returning its
    /// update is "replace", one returning the operand value is refused with why.
    #[test]
    fn gather_and_scatter_options_round_trip() {
        let gather = HloOptions::Gather {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 1,
            slice_sizes: vec![1, 2],
            indices_are_sorted: true,
        };
        let model = Model::from_bytes(std::sync::Arc::new(one_op(BuiltinOp::STABLEHLO_GATHER, 2, Options::Hlo(gather)))).expect("loads");
        let want =
            HloParams::Gather { offset_dims: vec![1], collapsed_slice_dims: vec![0], start_index_map: vec![0], index_vector_dim: 1, slice_sizes: vec![1, 2] };
        assert_eq!(model.subgraphs[0].ops[0].params, OpParams::Hlo(want));
        let scatter_body = |ops: &[BuiltinOp], returns_update: bool| {
            let mut m = ModelSpec::default();
            let ins: Vec<i32> = (0..3).map(|i| m.add_tensor(TensorSpec::activation(&format!("x{i}"), TensorType::FLOAT32, &[2]))).collect();
            let out = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2]));
            let options = HloOptions::Scatter {
                update_window_dims: vec![],
                inserted_window_dims: vec![0],
                scatter_dims_to_operand_dims: vec![0],
                index_vector_dim: 1,
                indices_are_sorted: false,
                unique_indices: true,
                update_computation_subgraph_index: 1,
            };
            m.add_op(OpCode::Builtin(BuiltinOp::STABLEHLO_SCATTER.operator()), &ins, &[out], Options::Hlo(options));
            (m.inputs, m.outputs) = (ins, vec![out]);
            let mut body = ModelSpec::default();
            let (a, b) = (
                body.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, &[])),
                body.add_tensor(TensorSpec::activation("b", TensorType::FLOAT32, &[])),
            );
            let mut last = if returns_update { b } else { a };
            for (k, &op) in ops.iter().enumerate() {
                let o = body.add_tensor(TensorSpec::activation(&format!("o{k}"), TensorType::FLOAT32, &[]));
                body.add_op(OpCode::Builtin(op.operator()), &[a, b], &[o], Options::None);
                last = o;
            }
            (body.inputs, body.outputs) = (vec![a, b], vec![last]);
            m.subgraphs.push(body);
            let model = Model::from_bytes(std::sync::Arc::new(m.to_bytes().expect("writes"))).expect("loads");
            match &model.subgraphs[0].ops[0].params {
                OpParams::Hlo(HloParams::Scatter { body, index_vector_dim: 1, inserted_window_dims, .. }) => {
                    assert_eq!(inserted_window_dims, &vec![0]);
                    body.clone()
                }
                p => panic!("parsed as {p:?}"),
            }
        };
        assert_eq!(scatter_body(&[], true), Ok(None));
        assert!(scatter_body(&[], false).is_err_and(|e| e.contains("second input")));
        assert_eq!(scatter_body(&[BuiltinOp::STABLEHLO_MINIMUM], true), Ok(Some(BuiltinOp::STABLEHLO_MINIMUM)));
        assert!(scatter_body(&[BuiltinOp::STABLEHLO_ADD, BuiltinOp::STABLEHLO_ADD], true).is_err_and(|e| e.contains("2 ops")));
    }

    /// A reduce-window body is named by its single op; other bodies keep the reason.
    #[test]
    fn reduce_window_bodies_are_resolved() {
        let body_model = |ops: &[BuiltinOp], index: i32| {
            let mut m = ModelSpec::default();
            let (x, init) =
                (m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[4])), m.add_tensor(TensorSpec::activation("i", TensorType::FLOAT32, &[])));
            let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[2]));
            let options = HloOptions::StablehloReduceWindow {
                window_dimensions: vec![2],
                window_strides: vec![2],
                base_dilations: vec![1],
                window_dilations: vec![1],
                padding: vec![0, 1],
                body_subgraph_index: index,
            };
            m.add_op(OpCode::Builtin(BuiltinOp::STABLEHLO_REDUCE_WINDOW.operator()), &[x, init], &[y], Options::Hlo(options));
            m.inputs = vec![x, init];
            m.outputs = vec![y];
            let mut body = ModelSpec::default();
            let (a, b) = (
                body.add_tensor(TensorSpec::activation("a", TensorType::FLOAT32, &[])),
                body.add_tensor(TensorSpec::activation("b", TensorType::FLOAT32, &[])),
            );
            let mut last = a;
            for (k, &op) in ops.iter().enumerate() {
                let o = body.add_tensor(TensorSpec::activation(&format!("o{k}"), TensorType::FLOAT32, &[]));
                body.add_op(OpCode::Builtin(op.operator()), &[last, b], &[o], Options::None);
                last = o;
            }
            body.inputs = vec![a, b];
            body.outputs = vec![last];
            m.subgraphs.push(body);
            let model = Model::from_bytes(std::sync::Arc::new(m.to_bytes().expect("writes"))).expect("loads");
            match &model.subgraphs[0].ops[0].params {
                OpParams::Hlo(HloParams::StablehloReduceWindow { body, padding, .. }) => {
                    assert_eq!(padding, &vec![0, 1]);
                    body.clone()
                }
                p => panic!("parsed as {p:?}"),
            }
        };
        assert_eq!(body_model(&[BuiltinOp::STABLEHLO_MAXIMUM], 1), Ok(BuiltinOp::STABLEHLO_MAXIMUM));
        assert!(body_model(&[BuiltinOp::ADD, BuiltinOp::ADD], 1).is_err_and(|e| e.contains("2 ops")));
        assert!(body_model(&[BuiltinOp::ADD], 7).is_err_and(|e| e.contains("does not exist")));
    }
}
