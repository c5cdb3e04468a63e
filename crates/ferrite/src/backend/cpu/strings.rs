//! Ops on run-time string tensors (TFLite STRING): SKIP_GRAM. A string
//! tensor's bytes are TFLite's string buffer (count, offsets, bytes), and its
//! size is its data's, so these ops run only in the dynamic tail: their
//! builders see the input values there, compute the result, report each STRING
//! output's byte size through `BackendContext::string_sizes`, and return a kernel
//! that writes the computed buffer. At prepare (`string_sizes` is `None`) they
//! answer `Error::DataDependent`. Reached from the text family's dispatch.

use ferrite_format::ops::BuiltinOp as B;
use ferrite_format::strings;

use super::runtime;
use crate::backend::{BackendContext, Built, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;
use crate::ops::OpParams;

/// The string family's builders.
pub(super) fn build(code: B, op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    Some(match code {
        B::SKIP_GRAM => skip_gram(op, ctx, ferrite_kernels::strings::skip_grams),
        _ => return None,
    })
}

/// The strings of input `i`, a STRING tensor whose value is known (always so in
/// the dynamic tail). Run-time buffers were checked when set and constants at
/// load; parsed again here, so a bad buffer is an error, never a panic.
pub(crate) fn input_strings<'a>(op: &OpContext<'a>, i: usize) -> Result<Vec<&'a [u8]>> {
    let d = op.input(i)?;
    if d.dtype != DType::String {
        return Err(op.bad(format!("input {i} must be a string tensor, got {}", d.dtype.name())));
    }
    let v = d.value.ok_or_else(|| Error::DataDependent(format!("{}: string input {i} is known only at run time", op.at()).into()))?;
    let items = strings::parse(v).map_err(|e| op.bad(format!("input {i}: {e}")))?;
    if items.len() != d.shape.iter().product::<usize>() {
        return Err(op.bad(format!("input {i} holds {} strings for shape {:?}", items.len(), d.shape)));
    }
    Ok(items)
}

/// A built op whose outputs are computed now: each output's (dtype, shape, bytes);
/// STRING outputs' sizes go to the tail through `ctx.string_sizes`.
pub(crate) fn computed(op: &OpContext<'_>, ctx: &mut BackendContext, outs: Vec<(DType, Vec<usize>, Vec<u8>)>) -> Result<Built> {
    let sizes = ctx.string_sizes.as_mut().ok_or_else(|| Error::DataDependent(format!("{}: string outputs are sized at run time", op.at()).into()))?;
    for (dtype, _, bytes) in &outs {
        if *dtype == DType::String {
            sizes.push(bytes.len());
        }
    }
    let outputs = outs.iter().map(|(d, s, _)| (*d, s.clone())).collect();
    let data: Vec<Vec<u8>> = outs.into_iter().map(|(_, _, b)| b).collect();
    Ok(Built {
        outputs,
        kernel: Box::new(move |_, o| {
            if o.len() != data.len() {
                return Err(runtime("string op: output count differs from its build"));
            }
            for (dst, src) in o.iter_mut().zip(&data) {
                if dst.len() != src.len() {
                    return Err(runtime(format!("string op: output of {} bytes, {} computed", dst.len(), src.len())));
                }
                dst.copy_from_slice(src);
            }
            Ok(())
        }),
    })
}

/// The n-gram generator a backend brings: (words, n, max skip, all sizes, byte
/// cap) -> n-grams, `None` past the cap.
pub(crate) type Grams = fn(&[&[u8]], usize, i64, bool, usize) -> Option<Vec<Vec<u8>>>;

