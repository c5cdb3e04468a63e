//! Kernels of TFLite's legacy text-model ops: LSH_PROJECTION (locality-sensitive
//! hashing with FarmHash's 64-bit fingerprint) and HASHTABLE_LOOKUP (a sorted-key
//! row lookup with a hit flag per key).
//!
//! LSH_PROJECTION's result is defined by the hash LiteRT calls,
//! `farmhash::Fingerprint64`, which is FarmHash's portable "na" 64-bit hash
//! (`farmhashna::Hash64`). [`fingerprint64`] implements that published algorithm
//! from its definition; its test checks it against values TensorFlow's
//! `tf.fingerprint(..., method="farmhash64")` produces for the same bytes.

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;

/// Little-endian 64-bit word at `at` (callers guarantee `at + 8 <= s.len()`).
fn fetch64(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Little-endian 32-bit word at `at`, widened.
fn fetch32(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// Mixes two words into one with multiplier `mul` (FarmHash's `HashLen16`).
fn mix16(u: u64, v: u64, mul: u64) -> u64 {
    let a = shift_mix((u ^ v).wrapping_mul(mul));
    let b = shift_mix((v ^ a).wrapping_mul(mul));
    b.wrapping_mul(mul)
}

fn len_0_to_16(s: &[u8]) -> u64 {
    let len = s.len();
    let n = len as u64;
    if len >= 8 {
        let mul = K2.wrapping_add(n.wrapping_mul(2));
        let a = fetch64(s, 0).wrapping_add(K2);
        let b = fetch64(s, len - 8);
        let c = b.rotate_right(37).wrapping_mul(mul).wrapping_add(a);
        let d = a.rotate_right(25).wrapping_add(b).wrapping_mul(mul);
        return mix16(c, d, mul);
    }
    if len >= 4 {
        let mul = K2.wrapping_add(n.wrapping_mul(2));
        let a = fetch32(s, 0);
        return mix16(n.wrapping_add(a << 3), fetch32(s, len - 4), mul);
    }
    if len > 0 {
        // The three bytes are combined in 32-bit arithmetic, then widened.
        let (a, b, c) = (u32::from(s[0]), u32::from(s[len >> 1]), u32::from(s[len - 1]));
        let y = a.wrapping_add(b << 8);
        let z = (len as u32).wrapping_add(c << 2);
        return shift_mix(u64::from(y).wrapping_mul(K2) ^ u64::from(z).wrapping_mul(K0)).wrapping_mul(K2);
    }
    K2
}

fn len_17_to_32(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add((len as u64).wrapping_mul(2));
    let a = fetch64(s, 0).wrapping_mul(K1);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(mul);
    let d = fetch64(s, len - 16).wrapping_mul(K2);
    mix16(
        a.wrapping_add(b).rotate_right(43).wrapping_add(c.rotate_right(30)).wrapping_add(d),
        a.wrapping_add(b.wrapping_add(K2).rotate_right(18)).wrapping_add(c),
        mul,
    )
}

fn len_33_to_64(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add((len as u64).wrapping_mul(2));
    let a = fetch64(s, 0).wrapping_mul(K2);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(mul);
    let d = fetch64(s, len - 16).wrapping_mul(K2);
    let y = a.wrapping_add(b).rotate_right(43).wrapping_add(c.rotate_right(30)).wrapping_add(d);
    let z = mix16(y, a.wrapping_add(b.wrapping_add(K2).rotate_right(18)).wrapping_add(c), mul);
    let e = fetch64(s, 16).wrapping_mul(mul);
    let f = fetch64(s, 24);
    let g = y.wrapping_add(fetch64(s, len - 32)).wrapping_mul(mul);
    let h = z.wrapping_add(fetch64(s, len - 24)).wrapping_mul(mul);
    mix16(
        e.wrapping_add(f).rotate_right(43).wrapping_add(g.rotate_right(30)).wrapping_add(h),
        e.wrapping_add(f.wrapping_add(a).rotate_right(18)).wrapping_add(g),
        mul,
    )
}

/// Two words from the 32 bytes at `at` and two seeds (FarmHash's
/// `WeakHashLen32WithSeeds`).
fn weak32(s: &[u8], at: usize, mut a: u64, b: u64) -> (u64, u64) {
    let (w, x, y, z) = (fetch64(s, at), fetch64(s, at + 8), fetch64(s, at + 16), fetch64(s, at + 24));
    a = a.wrapping_add(w);
    let mut b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
    let c = a;
    a = a.wrapping_add(x).wrapping_add(y);
    b = b.wrapping_add(a.rotate_right(44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

/// FarmHash's 64-bit fingerprint of `s` (`farmhash::Fingerprint64`, the portable
/// `farmhashna::Hash64`): stable across platforms and releases, which is why
/// LiteRT's LSH_PROJECTION is defined by it.
pub fn fingerprint64(s: &[u8]) -> u64 {
    let len = s.len();
    if len <= 16 {
        return len_0_to_16(s);
    }
    if len <= 32 {
        return len_17_to_32(s);
    }
    if len <= 64 {
        return len_33_to_64(s);
    }
    // Longer inputs: 64-byte blocks through a 56-byte state, then the last 64
    // bytes (overlapping the last block when the length is not a multiple of 64).
    const SEED: u64 = 81;
    let mut x = SEED;
    let mut y = SEED.wrapping_mul(K1).wrapping_add(113);
    let mut z = shift_mix(y.wrapping_mul(K2).wrapping_add(113)).wrapping_mul(K2);
    let (mut v, mut w) = ((0u64, 0u64), (0u64, 0u64));
    x = x.wrapping_mul(K2).wrapping_add(fetch64(s, 0));
    let end = ((len - 1) / 64) * 64;
    let last64 = end + ((len - 1) & 63) - 63;
    let mut p = 0;
    while p != end {
        x = x.wrapping_add(y).wrapping_add(v.0).wrapping_add(fetch64(s, p + 8)).rotate_right(37).wrapping_mul(K1);
        y = y.wrapping_add(v.1).wrapping_add(fetch64(s, p + 48)).rotate_right(42).wrapping_mul(K1);
        x ^= w.1;
        y = y.wrapping_add(v.0).wrapping_add(fetch64(s, p + 40));
        z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(K1);
        v = weak32(s, p, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
        w = weak32(s, p + 32, z.wrapping_add(w.1), y.wrapping_add(fetch64(s, p + 16)));
        std::mem::swap(&mut z, &mut x);
        p += 64;
    }
    let mul = K1.wrapping_add((z & 0xff) << 1);
    let p = last64;
    w.0 = w.0.wrapping_add(((len - 1) & 63) as u64);
    v.0 = v.0.wrapping_add(w.0);
    w.0 = w.0.wrapping_add(v.0);
    x = x.wrapping_add(y).wrapping_add(v.0).wrapping_add(fetch64(s, p + 8)).rotate_right(37).wrapping_mul(mul);
    y = y.wrapping_add(v.1).wrapping_add(fetch64(s, p + 48)).rotate_right(42).wrapping_mul(mul);
    x ^= w.1.wrapping_mul(9);
    y = y.wrapping_add(v.0.wrapping_mul(9)).wrapping_add(fetch64(s, p + 40));
    z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(mul);
    v = weak32(s, p, v.1.wrapping_mul(mul), x.wrapping_add(w.0));
    w = weak32(s, p + 32, z.wrapping_add(w.1), y.wrapping_add(fetch64(s, p + 16)));
    std::mem::swap(&mut z, &mut x);
    mix16(mix16(v.0, w.0, mul).wrapping_add(shift_mix(y).wrapping_mul(K0)).wrapping_add(z), mix16(v.1, w.1, mul).wrapping_add(x), mul)
}

/// The sign bit of one LSH_PROJECTION hash function with seed `seed` over the
/// rows of `input` (`row` bytes each): the sum over rows of the signed 64-bit
/// fingerprint of the seed's 4 bytes followed by the row's bytes, weighted by
/// `weight[i]` when given, is positive. Accumulated in f64 in row order, as
/// LiteRT does, so ties and rounding agree.
fn running_sign_bit(input: &[u8], rows: usize, row: usize, weight: Option<&[f32]>, seed: f32, key: &mut Vec<u8>) -> i32 {
    let mut score = 0.0f64;
    // Rows of zero bytes still count (the key is then the seed alone).
    for i in 0..rows {
        key.clear();
        key.extend_from_slice(&seed.to_le_bytes());
        key.extend_from_slice(&input[i * row..(i + 1) * row]);
        let value = fingerprint64(key) as i64 as f64;
        score += match weight {
            Some(w) => f64::from(w[i]) * value,
            None => value,
        };
    }
    i32::from(score > 0.0)
}

/// LSH_PROJECTION: `hash` holds `num_hash x num_bits` float seeds; `input` has
/// `rows` rows of `row` bytes (its first dimension), `weight` one float per row.
/// Sparse: one int32 per hash function, its `num_bits` sign bits (first bit
/// highest) plus `i << num_bits`, so each function owns its own range of ids.
/// Dense: every sign bit as 0 or 1. `out` holds `num_hash` (sparse) or
/// `num_hash * num_bits` (dense) values; `num_bits` is at most 32 (checked by
/// the caller, as is every length).
#[allow(clippy::too_many_arguments)]
pub fn lsh_projection(hash: &[f32], num_bits: usize, input: &[u8], rows: usize, row: usize, weight: Option<&[f32]>, sparse: bool, out: &mut [i32]) {
    let mut key = Vec::with_capacity(4 + row);
    if num_bits == 0 {
        // No bits: every sparse signature is 0 plus the function's offset.
        for (i, o) in out.iter_mut().enumerate() {
            *o = if sparse { i as i32 } else { 0 };
        }
        return;
    }
    for (i, seeds) in hash.chunks_exact(num_bits).enumerate() {
        if sparse {
            let mut signature: i32 = 0;
            for &seed in seeds {
                signature = (signature << 1) | running_sign_bit(input, rows, row, weight, seed, &mut key);
            }
            // `i << num_bits` in 32-bit arithmetic; for 32 bits the shift count
            // wraps to 0 as x86's shift (which LiteRT's `1 << 32` compiles to) does.
            out[i] = signature.wrapping_add((i as i32).wrapping_shl(num_bits as u32));
        } else {
            for (o, &seed) in out[i * num_bits..(i + 1) * num_bits].iter_mut().zip(seeds) {
                *o = running_sign_bit(input, rows, row, weight, seed, &mut key);
            }
        }
    }
}

/// HASHTABLE_LOOKUP: for each id of `lookup`, the row of `values` (`row` bytes)
/// at the position of that id in `keys` (sorted ascending), and hit 1; for an id
/// not among the keys a zero row and hit 0. Rows are bytes, so every element
/// type is served alike.
pub fn hashtable_lookup(lookup: &[i32], keys: &[i32], values: &[u8], row: usize, out: &mut [u8], hits: &mut [u8]) {
    for (i, (&id, hit)) in lookup.iter().zip(hits.iter_mut()).enumerate() {
        let o = &mut out[i * row..(i + 1) * row];
        match keys.binary_search(&id) {
            Ok(k) if (k + 1) * row <= values.len() => {
                o.copy_from_slice(&values[k * row..(k + 1) * row]);
                *hit = 1;
            }
            _ => {
                o.fill(0);
                *hit = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// Fingerprints of `(i * 37 + 11) mod 256` for `i < n`, computed by TensorFlow's
    /// `tf.fingerprint(..., method="farmhash64")` (FarmHash Fingerprint64 of each
    /// row's bytes): lengths on both sides of every branch of the algorithm.
    const TF_FINGERPRINTS: &[(usize, u64)] = &[
        (0, 0x9ae16a3b2f90404f),
        (1, 0x4271b80e2915c76a),
        (3, 0x373a2b2a12e0c581),
        (4, 0xcc1e778137ae6d69),
        (7, 0x960838fbc6d9c975),
        (8, 0x7d507025ed4eecfd),
        (15, 0x834f200cfa7ed95f),
        (16, 0xd836480326a974d6),
        (17, 0x5cded6cb65c9dac6),
        (31, 0x52a467e87c92d522),
        (32, 0xa03300e1b2be6da7),
        (33, 0x839154ca67815696),
        (63, 0x7cf64a4bd1b2b67e),
        (64, 0x000f03eac52d3535),
        (65, 0xfb360c5023f60db6),
        (100, 0x094bb5559bbb1375),
        (128, 0x33ef435f17af1739),
        (129, 0xc30a81b637d2e4dd),
        (200, 0x51320a19a60cbd6e),
    ];

    #[test]
    fn fingerprint64_matches_tensorflow() {
        for &(n, want) in TF_FINGERPRINTS {
            let s: Vec<u8> = (0..n).map(|i| ((i * 37 + 11) & 0xff) as u8).collect();
            assert_eq!(fingerprint64(&s), want, "length {n}");
        }
    }

    /// The sign bit written out from its definition, with a fresh key per row.
    fn naive_bit(input: &[u8], row: usize, weight: Option<&[f32]>, seed: f32) -> i32 {
        let rows = input.len() / row;
        let mut score = 0.0f64;
        for i in 0..rows {
            let mut key = seed.to_le_bytes().to_vec();
            key.extend_from_slice(&input[i * row..(i + 1) * row]);
            let h = fingerprint64(&key) as i64 as f64;
            score += weight.map_or(1.0, |w| f64::from(w[i])) * h;
        }
        (score > 0.0) as i32
    }

    #[test]
    fn lsh_projection_matches_its_definition() {
        let mut g = Rng::new(5);
        for case in 0..40 {
            let (num_hash, num_bits) = (1 + case % 4, 1 + (case * 7) % 12);
            let (rows, row) = (1 + case % 5, 4 * (1 + case % 3));
            let hash: Vec<f32> = (0..num_hash * num_bits).map(|_| (g.unit() * 6.0 - 3.0) as f32).collect();
            let input: Vec<u8> = (0..rows * row).map(|_| g.bits() as u8).collect();
            let weight: Vec<f32> = (0..rows).map(|_| (g.unit() * 2.0 - 1.0) as f32).collect();
            let w = (case % 2 == 0).then_some(&weight[..]);
            let mut sparse = vec![0; num_hash];
            lsh_projection(&hash, num_bits, &input, rows, row, w, true, &mut sparse);
            let mut dense = vec![0; num_hash * num_bits];
            lsh_projection(&hash, num_bits, &input, rows, row, w, false, &mut dense);
            for i in 0..num_hash {
                let mut sig = 0i64;
                for j in 0..num_bits {
                    let bit = naive_bit(&input, row, w, hash[i * num_bits + j]);
                    assert_eq!(dense[i * num_bits + j], bit);
                    sig = sig * 2 + i64::from(bit);
                }
                assert_eq!(i64::from(sparse[i]), sig + ((i as i64) << num_bits), "case {case}");
            }
        }
    }

    #[test]
    fn hashtable_lookup_finds_sorted_keys() {
        let keys = [-5, 0, 3, 9, 40];
        let values: Vec<u8> = (0..keys.len() * 3).map(|v| v as u8 + 1).collect();
        let lookup = [9, 1, -5, 40, 41, 3];
        let (mut out, mut hits) = (vec![7u8; lookup.len() * 3], vec![7u8; lookup.len()]);
        hashtable_lookup(&lookup, &keys, &values, 3, &mut out, &mut hits);
        for (i, id) in lookup.iter().enumerate() {
            match keys.iter().position(|k| k == id) {
                Some(k) => {
                    assert_eq!(hits[i], 1);
                    assert_eq!(out[i * 3..i * 3 + 3], values[k * 3..k * 3 + 3]);
                }
                None => {
                    assert_eq!(hits[i], 0);
                    assert_eq!(out[i * 3..i * 3 + 3], [0, 0, 0]);
                }
            }
        }
    }
}
