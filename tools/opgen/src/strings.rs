//! Generated cases of the ops on run-time string tensors: SKIP_GRAM on a
//! sentence given as a string input (words from a small vocabulary with
//! repeats and UTF-8, runs of spaces and tabs, leading and trailing spaces,
//! empty sentences; several strings now and then, of which LiteRT reads the
//! first), with random n-gram sizes, skips and `include_all_ngrams`.
//!
//! String inputs are not numbers, so they do not fit `Case::fixed`: a case's
//! strings are left here by `gen` and taken by the manifest writer
//! (`take_inputs`), which lists them under "strings" (input index -> strings).

use std::cell::RefCell;

use crate::{out, single, Case, Rng};
use ferrite_format::schema::TensorType;
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, OpCode, Options, TensorSpec};

/// The case names this module generates.
pub(crate) const OPS: &[&str] = &["SKIP_GRAM"];

thread_local! {
    /// The string inputs of the case `gen` made last.
    static INPUTS: RefCell<Vec<(usize, Vec<String>)>> = const { RefCell::new(Vec::new()) };
}

/// The string inputs of the case generated last (empty for other ops), as the
/// manifest's "strings" map.
pub(crate) fn take_inputs() -> serde_json::Map<String, serde_json::Value> {
    INPUTS.with(|i| i.borrow_mut().drain(..).map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect())
}

const VOCAB: &[&str] = &["the", "cat", "sat", "on", "a", "mat", "é", "naïve", "日本", "x", "x"];

/// A random sentence: words and separators, sometimes empty or space-led.
fn sentence(r: &mut Rng) -> String {
    if r.u(0, 9) == 0 {
        return String::new();
    }
    let mut s = String::new();
    if r.u(0, 4) == 0 {
        s.push(' ');
    }
    for i in 0..r.u(1, 8) {
        if i > 0 {
            s.push_str(r.pick(&[" ", " ", " ", "  ", "\t", " \n "]));
        }
        s.push_str(r.pick(VOCAB));
    }
    if r.u(0, 4) == 0 {
        s.push(' ');
    }
    s
}

pub(crate) fn gen(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let n: usize = if r.u(0, 3) == 0 { 2 } else { 1 };
    let x = m.add_tensor(TensorSpec::activation("sentence", TensorType::STRING, &[n as i32]));
    m.inputs.push(x);
    let items: Vec<String> = (0..n).map(|_| sentence(r)).collect();
    INPUTS.with(|i| *i.borrow_mut() = vec![(0, items)]);
    let o = out(&mut m, TensorType::STRING, &[1]);
    let options = Options::SkipGram { ngram_size: r.u(1, 4) as i32, max_skip_size: r.u(0, 3) as i32, include_all_ngrams: r.coin() };
    single(B::SKIP_GRAM, &[x], o, options, &mut m);
    Case { spec: m, ranges: vec![], fixed: vec![] }
}

/// The hash-table cases: one subgraph with HASHTABLE -> HASHTABLE_IMPORT ->
/// HASHTABLE_FIND and HASHTABLE_SIZE (the ops mean nothing alone), run as a
/// stream of invocations of one interpreter: the string input is reshuffled
/// every step, so whether a later import changes the table shows.
pub(crate) const TABLE_OPS: &[&str] = &["HASHTABLE_FIND_STRING_INT64", "HASHTABLE_FIND_INT64_STRING"];

/// Invocations per hash-table case.
pub(crate) const TABLE_STEPS: usize = 3;

/// Distinct-ish words (repeats give duplicate keys), UTF-8 and the empty string.
fn word(r: &mut Rng) -> String {
    r.pick(&["", "a", "cat", "x", "é", "日本語", "naïve", "A", "cat ", "zz"]).to_string()
}

pub(crate) fn gen_table(op: &str, r: &mut Rng) -> Case {
    let mut m = ModelSpec { description: format!("ferrite single-op test: {op}"), ..Default::default() };
    let string_keys = op == "HASHTABLE_FIND_STRING_INT64";
    let (n, q) = (r.u(1, 7), r.u(1, 6));
    let (kt, vt) = if string_keys { (TensorType::STRING, TensorType::INT64) } else { (TensorType::INT64, TensorType::STRING) };
    let h = m.add_tensor(TensorSpec::activation("table", TensorType::RESOURCE, &[1]));
    let table_id = r.u(0, 3) as i32;
    m.add_op(OpCode::Builtin(B::HASHTABLE), &[], &[h], Options::Hashtable { table_id, key_dtype: kt, value_dtype: vt });
    let int64 = |name: &str, shape: &[i32], v: &[i64]| TensorSpec {
        dtype: TensorType::INT64,
        data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..TensorSpec::const_i32(name, shape, &vec![0; v.len()])
    };
    let mut fixed = vec![];
    let (keys, values, query, default);
    if string_keys {
        // Keys: a string input (reshuffled each step); values and default constant.
        keys = m.add_tensor(TensorSpec::activation("keys", TensorType::STRING, &[n as i32]));
        let words: Vec<String> = (0..n).map(|_| word(r)).collect();
        values = m.add_tensor(int64("values", &[n as i32], &(0..n).map(|_| r.int(-1000, 1000)).collect::<Vec<_>>()));
        query = m.add_tensor(TensorSpec::activation("query", TensorType::STRING, &[q as i32]));
        let asked: Vec<String> = (0..q).map(|_| if r.coin() { words[r.u(0, n - 1)].clone() } else { word(r) }).collect();
        default = m.add_tensor(int64("default", &[], &[r.int(-5, 5)]));
        m.inputs = vec![keys, query];
        INPUTS.with(|i| *i.borrow_mut() = vec![(0, words), (1, asked)]);
    } else {
        // Keys: int64 constants with repeats; values a string input (reshuffled
        // each step); the query fixed int64s that hit and miss.
        let ks: Vec<i64> = (0..n).map(|_| r.int(-4, 4)).collect();
        keys = m.add_tensor(int64("keys", &[n as i32], &ks));
        values = m.add_tensor(TensorSpec::activation("values", TensorType::STRING, &[n as i32]));
        query = m.add_tensor(TensorSpec::activation("query", TensorType::INT64, &[q as i32]));
        fixed.push((1, (0..q).map(|_| r.int(-6, 6) as i32).collect()));
        default = m.add_tensor(TensorSpec::const_strings("default", &[], &[word(r)]).expect("a short string"));
        m.inputs = vec![values, query];
        INPUTS.with(|i| *i.borrow_mut() = vec![(0, (0..n).map(|_| word(r)).collect())]);
    }
    m.add_op(OpCode::Builtin(B::HASHTABLE_IMPORT), &[h, keys, values], &[], Options::None);
    let found = out(&mut m, vt, &[q as i32]);
    m.add_op(OpCode::Builtin(B::HASHTABLE_FIND), &[h, query, default], &[found], Options::None);
    let size = out(&mut m, TensorType::INT64, &[1]);
    m.add_op(OpCode::Builtin(B::HASHTABLE_SIZE), &[h], &[size], Options::None);
    Case { spec: m, ranges: vec![], fixed }
}