/// SKIP_GRAM: the n-grams of the words of the input's first string (LiteRT reads
/// only that one), as a 1-D string tensor. Checked before `ctx` is asked, so a
/// bad op is refused at prepare.
pub(crate) fn skip_gram(op: &OpContext<'_>, ctx: &mut BackendContext, grams: Grams) -> Result<Built> {
    let OpParams::SkipGram { ngram_size, max_skip_size, include_all_ngrams } = op.op.params else {
        return Err(op.bad("missing SkipGram options"));
    };
    let d = op.input(0)?;
    if d.dtype != DType::String || op.outputs.first().is_some_and(|t| t.dtype != DType::String) {
        return Err(op.bad("SKIP_GRAM reads and writes string tensors"));
    }
    // LiteRT sizes a stack by the n-gram size and indexes it at 1: below 1 is undefined there.
    let n = usize::try_from(ngram_size).ok().filter(|&n| n >= 1).ok_or_else(|| op.bad(format!("ngram_size {ngram_size} (at least 1)")))?;
    if ctx.string_sizes.is_none() {
        return Err(Error::DataDependent(format!("{}: string output", op.at()).into()));
    }
    let items = input_strings(op, 0)?;
    // An input without strings has no sentence: no n-grams.
    let sentence = items.first().copied().unwrap_or(&[]);
    let words = ferrite_kernels::strings::skip_gram_words(sentence);
    // The n-gram count grows like words * (skip + 1)^(n - 1): bounded by the
    // session's memory limit while it is produced.
    let too_big = || Error::ResourceLimit(format!("{}: SKIP_GRAM output exceeds the session's memory limit of {} bytes", op.at(), op.max_bytes).into());
    let out = grams(&words, n, i64::from(max_skip_size), include_all_ngrams, op.max_bytes).ok_or_else(too_big)?;
    let buf = strings::write(&out).filter(|b| b.len() <= op.max_bytes).ok_or_else(too_big)?;
    computed(op, ctx, vec![(DType::String, vec![out.len()], buf)])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrite_format::writer::{BuiltinOperator as W, ModelSpec, OpCode as WOp, Options, TensorSpec, TensorType};

    use crate::model::Model;
    use crate::{Session, SessionOptions};

    fn skip_gram_model(constant: Option<&str>, n: i32, skip: i32, all: bool) -> Arc<Model> {
        let mut m = ModelSpec::default();
        let x = match constant {
            Some(s) => m.add_tensor(TensorSpec::const_strings("x", &[1], &[s]).unwrap()),
            None => m.add_tensor(TensorSpec::activation("x", TensorType::STRING, &[1])),
        };
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::STRING, &[-1]));
        m.add_op(WOp::Builtin(W::SKIP_GRAM), &[x], &[y], Options::SkipGram { ngram_size: n, max_skip_size: skip, include_all_ngrams: all });
        if constant.is_none() {
            m.inputs = vec![x];
        }
        m.outputs = vec![y];
        Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap())
    }

    fn session(model: &Arc<Model>, backend: &str) -> Session {
        let options = SessionOptions { backends: vec![backend.to_string(), "cpu".into()], ..Default::default() };
        let mut s = Session::with_options(model.clone(), options).unwrap();
        s.prepare().unwrap();
        s
    }

    fn strings(s: &Session) -> Vec<String> {
        s.output(0).unwrap().strings().unwrap().iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    /// A string input through SKIP_GRAM to a string output, on both backends and
    /// over several runs of one session (sizes change from run to run).
    #[test]
    fn skip_gram_runs_on_run_time_strings() {
        let model = skip_gram_model(None, 2, 1, false);
        for backend in ["cpu", "reference"] {
            let mut s = session(&model, backend);
            assert!(s.has_dynamic_shapes());
            s.set_input_strings(0, &["a b c d"]).unwrap();
            s.run().unwrap();
            assert_eq!(strings(&s), ["a b", "a c", "b c", "b d", "c d"], "{backend}");
            assert_eq!(s.output(0).unwrap().shape, [5]);
            s.set_input_strings(0, &["héllo wörld"]).unwrap();
            s.run().unwrap();
            assert_eq!(strings(&s), ["héllo wörld"], "{backend}");
            s.set_input_strings(0, &[""]).unwrap();
            s.run().unwrap();
            assert!(strings(&s).is_empty());
            assert_eq!(s.output(0).unwrap().shape, [0]);
        }
    }

    #[test]
    fn skip_gram_of_a_constant_string() {
        let model = skip_gram_model(Some("x y z"), 3, 0, true);
        let mut s = session(&model, "cpu");
        s.run().unwrap();
        assert_eq!(strings(&s), ["x y z", "x y", "x", "y z", "y", "z"]);
    }

    /// Hostile string inputs are errors: a bad buffer, a count that disagrees with
    /// the shape, a huge count; and a zero n-gram size is refused at prepare.
    #[test]
    fn bad_strings_and_options_are_refused() {
        let model = skip_gram_model(None, 2, 1, false);
        let mut s = session(&model, "cpu");
        assert!(s.set_input(0, &[1, 0, 0]).is_err());
        assert!(s.set_input(0, &i32::MAX.to_le_bytes()).is_err());
        assert!(s.set_input_strings(0, &["a", "b"]).is_err());
        let mut bad = ferrite_format::strings::write(&["a b"]).unwrap();
        bad[4] = 200;
        assert!(s.set_input(0, &bad).is_err());
        // No input set: the run says so.
        assert!(s.run().is_err());
        let zero = skip_gram_model(None, 0, 1, false);
        let mut s = Session::with_options(zero, SessionOptions::default()).unwrap();
        s.prepare().unwrap();
        s.set_input_strings(0, &["a b"]).unwrap();
        assert!(s.run().unwrap_err().to_string().contains("ngram_size"));
    }
}
