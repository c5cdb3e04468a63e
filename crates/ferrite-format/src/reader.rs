//! A lenient, bounds-checked view over flatbuffer bytes.
//!
//! The `flatbuffers` crate's verifier rejects real converter output (for example
//! int64 quantization arrays that are not 8-byte aligned), and its accessors are
//! only sound after verification. This reader instead checks every offset and
//! length at the moment it is followed and reads scalars with `from_le_bytes`, so
//! misaligned data is fine and hostile data produces a [`FormatError`] naming the
//! byte offset — never a panic or an out-of-bounds read.
//!
//! Field slots come from the generated bindings (`Tensor::VT_SHAPE`, ...), so the
//! schema stays the single source of the layout.

use crate::FormatError;

type Result<T> = std::result::Result<T, FormatError>;

fn err(what: impl Into<String>, offset: usize) -> FormatError {
    FormatError::Malformed { what: what.into(), offset }
}

/// Reads `N` bytes at `pos`, or fails naming what was being read.
fn bytes_at<const N: usize>(data: &[u8], pos: usize, what: &str) -> Result<[u8; N]> {
    let end = pos.checked_add(N).ok_or_else(|| err(format!("{what}: offset overflow"), pos))?;
    data.get(pos..end).and_then(|s| s.try_into().ok()).ok_or_else(|| err(format!("{what}: {N} bytes past the end of the file ({} bytes)", data.len()), pos))
}

fn u32_at(data: &[u8], pos: usize, what: &str) -> Result<u32> {
    Ok(u32::from_le_bytes(bytes_at::<4>(data, pos, what)?))
}

fn u16_at(data: &[u8], pos: usize, what: &str) -> Result<u16> {
    Ok(u16::from_le_bytes(bytes_at::<2>(data, pos, what)?))
}

/// Follows a forward `uoffset` stored at `pos`.
fn follow(data: &[u8], pos: usize, what: &str) -> Result<usize> {
    let off = u32_at(data, pos, what)? as usize;
    let target = pos.checked_add(off).ok_or_else(|| err(format!("{what}: offset overflow"), pos))?;
    if target >= data.len() {
        return Err(err(format!("{what}: offset points past the end of the file"), pos));
    }
    Ok(target)
}

/// A scalar type stored little-endian in a flatbuffer.
pub trait Scalar: Copy + 'static {
    /// Size in bytes.
    const SIZE: usize;
    /// Decodes from exactly `SIZE` little-endian bytes.
    fn from_le(bytes: &[u8]) -> Self;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
        }
    )*};
}
scalar!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

impl Scalar for bool {
    const SIZE: usize = 1;
    fn from_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// A table inside the buffer, with its vtable located and bounds-checked.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    data: &'a [u8],
    pos: usize,
    vtable: usize,
    vtable_len: usize,
}

impl<'a> Table<'a> {
    /// The root table of a flatbuffer.
    pub fn root(data: &'a [u8]) -> Result<Self> {
        let pos = follow(data, 0, "root table offset")?;
        Table::at(data, pos)
    }

    /// The table starting at byte `pos`.
    pub fn at(data: &'a [u8], pos: usize) -> Result<Self> {
        let soff = i32::from_le_bytes(bytes_at::<4>(data, pos, "table vtable offset")?);
        let vtable = (pos as i64) - i64::from(soff);
        if vtable < 0 || vtable as u64 >= data.len() as u64 {
            return Err(err("table's vtable lies outside the file", pos));
        }
        let vtable = vtable as usize;
        let vtable_len = u16_at(data, vtable, "vtable length")? as usize;
        if vtable_len < 4 || !vtable_len.is_multiple_of(2) || vtable + vtable_len > data.len() {
            return Err(err(format!("vtable length {vtable_len} is invalid"), vtable));
        }
        Ok(Table { data, pos, vtable, vtable_len })
    }

    /// Byte offset of the table in the file (for error messages).
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn field_pos(&self, slot: u16) -> Result<Option<usize>> {
        let slot = slot as usize;
        if slot + 2 > self.vtable_len {
            return Ok(None);
        }
        let voff = u16_at(self.data, self.vtable + slot, "vtable entry")? as usize;
        Ok(if voff == 0 { None } else { Some(self.pos + voff) })
    }

    /// A scalar field, or `default` when absent.
    pub fn scalar<T: Scalar>(&self, slot: u16, default: T) -> Result<T> {
        match self.field_pos(slot)? {
            None => Ok(default),
            Some(p) => {
                let end = p.checked_add(T::SIZE).ok_or_else(|| err("scalar field overflow", p))?;
                let b = self.data.get(p..end).ok_or_else(|| err("scalar field past the end of the file", p))?;
                Ok(T::from_le(b))
            }
        }
    }

