//! Kernels on string tensors' contents (strings as byte slices; the tensor
//! layout is ferrite-format's business): SKIP_GRAM's word split and n-grams.

/// Whether `b` separates words: C's `isspace` in the "C" locale (bytes of
/// UTF-8 multi-byte characters are never spaces).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The words of `s` as LiteRT's SKIP_GRAM splits a sentence. Its scan starts
/// at the second byte and takes a word ending at a space only when the word's
/// first byte is not a space, so a sentence that starts with a space loses its
/// first word (" a b" gives ["b"]); runs of spaces separate like one.
pub fn skip_gram_words(s: &[u8]) -> Vec<&[u8]> {
    let mut words = Vec::new();
    let mut start = 0;
    for i in 1..s.len() {
        if is_space(s[i]) {
            if i > start && !is_space(s[start]) {
                words.push(&s[start..i]);
            }
            start = i + 1;
        }
    }
    if s.len() > start {
        words.push(&s[start..]);
    }
    words
}

/// SKIP_GRAM's n-grams of `words`, each joined with single spaces, in LiteRT's
/// order: depth first from each first word, a prefix emitted after all its
/// extensions. The next word of an n-gram is at most `max_skip` words after the
/// previous one; n-grams have `n` words (or 1..=n with `all`). Fewer than `n`
/// words give none, even with `all`. `n` must be at least 1. Their number grows
/// like `words * (max_skip + 1)^(n - 1)`, so the output is bounded: `None` once
/// the n-grams' bytes plus 4 per n-gram (a string tensor's offset) pass `max_bytes`.
pub fn skip_grams(words: &[&[u8]], n: usize, max_skip: i64, all: bool, max_bytes: usize) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    if n == 0 || words.len() < n {
        return Some(out);
    }
    let mut total = 0usize;
    // `prefix` holds word indices; each level remembers the next candidate.
    let mut prefix: Vec<usize> = Vec::with_capacity(n);
    let mut next: Vec<usize> = Vec::with_capacity(n);
    for first in 0..words.len() {
        prefix.push(first);
        next.push(first + 1);
        while let Some(&last) = prefix.last() {
            let cand = *next.last().unwrap_or(&words.len());
            // Without `all`, a prefix too long for the words left emits nothing:
            // not walked, so the work stays bounded by the output's size.
            let completes = all || prefix.len() + (words.len() - cand.min(words.len())) >= n;
            let fits = prefix.len() < n && cand < words.len() && (cand - last - 1) as i64 <= max_skip && completes;
            if fits {
                if let Some(c) = next.last_mut() {
                    *c += 1;
                }
                prefix.push(cand);
                next.push(cand + 1);
                continue;
            }
            if prefix.len() == n || (all && prefix.len() <= n) {
                let g = join(words, &prefix);
                total = total.saturating_add(g.len() + 4);
                if total > max_bytes {
                    return None;
                }
                out.push(g);
            }
            prefix.pop();
            next.pop();
        }
    }
    Some(out)
}

fn join(words: &[&[u8]], idx: &[usize]) -> Vec<u8> {
    let mut s = Vec::new();
    for (k, &i) in idx.iter().enumerate() {
        if k > 0 {
            s.push(b' ');
        }
        s.extend_from_slice(words[i]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grams(s: &str, n: usize, skip: i64, all: bool) -> Vec<String> {
        skip_grams(&skip_gram_words(s.as_bytes()), n, skip, all, 1 << 20).unwrap().into_iter().map(|g| String::from_utf8(g).unwrap()).collect()
    }

    /// The n-grams by brute force: every increasing index tuple of the allowed
    /// sizes with gaps of at most `skip`, ordered as LiteRT emits them (a
    /// prefix after its extensions: reverse lexicographic on "is a prefix").
    fn naive(words: &[&str], n: usize, skip: i64, all: bool) -> Vec<String> {
        fn rec(words: &[&str], n: usize, skip: i64, all: bool, cur: &mut Vec<usize>, out: &mut Vec<String>) {
            if cur.len() < n {
                let last = *cur.last().unwrap();
                for j in last + 1..words.len() {
                    if (j - last - 1) as i64 > skip {
                        break;
                    }
                    cur.push(j);
                    rec(words, n, skip, all, cur, out);
                    cur.pop();
                }
            }
            if cur.len() == n || all {
                out.push(cur.iter().map(|&i| words[i]).collect::<Vec<_>>().join(" "));
            }
        }
        let mut out = Vec::new();
        if words.len() < n {
            return out;
        }
        for f in 0..words.len() {
            rec(words, n, skip, all, &mut vec![f], &mut out);
        }
        out
    }

    #[test]
    fn words_split_as_litert_does() {
        let w = |s: &str| skip_gram_words(s.as_bytes()).into_iter().map(|w| std::str::from_utf8(w).unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(w("a b  c"), ["a", "b", "c"]);
        assert_eq!(w(" a b"), ["b"]);
        assert_eq!(w("a b "), ["a", "b"]);
        assert_eq!(w(""), Vec::<String>::new());
        assert_eq!(w(" "), [" "]);
        assert_eq!(w("héllo\twörld"), ["héllo", "wörld"]);
    }

    #[test]
    fn bigrams_with_one_skip() {
        assert_eq!(grams("a b c d", 2, 1, false), ["a b", "a c", "b c", "b d", "c d"]);
        assert_eq!(grams("a b c", 2, 0, true), ["a b", "a", "b c", "b", "c"]);
        assert!(grams("a b", 3, 5, true).is_empty());
    }

    #[test]
    fn output_is_bounded() {
        let words = vec![&b"w"[..]; 200];
        // 200 * 200^9 n-grams: refused after about a kilobyte, not enumerated.
        assert!(skip_grams(&words, 10, 1000, true, 1000).is_none());
        // Long n-grams near the end are not walked: 1000 words, n = 900, no skips.
        let many = vec![&b"w"[..]; 1000];
        assert_eq!(skip_grams(&many, 900, 0, false, 1 << 24).map(|g| g.len()), Some(101));
        // Three 1-grams of 1 + 4 bytes each: 15 bytes fit, 14 do not.
        assert_eq!(skip_grams(&words[..3], 1, 0, false, 15).map(|g| g.len()), Some(3));
        assert!(skip_grams(&words[..3], 1, 0, false, 14).is_none());
    }

    #[test]
    fn matches_brute_force() {
        let vocab = ["x", "yy", "z", "w", "é"];
        let mut seed = 7u64;
        for _ in 0..300 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = (seed >> 33) as usize % 7;
            let words: Vec<&str> = (0..len).map(|i| vocab[((seed >> (3 + i)) as usize) % vocab.len()]).collect();
            let n = 1 + (seed >> 20) as usize % 4;
            let skip = (seed >> 24) as i64 % 4 - 1;
            let all = seed >> 40 & 1 == 1;
            let got = skip_grams(&words.iter().map(|w| w.as_bytes()).collect::<Vec<_>>(), n, skip, all, 1 << 20).unwrap();
            let got: Vec<String> = got.into_iter().map(|g| String::from_utf8(g).unwrap()).collect();
            assert_eq!(got, naive(&words, n, skip, all), "{words:?} n={n} skip={skip} all={all}");
        }
    }
}
