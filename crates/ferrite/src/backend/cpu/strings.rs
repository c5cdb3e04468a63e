//! Ops on run-time string tensors (TFLite STRING): SKIP_GRAM, and the hash
//! tables (HASHTABLE, HASHTABLE_IMPORT, HASHTABLE_FIND, HASHTABLE_SIZE) whose
//! keys or values are strings. A string
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
        B::HASHTABLE => hashtable(op, ctx),
        B::HASHTABLE_IMPORT => hashtable_import(op, ctx),
        B::HASHTABLE_FIND => hashtable_find(op, ctx),
        B::HASHTABLE_SIZE => hashtable_size(op, ctx),
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

/// The elements of a table's key or value tensor as byte slices: strings, or
/// int64s as their 8 bytes.
fn items(dtype: DType, bytes: &[u8]) -> Result<Vec<&[u8]>> {
    match dtype {
        DType::String => strings::parse(bytes).map_err(|e| runtime(format!("string tensor: {e}"))),
        DType::I64 if bytes.len().is_multiple_of(8) => Ok(bytes.chunks_exact(8).collect()),
        _ => Err(runtime(format!("{} tensor of {} bytes is not a table's keys or values", dtype.name(), bytes.len()))),
    }
}

/// The key and value types LiteRT's hash tables run (its kernels' pairs).
fn table_types(op: &OpContext<'_>) -> Result<(i32, DType, DType)> {
    let OpParams::Hashtable { table_id, key_dtype, value_dtype } = op.op.params else { return Err(op.bad("missing Hashtable options")) };
    let ty = |c: i8| crate::model::DType::from_code(c, crate::model::FileKind::Tflite);
    match (ty(key_dtype), ty(value_dtype)) {
        (Some(k @ DType::String), Some(v @ DType::I64)) | (Some(k @ DType::I64), Some(v @ DType::String)) => Ok((table_id, k, v)),
        (k, v) => Err(op.unsupported(format!(
            "hash table of {} -> {} (LiteRT runs string -> int64 and int64 -> string)",
            k.map_or("an unknown type", DType::name),
            v.map_or("an unknown type", DType::name)
        ))),
    }
}

/// HASHTABLE: declares the table in the session (an id already declared with
/// the same types is the same table) and outputs its handle, the table id.
fn hashtable(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let (id, key, value) = table_types(op)?;
    if op.outputs.first().is_some_and(|t| t.dtype != DType::Resource) {
        return Err(op.bad("the table handle must be a resource tensor"));
    }
    let mut tables = ctx.tables.lock().map_err(|_| runtime("hash tables lock poisoned"))?;
    if !tables.declare(id, key, value) {
        return Err(op.bad(format!("table {id} is declared elsewhere with other key or value types")));
    }
    Ok(Built {
        // LiteRT's handle is 1-D, one id (its HASHTABLE_FIND refuses others).
        outputs: vec![(DType::Resource, vec![1])],
        kernel: Box::new(move |_, outs| {
            let o = outs.first_mut().filter(|o| o.len() == 4).ok_or_else(|| runtime("HASHTABLE writes one 4-byte handle"))?;
            o.copy_from_slice(&id.to_le_bytes());
            Ok(())
        }),
    })
}

