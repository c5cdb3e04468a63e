//! The byte layout of TFLite's STRING tensors: a little-endian int32 count `n`,
//! then `n + 1` int32 offsets from the start of the buffer (string `i` spans
//! `offsets[i]..offsets[i + 1]`), then the string bytes. Strings are bytes; UTF-8
//! is what converters write but not something the format promises.
//!
//! A constant string tensor comes from an untrusted file, so [`parse`] checks
//! everything before it trusts it: the header fits the buffer before anything is
//! sized by the count, the offsets start at or after the header, never decrease
//! and end inside the buffer. It allocates one slice per string, bounded by the
//! buffer's own length.

/// Why a buffer is not a valid string tensor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StringBufferError {
    /// Shorter than the count, or than the count's offset table.
    #[error("string buffer of {len} bytes cannot hold the header of {count} strings")]
    Header {
        /// The count read (negative counts too).
        count: i64,
        /// The buffer's length.
        len: usize,
    },
    /// An offset before the header's end, after the buffer's end, or before the previous one.
    #[error("string {index}: offset {offset} is out of order or outside the buffer ({len} bytes)")]
    Offset {
        /// The offset's position in the table (0..=count).
        index: usize,
        /// Its value.
        offset: i64,
        /// The buffer's length.
        len: usize,
    },
}

fn read_i32(buf: &[u8], at: usize) -> Option<i64> {
    let b = buf.get(at..at + 4)?;
    Some(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

/// The strings of a STRING tensor's buffer, validated (see the module's notes).
pub fn parse(buf: &[u8]) -> Result<Vec<&[u8]>, StringBufferError> {
    let len = buf.len();
    let count = read_i32(buf, 0).ok_or(StringBufferError::Header { count: 0, len })?;
    // The header is 4 * (count + 2) bytes; a count it cannot hold is refused before
    // anything is allocated for it.
    let header = usize::try_from(count).ok().and_then(|n| n.checked_add(2)).and_then(|n| n.checked_mul(4)).filter(|&h| h <= len);
    let (Some(header), Ok(n)) = (header, usize::try_from(count)) else { return Err(StringBufferError::Header { count, len }) };
    let mut out = Vec::with_capacity(n);
    let mut prev = header as i64;
    for i in 0..=n {
        let offset = read_i32(buf, 4 + 4 * i).ok_or(StringBufferError::Header { count, len })?;
        if offset < prev || offset > len as i64 {
            return Err(StringBufferError::Offset { index: i, offset, len });
        }
        if i > 0 {
            out.push(&buf[prev as usize..offset as usize]);
        }
        prev = offset;
    }
    Ok(out)
}

/// The buffer of a STRING tensor holding `items` (what LiteRT's own writer
/// produces: the offsets start right after the header, no padding). `None` when
/// the total exceeds what int32 offsets can address.
pub fn write<S: AsRef<[u8]>>(items: &[S]) -> Option<Vec<u8>> {
    let header = items.len().checked_add(2)?.checked_mul(4)?;
    let total = items.iter().try_fold(header, |acc, s| acc.checked_add(s.as_ref().len()))?;
    i32::try_from(total).ok()?;
    let mut buf = Vec::with_capacity(total);
    buf.extend_from_slice(&(items.len() as i32).to_le_bytes());
    let mut offset = header;
    for s in items {
        buf.extend_from_slice(&(offset as i32).to_le_bytes());
        offset += s.as_ref().len();
    }
    buf.extend_from_slice(&(offset as i32).to_le_bytes());
    for s in items {
        buf.extend_from_slice(s.as_ref());
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_empty_utf8_and_duplicate_strings() {
        let items: Vec<&[u8]> = vec![b"", "héllo".as_bytes(), b"a", b"a", "日本".as_bytes(), b"", &[0xff, 0x00]];
        let buf = write(&items).unwrap();
        // The layout: count, offsets from the buffer's start, bytes.
        assert_eq!(&buf[..4], &7i32.to_le_bytes());
        assert_eq!(&buf[4..8], &36i32.to_le_bytes());
        assert_eq!(parse(&buf).unwrap(), items);
        assert_eq!(parse(&write::<&[u8]>(&[]).unwrap()).unwrap(), Vec::<&[u8]>::new());
    }

    #[test]
    fn hostile_buffers_are_refused_without_large_allocations() {
        let good = write(&[b"ab".as_slice(), b"cde"]).unwrap();
        assert!(parse(&[]).is_err());
        assert!(parse(&[1, 0]).is_err());
        // A huge or negative count in a small buffer.
        for count in [i32::MAX, -1, 1000] {
            let mut b = good.clone();
            b[..4].copy_from_slice(&count.to_le_bytes());
            assert!(matches!(parse(&b), Err(StringBufferError::Header { .. })), "count {count}");
        }
        // A count whose header fits but whose offsets then read string bytes.
        let mut b = good.clone();
        b[..4].copy_from_slice(&3i32.to_le_bytes());
        assert!(parse(&b).is_err());
        // Offsets: before the header, decreasing, past the end.
        for (at, v) in [(4, 8i32), (12, 17), (12, 100), (12, -1)] {
            let mut b = good.clone();
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            assert!(matches!(parse(&b), Err(StringBufferError::Offset { .. })), "offset at {at} = {v}");
        }
        // No truncation of a valid buffer panics.
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        assert_eq!(parse(&good).unwrap(), vec![b"ab".as_slice(), b"cde"]);
    }
}
