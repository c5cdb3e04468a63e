//! FlexBuffers maps of scalars: the custom options of LiteRT's built-in custom
//! ops (`TFLite_Detection_PostProcess`), of MediaPipe's custom ops and of ops the
//! converter emits from `tf.function`s with an `implements` attribute.
//!
//! Only what such options hold is read: a root map whose values are numbers,
//! booleans or null, and vectors of integers (MediaPipe's landmark index lists,
//! [`FlexMap::int_vector`]). Every offset is bounds-checked; custom options come
//! from untrusted model files. [`encode_map`] and [`encode_map_with_vectors`]
//! write the same subset (test models).

use crate::FormatError;

// Value types of the FlexBuffers format (the upper six bits of a packed type byte).
const NULL: u8 = 0;
const INT: u8 = 1;
const UINT: u8 = 2;
const FLOAT: u8 = 3;
const INDIRECT_INT: u8 = 6;
const INDIRECT_UINT: u8 = 7;
const INDIRECT_FLOAT: u8 = 8;
const MAP: u8 = 9;
const VECTOR: u8 = 10;
const VECTOR_INT: u8 = 11;
const VECTOR_UINT: u8 = 12;
const BOOL: u8 = 26;

/// A scalar value of a FlexBuffers map.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlexValue {
    /// A null (also what a missing key reads as).
    Null,
    /// A signed or unsigned integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl FlexValue {
    /// The value as an integer, converted as FlexBuffers' `AsInt64` converts
    /// (floats truncate, booleans are 0/1, null is 0).
    pub fn as_i64(self) -> i64 {
        match self {
            FlexValue::Null => 0,
            FlexValue::Int(i) => i,
            FlexValue::Float(f) => f as i64,
            FlexValue::Bool(b) => b as i64,
        }
    }
    /// The value as a float (null is 0).
    pub fn as_f64(self) -> f64 {
        match self {
            FlexValue::Null => 0.0,
            FlexValue::Int(i) => i as f64,
            FlexValue::Float(f) => f,
            FlexValue::Bool(b) => b as i64 as f64,
        }
    }
    /// The value as a boolean (non-zero numbers are true).
    pub fn as_bool(self) -> bool {
        match self {
            FlexValue::Null => false,
            FlexValue::Int(i) => i != 0,
            FlexValue::Float(f) => f != 0.0,
            FlexValue::Bool(b) => b,
        }
    }
    /// True for null (a key the map does not hold reads as null too).
    pub fn is_null(self) -> bool {
        self == FlexValue::Null
    }
}

fn bad(what: &str, offset: usize) -> FormatError {
    FormatError::Malformed { what: format!("flexbuffer: {what}"), offset }
}

/// Reads an unsigned little-endian integer of `width` bytes at `at`.
fn read_uint(b: &[u8], at: usize, width: usize) -> Result<u64, FormatError> {
    let s = at.checked_add(width).and_then(|end| b.get(at..end)).ok_or_else(|| bad("value past the end", at))?;
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(s);
    Ok(u64::from_le_bytes(v))
}

fn read_int(b: &[u8], at: usize, width: usize) -> Result<i64, FormatError> {
    let u = read_uint(b, at, width)?;
    // Sign-extend from `width` bytes.
    let shift = 64 - 8 * width as u32;
    Ok(((u << shift) as i64) >> shift)
}

fn read_float(b: &[u8], at: usize, width: usize) -> Result<f64, FormatError> {
    let u = read_uint(b, at, width)?;
    match width {
        4 => Ok(f32::from_bits(u as u32) as f64),
        8 => Ok(f64::from_bits(u)),
        _ => Err(bad("float of width other than 4 or 8", at)),
    }
}

fn check_width(w: usize, at: usize) -> Result<usize, FormatError> {
    match w {
        1 | 2 | 4 | 8 => Ok(w),
        _ => Err(bad("byte width not 1, 2, 4 or 8", at)),
    }
}