/// The table id in handle input 0, checked to be a resource tensor; in the
/// dynamic tail (where table ops run: they read or change state, so they are
/// never folded at prepare) its value is known.
fn handle(op: &OpContext<'_>, ctx: &BackendContext) -> Result<i32> {
    let d = op.input(0)?;
    if d.dtype != DType::Resource {
        return Err(op.bad(format!("input 0 must be a table handle (resource), got {}", d.dtype.name())));
    }
    if ctx.string_sizes.is_none() {
        return Err(Error::DataDependent(format!("{}: hash tables are used at run time", op.at()).into()));
    }
    let v = d.value.ok_or_else(|| op.unsupported("a table handle computed at run time"))?;
    v.get(..4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(|| op.bad("empty table handle"))
}

/// Checks input `i` has type `want` (the table's key or value type).
fn typed_as(op: &OpContext<'_>, i: usize, want: DType, what: &str) -> Result<()> {
    let got = op.input(i)?.dtype;
    if got != want {
        return Err(op.bad(format!("{what} of type {} for a table of {}", got.name(), want.name())));
    }
    Ok(())
}

/// HASHTABLE_IMPORT (handle, keys, values): fills the table when it runs.
fn hashtable_import(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let id = handle(op, ctx)?;
    let tables = ctx.tables.clone();
    let (key, value) = {
        let mut t = tables.lock().map_err(|_| runtime("hash tables lock poisoned"))?;
        let table = t.get_mut(id).ok_or_else(|| op.bad(format!("no hash table {id}")))?;
        (table.key, table.value)
    };
    typed_as(op, 1, key, "keys")?;
    typed_as(op, 2, value, "values")?;
    let n = |i: usize| op.input(i).map(|d| d.shape.iter().product::<usize>());
    if n(1)? != n(2)? {
        return Err(op.bad(format!("{} keys for {} values", n(1)?, n(2)?)));
    }
    Ok(Built {
        outputs: vec![],
        kernel: Box::new(move |ins, _| {
            let (keys, values) = (items(key, crate::backend::arg(ins, 1)?)?, items(value, crate::backend::arg(ins, 2)?)?);
            if keys.len() != values.len() {
                return Err(runtime(format!("HASHTABLE_IMPORT: {} keys for {} values", keys.len(), values.len())));
            }
            let mut t = tables.lock().map_err(|_| runtime("hash tables lock poisoned"))?;
            t.get_mut(id).ok_or_else(|| runtime(format!("no hash table {id}")))?.import(keys, values);
            Ok(())
        }),
    })
}

/// HASHTABLE_FIND (handle, keys, default): each key's value, or the default
/// (the default tensor's first element), shaped as the keys.
fn hashtable_find(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let id = handle(op, ctx)?;
    let out = {
        let mut t = ctx.tables.lock().map_err(|_| runtime("hash tables lock poisoned"))?;
        let table = t.get_mut(id).ok_or_else(|| op.bad(format!("no hash table {id}")))?;
        typed_as(op, 1, table.key, "keys")?;
        typed_as(op, 2, table.value, "the default value")?;
        if op.outputs.first().is_some_and(|o| o.dtype != table.value) {
            return Err(op.bad(format!("output of type {} for a table of {}", op.outputs[0].dtype.name(), table.value.name())));
        }
        let value_of = |i: usize| op.input(i).and_then(|d| d.value.ok_or_else(|| op.unsupported("inputs known only at run time")));
        let keys = items(table.key, value_of(1)?).map_err(|e| op.bad(e.to_string()))?;
        let default = items(table.value, value_of(2)?).map_err(|e| op.bad(e.to_string()))?;
        let default = *default.first().ok_or_else(|| op.bad("empty default value"))?;
        if keys.len() != op.input(1)?.shape.iter().product::<usize>() {
            return Err(op.bad("keys disagree with their shape"));
        }
        let found: Vec<&[u8]> = keys.iter().map(|k| table.find(k).unwrap_or(default)).collect();
        let bytes = match table.value {
            DType::String => {
                strings::write(&found).filter(|b| b.len() <= op.max_bytes).ok_or_else(|| op.bad("HASHTABLE_FIND output exceeds the memory limit"))?
            }
            _ => found.concat(),
        };
        (table.value, bytes)
    };
    computed(op, ctx, vec![(out.0, op.input(1)?.shape.clone(), out.1)])
}

/// HASHTABLE_SIZE (handle): the table's entry count, int64 of shape [1].
fn hashtable_size(op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
    let id = handle(op, ctx)?;
    let n = {
        let mut t = ctx.tables.lock().map_err(|_| runtime("hash tables lock poisoned"))?;
        t.get_mut(id).ok_or_else(|| op.bad(format!("no hash table {id}")))?.len()
    };
    computed(op, ctx, vec![(DType::I64, vec![1], (n as i64).to_le_bytes().to_vec())])
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

    /// HASHTABLE -> IMPORT (string keys from the input) -> FIND and SIZE: the
    /// first import fills the table, a duplicate key keeps its first value, a
    /// later run's import changes nothing, and a new session starts empty.
    #[test]
    fn hashtable_imports_once_and_finds() {
        let mut m = ModelSpec::default();
        let h = m.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[1]));
        m.add_op(WOp::Builtin(W::HASHTABLE), &[], &[h], Options::Hashtable { table_id: 3, key_dtype: TensorType::STRING, value_dtype: TensorType::INT64 });
        let keys = m.add_tensor(TensorSpec::activation("keys", TensorType::STRING, &[3]));
        let i64s = |v: &[i64]| Some(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        let values =
            m.add_tensor(TensorSpec { dtype: TensorType::INT64, data: i64s(&[10, 20, 30]), ..TensorSpec::activation("values", TensorType::INT64, &[3]) });
        let query = m.add_tensor(TensorSpec::activation("query", TensorType::STRING, &[3]));
        let default = m.add_tensor(TensorSpec { dtype: TensorType::INT64, data: i64s(&[-1]), ..TensorSpec::activation("default", TensorType::INT64, &[]) });
        let found = m.add_tensor(TensorSpec::activation("found", TensorType::INT64, &[3]));
        let size = m.add_tensor(TensorSpec::activation("size", TensorType::INT64, &[1]));
        m.add_op(WOp::Builtin(W::HASHTABLE_IMPORT), &[h, keys, values], &[], Options::None);
        m.add_op(WOp::Builtin(W::HASHTABLE_FIND), &[h, query, default], &[found], Options::None);
        m.add_op(WOp::Builtin(W::HASHTABLE_SIZE), &[h], &[size], Options::None);
        m.inputs = vec![keys, query];
        m.outputs = vec![found, size];
        let model = Arc::new(Model::from_bytes(Arc::new(m.to_bytes().unwrap())).unwrap());
        let i64_out = |s: &Session, k: usize| s.output(k).unwrap().bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
        for _ in 0..2 {
            let mut s = session(&model, "cpu");
            s.set_input_strings(0, &["a", "é", "a"]).unwrap();
            s.set_input_strings(1, &["a", "b", "é"]).unwrap();
            s.run().unwrap();
            assert_eq!(i64_out(&s, 0), [10, -1, 20]);
            assert_eq!(i64_out(&s, 1), [2]);
            s.set_input_strings(0, &["b", "c", "d"]).unwrap();
            s.run().unwrap();
            assert_eq!(i64_out(&s, 0), [10, -1, 20]);
            assert_eq!(i64_out(&s, 1), [2]);
        }
        // A handle of the wrong type, and a table of a pair LiteRT does not run.
        let mut bad = ModelSpec::default();
        let f = bad.add_tensor(TensorSpec::activation("f", TensorType::FLOAT32, &[]));
        let size = bad.add_tensor(TensorSpec::activation("size", TensorType::INT64, &[1]));
        bad.add_op(WOp::Builtin(W::HASHTABLE_SIZE), &[f], &[size], Options::None);
        bad.inputs = vec![f];
        bad.outputs = vec![size];
        let model = Arc::new(Model::from_bytes(Arc::new(bad.to_bytes().unwrap())).unwrap());
        let mut s = Session::with_options(model, SessionOptions::default()).unwrap();
        assert!(s.prepare().and_then(|_| s.run()).is_err());
        let mut pair = ModelSpec::default();
        let h = pair.add_tensor(TensorSpec::activation("h", TensorType::RESOURCE, &[]));
        pair.add_op(WOp::Builtin(W::HASHTABLE), &[], &[h], Options::Hashtable { table_id: 0, key_dtype: TensorType::FLOAT32, value_dtype: TensorType::INT64 });
        let size = pair.add_tensor(TensorSpec::activation("size", TensorType::INT64, &[1]));
        pair.add_op(WOp::Builtin(W::HASHTABLE_SIZE), &[h], &[size], Options::None);
        pair.outputs = vec![size];
        let model = Arc::new(Model::from_bytes(Arc::new(pair.to_bytes().unwrap())).unwrap());
        let mut s = Session::with_options(model, SessionOptions::default()).unwrap();
        assert!(s.prepare().unwrap_err().to_string().contains("string -> int64"));
    }
}
