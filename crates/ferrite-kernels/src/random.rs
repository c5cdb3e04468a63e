//! Random number ops: RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL and
//! STABLEHLO_RNG_BIT_GENERATOR, reproducing LiteRT's streams value for value.
//!
//! The generators are the published counter-based ones (Salmon et al., "Parallel
//! random numbers: as easy as 1, 2, 3", SC 2011): Philox4x32 with 10 rounds and
//! Threefry2x32 with 20. What is LiteRT's own is how it seeds and consumes them:
//! - the stateful ops hold one Philox stream per op, keyed by the `seed` option
//!   (two 32-bit key words) with `seed2` in the counter's upper 64 bits; each call of
//!   the generator returns four words and steps the 128-bit counter by one, and the
//!   stream carries on from one invocation to the next;
//! - a uniform float takes the low 23 bits of a word as the mantissa of a number in
//!   [1, 2) and subtracts 1; a normal pair is Box–Muller on two such floats;
//! - MULTINOMIAL draws from a copy of the stream and moves the stream itself past a
//!   fixed budget per invocation, so the next invocation starts on fresh numbers.

/// Philox4x32 multipliers and Weyl key increments (the algorithm's constants).
const PHILOX_M0: u64 = 0xD251_1F53;
const PHILOX_M1: u64 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

/// One Philox4x32-10 block: four words from a 128-bit counter and a 64-bit key.
pub fn philox4x32_10(key: [u32; 2], ctr: [u32; 4]) -> [u32; 4] {
    let (mut k, mut c) = (key, ctr);
    for _ in 0..10 {
        let p0 = PHILOX_M0 * u64::from(c[0]);
        let p1 = PHILOX_M1 * u64::from(c[2]);
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
        k = [k[0].wrapping_add(PHILOX_W0), k[1].wrapping_add(PHILOX_W1)];
    }
    c
}

/// One Threefry2x32-20 block: two words from a 64-bit counter and a 64-bit key.
pub fn threefry2x32_20(key: [u32; 2], ctr: [u32; 2]) -> [u32; 2] {
    const ROT: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
    // The third key word is the parity of the other two with the algorithm's constant.
    let ks = [key[0], key[1], key[0] ^ key[1] ^ 0x1BD1_1BDA];
    let mut x = [ctr[0].wrapping_add(ks[0]), ctr[1].wrapping_add(ks[1])];
    // Five groups of four rounds, each group followed by a key injection.
    for g in 0..5usize {
        for &r in &ROT[g % 2] {
            x[0] = x[0].wrapping_add(x[1]);
            x[1] = x[1].rotate_left(r) ^ x[0];
        }
        x[0] = x[0].wrapping_add(ks[(g + 1) % 3]);
        x[1] = x[1].wrapping_add(ks[(g + 2) % 3]).wrapping_add(g as u32 + 1);
    }
    x
}

/// A Philox4x32-10 stream: a key and a 128-bit counter stepped once per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Philox {
    key: [u32; 2],
    counter: [u32; 4],
}

impl Philox {
    /// The stream of LiteRT's random ops for options `seed` and `seed2`: the key is
    /// `seed`, the counter starts at `seed2 << 64`.
    pub fn from_seeds(seed: i64, seed2: i64) -> Philox {
        let (s, s2) = (seed as u64, seed2 as u64);
        Philox { key: [s as u32, (s >> 32) as u32], counter: [0, 0, s2 as u32, (s2 >> 32) as u32] }
    }

    /// The next four words; the counter steps by one.
    pub fn next_block(&mut self) -> [u32; 4] {
        let out = philox4x32_10(self.key, self.counter);
        self.skip(1);
        out
    }

    /// The block `k` blocks ahead of the next one, without moving the stream.
    pub fn block_at(&self, k: u64) -> [u32; 4] {
        let mut at = *self;
        at.skip(k);
        philox4x32_10(at.key, at.counter)
    }

    /// Moves the counter `blocks` blocks ahead (128-bit addition).
    pub fn skip(&mut self, blocks: u64) {
        let c = &mut self.counter;
        let low = (u128::from(c[1]) << 32 | u128::from(c[0])) + u128::from(blocks);
        c[0] = low as u32;
        c[1] = (low >> 32) as u32;
        if low >> 64 != 0 {
            // Carry into the upper half (seed2's words), as the 128-bit counter does.
            let high = (u64::from(c[3]) << 32 | u64::from(c[2])).wrapping_add(1);
            c[2] = high as u32;
            c[3] = (high >> 32) as u32;
        }
    }
}

