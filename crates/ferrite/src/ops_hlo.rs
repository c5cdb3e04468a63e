//! Parameters of the ops the StableHLO legalization emits, read from the format's
//! second options union (`builtin_options_2`): the first union is full, so these
//! tables live apart from the ones `ops::parse_params` reads.

use ferrite_format::ops::BuiltinOp;
use ferrite_format::schema as fb;
use ferrite_format::Table;

use crate::error::{invalid, Result};

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
        _ => HloParams::ReduceWindow { function: t.scalar::<i32>(fb::ReduceWindowOptions::VT_REDUCE_FUNCTION, 0)? },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;
    use crate::ops::OpParams;
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
        // A table of the wrong member is not read as this op's.
        let wrong = HloOptions::ReduceWindow { function: 4 };
        let model = Model::from_bytes(std::sync::Arc::new(one_op(BuiltinOp::STABLEHLO_PAD, 2, Options::Hlo(wrong)))).expect("loads");
        assert_eq!(model.subgraphs[0].ops[0].params, OpParams::None);
    }
}