/// Follows the offset stored at `at` (width `width`) back to the value it points at.
fn indirect(b: &[u8], at: usize, width: usize) -> Result<usize, FormatError> {
    let off = read_uint(b, at, width)?;
    usize::try_from(off).ok().and_then(|o| at.checked_sub(o)).ok_or_else(|| bad("offset before the start", at))
}

/// The root map of FlexBuffers bytes, read lazily.
#[derive(Debug, Clone, Copy)]
pub struct FlexMap<'a> {
    bytes: &'a [u8],
    /// Position of the map's first value.
    at: usize,
    /// Byte width of the map's values.
    width: usize,
    len: usize,
    keys_at: usize,
    keys_width: usize,
}

impl<'a> FlexMap<'a> {
    /// Opens the root of `bytes`, which must be a map.
    pub fn root(bytes: &'a [u8]) -> Result<FlexMap<'a>, FormatError> {
        let n = bytes.len();
        if n < 3 {
            return Err(bad("shorter than a root", 0));
        }
        let root_width = check_width(bytes[n - 1] as usize, n - 1)?;
        let packed = bytes[n - 2];
        let root_at = (n - 2).checked_sub(root_width).ok_or_else(|| bad("root past the start", n - 2))?;
        if packed >> 2 != MAP {
            return Err(bad("root is not a map", n - 2));
        }
        let width = check_width(1 << (packed & 3), n - 2)?;
        let at = indirect(bytes, root_at, root_width)?;
        let len = usize::try_from(read_uint(bytes, at.checked_sub(width).ok_or_else(|| bad("map size before the start", at))?, width)?)
            .map_err(|_| bad("map size", at))?;
        let keys_ptr = at.checked_sub(3 * width).ok_or_else(|| bad("map keys before the start", at))?;
        let keys_at = indirect(bytes, keys_ptr, width)?;
        let keys_width = check_width(read_uint(bytes, keys_ptr + width, width)? as usize, keys_ptr + width)?;
        // The values and their type bytes must lie inside the buffer.
        let end = len.checked_mul(width + 1).and_then(|s| s.checked_add(at)).ok_or_else(|| bad("map size", at))?;
        let keys_end = len.checked_mul(keys_width).and_then(|s| s.checked_add(keys_at)).ok_or_else(|| bad("keys size", keys_at))?;
        if end > n || keys_end > n {
            return Err(bad("map past the end", at));
        }
        Ok(FlexMap { bytes, at, width, len, keys_at, keys_width })
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key of entry `i`.
    pub fn key(&self, i: usize) -> Result<&'a [u8], FormatError> {
        let start = indirect(self.bytes, self.keys_at + i * self.keys_width, self.keys_width)?;
        let rest = self.bytes.get(start..).ok_or_else(|| bad("key past the end", start))?;
        let len = rest.iter().position(|&c| c == 0).ok_or_else(|| bad("key without its terminating zero", start))?;
        Ok(&rest[..len])
    }

    /// The value of entry `i`.
    pub fn value(&self, i: usize) -> Result<FlexValue, FormatError> {
        let at = self.at + i * self.width;
        let packed = self.bytes[self.at + self.len * self.width + i];
        let (kind, child_width) = (packed >> 2, 1usize << (packed & 3));
        let w = self.width;
        Ok(match kind {
            NULL => FlexValue::Null,
            INT => FlexValue::Int(read_int(self.bytes, at, w)?),
            UINT => FlexValue::Int(read_uint(self.bytes, at, w)? as i64),
            FLOAT => FlexValue::Float(read_float(self.bytes, at, w)?),
            BOOL => FlexValue::Bool(read_uint(self.bytes, at, w)? != 0),
            INDIRECT_INT => FlexValue::Int(read_int(self.bytes, indirect(self.bytes, at, w)?, child_width)?),
            INDIRECT_UINT => FlexValue::Int(read_uint(self.bytes, indirect(self.bytes, at, w)?, child_width)? as i64),
            INDIRECT_FLOAT => FlexValue::Float(read_float(self.bytes, indirect(self.bytes, at, w)?, child_width)?),
            // Strings, vectors and nested maps are not options of the ops read here.
            _ => return Err(bad(&format!("value of type {kind} where a scalar was expected"), at)),
        })
    }

    /// The value under `key`, [`FlexValue::Null`] when the map has no such key.
    pub fn get(&self, key: &str) -> Result<FlexValue, FormatError> {
        match self.find(key)? {
            Some(i) => self.value(i),
            None => Ok(FlexValue::Null),
        }
    }

    fn find(&self, key: &str) -> Result<Option<usize>, FormatError> {
        for i in 0..self.len {
            if self.key(i)? == key.as_bytes() {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The vector of integers under `key`: a typed vector of signed or unsigned
    /// integers, or an untyped vector whose elements are all inline integers.
    /// `None` when the map has no such key; an error for any other value type.
    pub fn int_vector(&self, key: &str) -> Result<Option<Vec<i64>>, FormatError> {
        let Some(i) = self.find(key)? else { return Ok(None) };
        let at = self.at + i * self.width;
        let packed = self.bytes[self.at + self.len * self.width + i];
        let (kind, elem_width) = (packed >> 2, 1usize << (packed & 3));
        if !matches!(kind, VECTOR | VECTOR_INT | VECTOR_UINT) {
            return Err(bad(&format!("value of type {kind} where a vector of integers was expected"), at));
        }
        let start = indirect(self.bytes, at, self.width)?;
        let len_at = start.checked_sub(elem_width).ok_or_else(|| bad("vector size before the start", start))?;
        let len = usize::try_from(read_uint(self.bytes, len_at, elem_width)?).map_err(|_| bad("vector size", len_at))?;
        // The elements (and an untyped vector's type bytes after them) must lie
        // inside the buffer before anything is allocated for them.
        let types_at = len.checked_mul(elem_width).and_then(|s| s.checked_add(start)).ok_or_else(|| bad("vector size", start))?;
        let end = if kind == VECTOR { types_at.checked_add(len).ok_or_else(|| bad("vector size", start))? } else { types_at };
        if end > self.bytes.len() {
            return Err(bad("vector past the end", start));
        }
        (0..len)
            .map(|k| {
                let e = start + k * elem_width;
                let elem_kind = if kind == VECTOR {
                    self.bytes[types_at + k] >> 2
                } else if kind == VECTOR_INT {
                    INT
                } else {
                    UINT
                };
                match elem_kind {
                    INT => read_int(self.bytes, e, elem_width),
                    UINT => read_uint(self.bytes, e, elem_width).map(|u| u as i64),
                    t => Err(bad(&format!("vector element of type {t} where an integer was expected"), e)),
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// Encodes a map of scalars as FlexBuffers bytes (32-bit values and offsets;
/// keys sorted as the format requires).
pub fn encode_map(entries: &[(&str, FlexValue)]) -> Vec<u8> {
    encode_map_with_vectors(entries, &[])
}

/// A value of a map [`encode_map_with_vectors`] writes.
enum Entry {
    Scalar(FlexValue),
    /// A typed vector of 32-bit signed integers, written at this byte position.
    Ints(usize),
}

/// Encodes a map of scalars and typed vectors of 32-bit integers (as MediaPipe's
/// custom options hold them) as FlexBuffers bytes.
pub fn encode_map_with_vectors(entries: &[(&str, FlexValue)], vectors: &[(&str, &[i32])]) -> Vec<u8> {
    let put = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
    let mut out = Vec::new();
    // Vectors first: each is its length, then its elements.
    let mut all: Vec<(&str, Entry)> = entries.iter().map(|(k, v)| (*k, Entry::Scalar(*v))).collect();
    for (k, v) in vectors {
        put(&mut out, v.len() as u32);
        let at = out.len();
        v.iter().for_each(|&e| put(&mut out, e as u32));
        all.push((k, Entry::Ints(at)));
    }
    all.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let sorted = all;
    let mut key_at = Vec::with_capacity(sorted.len());
    for (k, _) in &sorted {
        key_at.push(out.len());
        out.extend_from_slice(k.as_bytes());
        out.push(0);
    }
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    // Keys vector: its length, then one offset per key back to the key's bytes.
    put(&mut out, sorted.len() as u32);
    let keys_vec = out.len();
    for &k in &key_at {
        let here = out.len();
        put(&mut out, (here - k) as u32);
    }
    // Map prefix: offset back to the keys vector, its byte width, the length.
    let here = out.len();
    put(&mut out, (here - keys_vec) as u32);
    put(&mut out, 4);
    put(&mut out, sorted.len() as u32);
    let map_at = out.len();
    let mut types = Vec::with_capacity(sorted.len());
    for (_, v) in &sorted {
        let (bits, kind) = match *v {
            Entry::Scalar(FlexValue::Null) => (0, NULL),
            Entry::Scalar(FlexValue::Int(i)) => (i as i32 as u32, INT),
            Entry::Scalar(FlexValue::Float(f)) => ((f as f32).to_bits(), FLOAT),
            Entry::Scalar(FlexValue::Bool(b)) => (b as u32, BOOL),
            Entry::Ints(at) => ((out.len() - at) as u32, VECTOR_INT),
        };
        put(&mut out, bits);
        types.push(kind << 2 | 2);
    }
    out.extend_from_slice(&types);
    // Root: offset back to the map, its packed type (map of 32-bit values), root width.
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    let here = out.len();
    put(&mut out, (here - map_at) as u32);
    out.push(MAP << 2 | 2);
    out.push(4);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let entries = [
            ("max_detections", FlexValue::Int(10)),
            ("nms_iou_threshold", FlexValue::Float(0.5)),
            ("use_regular_nms", FlexValue::Bool(true)),
            ("a", FlexValue::Int(-3)),
        ];
        let b = encode_map(&entries);
        let m = FlexMap::root(&b).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m.key(0).unwrap(), b"a");
        assert_eq!(m.get("max_detections").unwrap(), FlexValue::Int(10));
        assert_eq!(m.get("a").unwrap().as_i64(), -3);
        assert_eq!(m.get("nms_iou_threshold").unwrap().as_f64(), 0.5);
        assert!(m.get("use_regular_nms").unwrap().as_bool());
        assert!(m.get("missing").unwrap().is_null());
    }

    /// `{"b": true, "f": 2.5 (f64), "i": 300 (16-bit)}` laid out by hand from the
    /// format's definition with other widths than the encoder's: 1-byte key
    /// offsets, 8-byte map values, a 1-byte root.
    #[test]
    fn reads_other_widths() {
        let mut b = vec![b'b', 0, b'f', 0, b'i', 0];
        b.extend_from_slice(&[0, 0]); // pad to 8
                                      // keys vector of 1-byte offsets: len 3, then offsets to "b", "f", "i".
        b.push(3);
        let kv = b.len();
        for (j, k) in [0usize, 2, 4].iter().enumerate() {
            b.push((kv + j - k) as u8);
        }
        while !b.len().is_multiple_of(8) {
            b.push(0);
        }
        let prefix = b.len();
        b.extend_from_slice(&((prefix - kv) as u64).to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        let map = b.len();
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&2.5f64.to_bits().to_le_bytes());
        b.extend_from_slice(&300u64.to_le_bytes());
        b.extend_from_slice(&[BOOL << 2, FLOAT << 2 | 3, INT << 2 | 1]);
        let root = b.len();
        b.push((root - map) as u8);
        b.push(MAP << 2 | 3);
        b.push(1);
        let m = FlexMap::root(&b).unwrap();
        assert_eq!(m.get("b").unwrap(), FlexValue::Bool(true));
        assert_eq!(m.get("f").unwrap(), FlexValue::Float(2.5));
        assert_eq!(m.get("i").unwrap(), FlexValue::Int(300));
    }

    /// Bytes the `flatbuffers` Python package's FlexBuffers encoder wrote for
    /// `{"max_detections": 10, "nms_iou_threshold": 0.6, "use_regular_nms": False}`.
    #[test]
    fn reads_another_encoder() {
        let b: &[u8] = &[
            109, 97, 120, 95, 100, 101, 116, 101, 99, 116, 105, 111, 110, 115, 0, 110, 109, 115, 95, 105, 111, 117, 95, 116, 104, 114, 101, 115, 104, 111, 108,
            100, 0, 117, 115, 101, 95, 114, 101, 103, 117, 108, 97, 114, 95, 110, 109, 115, 0, 3, 50, 36, 19, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0,
            0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 51, 51, 51, 51, 51, 51, 227, 63, 0, 0, 0, 0, 0, 0, 0, 0, 7, 15, 107, 27, 39, 1,
        ];
        let m = FlexMap::root(b).unwrap();
        assert_eq!(m.get("max_detections").unwrap(), FlexValue::Int(10));
        assert_eq!(m.get("nms_iou_threshold").unwrap(), FlexValue::Float(0.6));
        assert_eq!(m.get("use_regular_nms").unwrap(), FlexValue::Bool(false));
    }

    /// Bytes the `flatbuffers` Python package's FlexBuffers encoder wrote for
    /// `{"idx": [61, 300, 7] (typed vector of 16-bit ints), "mixed": [1, -2, 70000]
    /// (untyped vector), "s": 1.5}`.
    #[test]
    fn reads_integer_vectors_of_another_encoder() {
        let b: &[u8] = &[
            105, 100, 120, 0, 3, 0, 61, 0, 44, 1, 7, 0, 109, 105, 120, 101, 100, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 254, 255, 255, 255, 112, 17, 1, 0, 6, 6, 6,
            115, 0, 3, 42, 31, 5, 0, 0, 0, 6, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0, 0, 0, 192, 63, 45, 42, 14, 15, 38, 1,
        ];
        let m = FlexMap::root(b).unwrap();
        assert_eq!(m.int_vector("idx").unwrap(), Some(vec![61, 300, 7]));
        assert_eq!(m.int_vector("mixed").unwrap(), Some(vec![1, -2, 70000]));
        assert_eq!(m.get("s").unwrap(), FlexValue::Float(1.5));
        assert_eq!(m.int_vector("missing").unwrap(), None);
        // A scalar is not a vector, and a vector is not a scalar.
        assert!(m.int_vector("s").is_err());
        assert!(m.get("idx").is_err());
    }

    #[test]
    fn vectors_round_trip() {
        let b = encode_map_with_vectors(&[("scale_x", FlexValue::Float(1.5)), ("left", FlexValue::Int(3))], &[("subset", &[4, -1, 70000]), ("empty", &[])]);
        let m = FlexMap::root(&b).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m.int_vector("subset").unwrap(), Some(vec![4, -1, 70000]));
        assert_eq!(m.int_vector("empty").unwrap(), Some(vec![]));
        assert_eq!(m.get("scale_x").unwrap(), FlexValue::Float(1.5));
        assert_eq!(m.get("left").unwrap(), FlexValue::Int(3));
    }

    /// Truncated or corrupted bytes are errors, never panics.
    #[test]
    fn corrupt_bytes_fail_cleanly() {
        let b = encode_map(&[("max_detections", FlexValue::Int(10)), ("x_scale", FlexValue::Float(10.0))]);
        for cut in 0..b.len() {
            let _ = FlexMap::root(&b[cut..]).and_then(|m| m.get("x_scale"));
            let _ = FlexMap::root(&b[..cut]).and_then(|m| m.get("x_scale"));
        }
        for i in 0..b.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut c = b.clone();
                c[i] = v;
                let _ = FlexMap::root(&c).and_then(|m| m.get("x_scale").and_then(|_| m.get("max_detections")));
            }
        }
        let b = encode_map_with_vectors(&[("x", FlexValue::Int(1))], &[("v", &[1, 2, 3])]);
        for cut in 0..b.len() {
            let _ = FlexMap::root(&b[cut..]).and_then(|m| m.int_vector("v"));
            let _ = FlexMap::root(&b[..cut]).and_then(|m| m.int_vector("v"));
        }
        for i in 0..b.len() {
            for v in [0u8, 1, 0x2b, 0x7f, 0xff] {
                let mut c = b.clone();
                c[i] = v;
                let _ = FlexMap::root(&c).and_then(|m| m.int_vector("v"));
            }
        }
    }
}
