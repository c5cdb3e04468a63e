//! Ops on run-time string tensors, written from their definitions: SKIP_GRAM's
//! n-grams as every increasing tuple of word positions whose gaps are at most
//! `max_skip` words, by plain recursion. The checks, the word split (LiteRT's
//! tokenization) and the run-time sizing are shared with the CPU builder.

use ferrite_format::ops::BuiltinOp as B;

use crate::backend::{BackendContext, Built, OpContext};
use crate::error::Result;
use crate::model::OpCode;

/// The string ops' reference builders; `None` for other ops.
pub(crate) fn build(op: &OpContext<'_>, ctx: &mut BackendContext) -> Option<Result<Built>> {
    match op.op.code {
        // The recursion is as deep as the n-gram is long: longer ones go to the CPU's loop.
        OpCode::Builtin(B::SKIP_GRAM) if matches!(op.op.params, crate::ops::OpParams::SkipGram { ngram_size, .. } if ngram_size > 256) => {
            Some(Err(op.unsupported("SKIP_GRAM of more than 256 words (the reference recursion's depth)")))
        }
        OpCode::Builtin(B::SKIP_GRAM) => Some(crate::backend::cpu::strings::skip_gram(op, ctx, skip_grams)),
        _ => None,
    }
}

/// Every n-gram starting at each word in turn; below a prefix, its extensions
/// by the next word after each allowed gap, and the prefix itself after them
/// (LiteRT's order). `None` once the bytes (plus 4 per n-gram) pass `cap`.
fn skip_grams(words: &[&[u8]], n: usize, max_skip: i64, all: bool, cap: usize) -> Option<Vec<Vec<u8>>> {
    struct Walk<'a, 'w> {
        words: &'a [&'w [u8]],
        n: usize,
        max_skip: i64,
        all: bool,
        cap: usize,
        used: usize,
        out: Vec<Vec<u8>>,
    }
    impl Walk<'_, '_> {
        fn visit(&mut self, prefix: &mut Vec<usize>) -> Option<()> {
            if prefix.len() < self.n {
                let last = prefix[prefix.len() - 1];
                for next in last + 1..self.words.len() {
                    let skipped = (next - last - 1) as i64;
                    // Too few words left for an n-gram (and no shorter ones wanted).
                    if skipped > self.max_skip || (!self.all && prefix.len() + self.words.len() - next < self.n) {
                        break;
                    }
                    prefix.push(next);
                    self.visit(prefix)?;
                    prefix.pop();
                }
            }
            if prefix.len() == self.n || self.all {
                let gram: Vec<&[u8]> = prefix.iter().map(|&i| self.words[i]).collect();
                let joined = gram.join(&b' ');
                self.used += joined.len() + 4;
                if self.used > self.cap {
                    return None;
                }
                self.out.push(joined);
            }
            Some(())
        }
    }
    if words.len() < n {
        return Some(Vec::new());
    }
    let mut w = Walk { words, n, max_skip, all, cap, used: 0, out: Vec::new() };
    for first in 0..words.len() {
        w.visit(&mut vec![first])?;
    }
    Some(w.out)
}