    /// A sub-table field.
    pub fn table(&self, slot: u16) -> Result<Option<Table<'a>>> {
        match self.field_pos(slot)? {
            None => Ok(None),
            Some(p) => Ok(Some(Table::at(self.data, follow(self.data, p, "sub-table offset")?)?)),
        }
    }

    fn vector_raw(&self, slot: u16, elem_size: usize) -> Result<Option<(usize, usize)>> {
        match self.field_pos(slot)? {
            None => Ok(None),
            Some(p) => {
                let v = follow(self.data, p, "vector offset")?;
                let len = u32_at(self.data, v, "vector length")? as usize;
                let start = v + 4;
                let bytes = len.checked_mul(elem_size).ok_or_else(|| err("vector length overflow", v))?;
                let end = start.checked_add(bytes).ok_or_else(|| err("vector length overflow", v))?;
                if end > self.data.len() {
                    return Err(err(format!("vector of {len} elements runs past the end of the file"), v));
                }
                Ok(Some((start, len)))
            }
        }
    }

    /// A vector of scalars.
    pub fn vector<T: Scalar>(&self, slot: u16) -> Result<Option<Vector<'a, T>>> {
        Ok(self.vector_raw(slot, T::SIZE)?.map(|(start, len)| Vector {
            bytes: &self.data[start..start + len * T::SIZE],
            offset: start,
            _t: std::marker::PhantomData,
        }))
    }

    /// A vector of scalars collected into a `Vec` (empty when absent).
    pub fn vec_of<T: Scalar>(&self, slot: u16) -> Result<Vec<T>> {
        Ok(self.vector::<T>(slot)?.map(|v| v.iter().collect()).unwrap_or_default())
    }

    /// The raw bytes of a `[ubyte]` vector, zero-copy.
    pub fn bytes(&self, slot: u16) -> Result<Option<(usize, &'a [u8])>> {
        Ok(self.vector::<u8>(slot)?.map(|v| (v.offset, v.bytes)))
    }

    /// A vector of tables.
    pub fn tables(&self, slot: u16) -> Result<TableVector<'a>> {
        Ok(match self.vector_raw(slot, 4)? {
            None => TableVector { data: self.data, start: 0, len: 0 },
            Some((start, len)) => TableVector { data: self.data, start, len },
        })
    }

    /// A string field, decoded leniently (invalid UTF-8 is replaced).
    pub fn string(&self, slot: u16) -> Result<Option<String>> {
        Ok(self.vector::<u8>(slot)?.map(|v| String::from_utf8_lossy(v.bytes).into_owned()))
    }
}

/// A bounds-checked vector of little-endian scalars (alignment not required).
#[derive(Clone, Copy, Debug)]
pub struct Vector<'a, T> {
    bytes: &'a [u8],
    offset: usize,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T: Scalar> Vector<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / T::SIZE
    }
    /// True when the vector has no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// Where the first element lies in the file (bytes from its start).
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Element `i`, or `None` out of range.
    pub fn get(&self, i: usize) -> Option<T> {
        let s = i.checked_mul(T::SIZE)?;
        self.bytes.get(s..s + T::SIZE).map(T::from_le)
    }
    /// Iterates over the elements.
    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        self.bytes.chunks_exact(T::SIZE).map(T::from_le)
    }
}

/// A bounds-checked vector of tables.
#[derive(Clone, Copy, Debug)]
pub struct TableVector<'a> {
    data: &'a [u8],
    start: usize,
    len: usize,
}

impl<'a> TableVector<'a> {
    /// Number of tables.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Table `i`; out of range or malformed entries are errors.
    pub fn get(&self, i: usize) -> Result<Table<'a>> {
        if i >= self.len {
            return Err(err(format!("table index {i} out of range ({} entries)", self.len), self.start));
        }
        let p = self.start + 4 * i;
        Table::at(self.data, follow(self.data, p, "table vector entry")?)
    }
    /// Iterates over the tables, each read lazily and checked.
    pub fn iter(&self) -> impl Iterator<Item = Result<Table<'a>>> + '_ {
        (0..self.len).map(move |i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_root_is_an_error() {
        assert!(Table::root(&[1, 0]).is_err());
        assert!(Table::root(&[200, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn vtable_outside_buffer_is_an_error() {
        // root offset 4 -> table at 4 with soffset pointing far backwards
        let data = [4u8, 0, 0, 0, 0, 0, 0, 0x7f];
        assert!(Table::root(&data).is_err());
    }
}