/// A float in [0, 1) from the low 23 bits of `x`: the mantissa of a number in
/// [1, 2), minus one.
pub fn uint32_to_float(x: u32) -> f32 {
    f32::from_bits(0x3F80_0000 | (x & 0x7F_FFFF)) - 1.0
}

/// A double in [0, 1) from 52 bits: the low 20 of `hi` above the 32 of `lo`.
pub fn uint64_to_double(hi: u32, lo: u32) -> f64 {
    f64::from_bits(0x3FF0_0000_0000_0000 | (u64::from(hi & 0xF_FFFF) << 32) | u64::from(lo)) - 1.0
}

/// Box–Muller on two words: two standard normal floats. The radius is computed in
/// float (`logf`, `sqrtf`), the angle `2π u` in double then rounded to float, and
/// its sine and cosine in float, as LiteRT's kernel does on Linux.
pub fn box_muller(x0: u32, x1: u32) -> (f32, f32) {
    // Keeps log() away from zero.
    let u1 = uint32_to_float(x0).max(1.0e-7);
    let angle = (2.0 * std::f64::consts::PI * f64::from(uint32_to_float(x1))) as f32;
    let radius = (-2.0f32 * u1.ln()).sqrt();
    (angle.sin() * radius, angle.cos() * radius)
}

/// RANDOM_UNIFORM: fills `out` with uniform floats in [0, 1), four per block; the
/// words of a block left over at the end are dropped.
pub fn uniform(rng: &mut Philox, out: &mut [f32]) {
    for chunk in out.chunks_mut(4) {
        let w = rng.next_block();
        chunk.iter_mut().zip(w).for_each(|(o, w)| *o = uint32_to_float(w));
    }
}

/// RANDOM_STANDARD_NORMAL: fills `out` with standard normal floats, four (two
/// Box–Muller pairs) per block.
pub fn standard_normal(rng: &mut Philox, out: &mut [f32]) {
    for chunk in out.chunks_mut(4) {
        let w = rng.next_block();
        let (a, b) = box_muller(w[0], w[1]);
        let (c, d) = box_muller(w[2], w[3]);
        chunk.iter_mut().zip([a, b, c, d]).for_each(|(o, v)| *o = v);
    }
}

/// Blocks MULTINOMIAL moves its stream ahead per invocation: a fixed budget of
/// `batch * round_up(samples, 4) * 2 * 256`, whatever it drew.
pub fn multinomial_skip(batch: usize, samples: usize) -> u64 {
    (batch as u64).wrapping_mul((samples as u64).div_ceil(4).wrapping_mul(4)).wrapping_mul(512)
}

/// MULTINOMIAL: `samples` class indices per row of `logits` (`batch` rows of
/// `classes`), written as i64 to `out` (`batch * samples`).
///
/// Each row's unnormalized distribution is `exp(logit - max)` over its finite logits
/// (non-finite ones take no mass), summed in double into a cumulative table; a
/// sample is the first class whose cumulative mass exceeds `u * total`, `u` a
/// 52-bit double from two words. Samples draw words in pairs from a copy of the
/// stream, two per block, the blocks running on across rows; the stream itself
/// moves ahead by [`multinomial_skip`].
pub fn multinomial(rng: &mut Philox, logits: &[f32], batch: usize, classes: usize, samples: usize, out: &mut [i64]) {
    let mut draw = *rng;
    rng.skip(multinomial_skip(batch, samples));
    let mut block = [0u32; 4];
    let mut used = 4;
    let mut cdf = vec![0f64; classes];
    for (row, o) in logits.chunks_exact(classes.max(1)).take(batch).zip(out.chunks_mut(samples.max(1))) {
        let max = row.iter().copied().filter(|v| v.is_finite()).fold(f32::MIN, f32::max);
        let mut total = 0f64;
        for (c, &l) in cdf.iter_mut().zip(row) {
            if l.is_finite() {
                total += (f64::from(l) - f64::from(max)).exp();
            }
            *c = total;
        }
        for s in o.iter_mut().take(samples) {
            if used == 4 {
                block = draw.next_block();
                used = 0;
            }
            let u = uint64_to_double(block[used], block[used + 1]);
            used += 2;
            let target = u * total;
            // The first entry greater than the target (upper bound).
            *s = cdf.partition_point(|&c| c <= target) as i64;
        }
    }
}

