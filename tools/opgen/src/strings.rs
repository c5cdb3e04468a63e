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
use ferrite_format::writer::{BuiltinOperator as B, ModelSpec, Options, TensorSpec};

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
    let n = if r.u(0, 3) == 0 { 2 } else { 1 };
    let x = m.add_tensor(TensorSpec::activation("sentence", TensorType::STRING, &[n as i32]));
    m.inputs.push(x);
    let items: Vec<String> = (0..n).map(|_| sentence(r)).collect();
    INPUTS.with(|i| *i.borrow_mut() = vec![(0, items)]);
    let o = out(&mut m, TensorType::STRING, &[1]);
    let options = Options::SkipGram { ngram_size: r.u(1, 4) as i32, max_skip_size: r.u(0, 3) as i32, include_all_ngrams: r.coin() };
    single(B::SKIP_GRAM, &[x], o, options, &mut m);
    Case { spec: m, ranges: vec![], fixed: vec![] }
}