/// STABLEHLO_RNG_BIT_GENERATOR's algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RngAlgorithm {
    /// Philox4x32-10 (also what DEFAULT means in LiteRT).
    Philox,
    /// Threefry2x32-20.
    Threefry,
}

/// STABLEHLO_RNG_BIT_GENERATOR: fills `words` (the output's bytes as 32-bit words)
/// from `state` and writes the next state to `next` (same length as `state`).
///
/// The state's first u64 is the key. Threefry takes a u64[2] state, its second
/// u64 the 64-bit counter; Philox a u64[2] or u64[3], the second u64 the counter's
/// low half and the third (or, for u64[2], the key again) its high half. Each block
/// steps the counter's low 64 bits only; the next state holds the key and that
/// counter, the rest as it was. Err on a state of the wrong length.
pub fn rng_bit_generator(algorithm: RngAlgorithm, state: &[u64], next: &mut [u64], words: &mut [u32]) -> Result<(), String> {
    let split = |v: u64| [v as u32, (v >> 32) as u32];
    let key = split(state.first().copied().unwrap_or(0));
    let low = |i: usize| state.get(i).copied().unwrap_or(0);
    if next.len() != state.len() {
        return Err(format!("output state of {} values for a state of {}", next.len(), state.len()));
    }
    let mut counter = low(1);
    match algorithm {
        RngAlgorithm::Threefry => {
            if state.len() != 2 {
                return Err(format!("THREEFRY takes a u64[2] state, got u64[{}]", state.len()));
            }
            for chunk in words.chunks_mut(2) {
                let w = threefry2x32_20(key, split(counter));
                chunk.iter_mut().zip(w).for_each(|(o, w)| *o = w);
                counter = counter.wrapping_add(1);
            }
        }
        RngAlgorithm::Philox => {
            let high = match state.len() {
                2 => low(0),
                3 => low(2),
                n => return Err(format!("PHILOX takes a u64[2] or u64[3] state, got u64[{n}]")),
            };
            let [h0, h1] = split(high);
            for chunk in words.chunks_mut(4) {
                let [c0, c1] = split(counter);
                let w = philox4x32_10(key, [c0, c1, h0, h1]);
                chunk.iter_mut().zip(w).for_each(|(o, w)| *o = w);
                counter = counter.wrapping_add(1);
            }
        }
    }
    next.copy_from_slice(state);
    next[1] = counter;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors published with the Random123 reference implementation
    /// (zero key and counter, all ones, and the digits of pi).
    #[test]
    fn generators_match_the_published_known_answers() {
        assert_eq!(philox4x32_10([0, 0], [0, 0, 0, 0]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 2], [u32::MAX; 4]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32_10([0xa409_3822, 0x299f_31d0], [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
        assert_eq!(threefry2x32_20([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(threefry2x32_20([u32::MAX; 2], [u32::MAX; 2]), [0x1cb9_96fc, 0xbb00_2be7]);
        assert_eq!(threefry2x32_20([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]), [0xc492_3a9c, 0x483d_f7a0]);
    }

    #[test]
    fn the_counter_carries_across_words_and_skips_add() {
        let mut a = Philox { key: [1, 2], counter: [u32::MAX, u32::MAX, 7, 0] };
        a.skip(1);
        assert_eq!(a.counter, [0, 0, 8, 0]);
        let mut b = Philox::from_seeds(5, 9);
        let mut c = b;
        for _ in 0..1000 {
            b.next_block();
        }
        c.skip(1000);
        assert_eq!(b, c);
        assert_eq!(Philox::from_seeds(-1, 3).counter, [0, 0, 3, 0]);
        assert_eq!(Philox::from_seeds(-1, 3).key, [u32::MAX, u32::MAX]);
    }

    #[test]
    fn uniform_and_normal_consume_one_block_per_four_values() {
        let mut r = Philox::from_seeds(42, 7);
        let mut u = vec![0f32; 6];
        uniform(&mut r, &mut u);
        let mut again = Philox::from_seeds(42, 7);
        let (w0, w1) = (again.next_block(), again.next_block());
        let want: Vec<f32> = w0.iter().chain(&w1[..2]).map(|&w| uint32_to_float(w)).collect();
        assert_eq!(u, want);
        // The stream went on past the block's two unused words.
        assert_eq!(r, again);
        assert!(u.iter().all(|v| (0.0..1.0).contains(v)));

        let mut r = Philox::from_seeds(3, 0);
        let mut n = vec![0f32; 4000];
        standard_normal(&mut r, &mut n);
        let mean = n.iter().map(|&v| f64::from(v)).sum::<f64>() / 4000.0;
        let var = n.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / 4000.0;
        assert!(mean.abs() < 0.08 && (var - 1.0).abs() < 0.1, "mean {mean} variance {var}");
    }

    #[test]
    fn conversions_span_the_unit_interval() {
        assert_eq!(uint32_to_float(0), 0.0);
        assert_eq!(uint32_to_float(u32::MAX), 1.0 - f32::EPSILON);
        assert_eq!(uint64_to_double(0, 0), 0.0);
        assert_eq!(uint64_to_double(u32::MAX, u32::MAX), 1.0 - f64::EPSILON);
    }

    #[test]
    fn multinomial_samples_follow_the_cumulative_table() {
        // Naive version: the same draws, a linear search for the class.
        let logits = [0.0f32, 1.0, f32::NEG_INFINITY, 2.0, -1.0, 0.5, 0.25, f32::NAN];
        let (batch, classes, samples) = (2, 4, 7);
        let mut r = Philox::from_seeds(11, 12);
        let mut out = vec![0i64; batch * samples];
        multinomial(&mut r, &logits, batch, classes, samples, &mut out);
        let mut draw = Philox::from_seeds(11, 12);
        let words: Vec<u32> = (0..(batch * samples * 2).div_ceil(4)).flat_map(|_| draw.next_block()).collect();
        let mut pairs = words.chunks(2);
        for b in 0..batch {
            let row = &logits[b * classes..(b + 1) * classes];
            let max = row.iter().copied().filter(|v| v.is_finite()).fold(f32::MIN, f32::max);
            let mass: Vec<f64> = row.iter().map(|&l| if l.is_finite() { (f64::from(l) - f64::from(max)).exp() } else { 0.0 }).collect();
            let total: f64 = mass.iter().sum();
            for s in 0..samples {
                let p = pairs.next().unwrap();
                let target = uint64_to_double(p[0], p[1]) * total;
                let mut acc = 0.0;
                let class = mass.iter().position(|m| {
                    acc += m;
                    acc > target
                });
                assert_eq!(out[b * samples + s], class.unwrap_or(classes) as i64);
                assert!(row[out[b * samples + s] as usize].is_finite());
            }
        }
        let mut skipped = Philox::from_seeds(11, 12);
        skipped.skip(2 * 8 * 512);
        assert_eq!(r, skipped);
    }

    #[test]
    fn bit_generator_steps_the_low_counter_and_returns_the_state() {
        let state = [0x0123_4567_89ab_cdef_u64, u64::MAX, 99];
        let mut next = [0u64; 3];
        let mut words = vec![0u32; 10];
        rng_bit_generator(RngAlgorithm::Philox, &state, &mut next, &mut words).unwrap();
        let key = [0x89ab_cdef, 0x0123_4567];
        assert_eq!(words[..4], philox4x32_10(key, [u32::MAX, u32::MAX, 99, 0]));
        // The low 64 bits wrap without carrying into the high half.
        assert_eq!(words[4..8], philox4x32_10(key, [0, 0, 99, 0]));
        assert_eq!(words[8..], philox4x32_10(key, [1, 0, 99, 0])[..2]);
        assert_eq!(next, [state[0], 2, 99]);

        let mut next2 = [0u64; 2];
        let mut words = vec![0u32; 3];
        rng_bit_generator(RngAlgorithm::Threefry, &[7, 40], &mut next2, &mut words).unwrap();
        assert_eq!(words[..2], threefry2x32_20([7, 0], [40, 0]));
        assert_eq!(words[2], threefry2x32_20([7, 0], [41, 0])[0]);
        assert_eq!(next2, [7, 42]);
        assert!(rng_bit_generator(RngAlgorithm::Threefry, &state, &mut next, &mut words).is_err());
        assert!(rng_bit_generator(RngAlgorithm::Philox, &[1], &mut [0], &mut words).is_err());
    }
}
