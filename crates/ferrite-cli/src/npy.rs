//! Minimal `.npy` reading and writing (little-endian, C order; versions 1-3).

use ferrite::DType;

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        _ => return None,
    })
}

/// An array read from a `.npy` file.
pub struct Array {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

pub fn read(bytes: &[u8]) -> Result<Array, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (bad magic)".into());
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes.get(start..start.saturating_add(hlen)).ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let i = header.find(&format!("'{key}'")).ok_or(format!("header lacks '{key}'"))?;
        Ok(header[i + key.len() + 2..].trim_start().trim_start_matches(':').trim_start())
    };
    let d = field("descr")?;
    let d = d.get(1..).and_then(|s| s.split('\'').next()).ok_or("bad descr")?;
    if let Some(width) = string_width(d) {
        return read_strings(bytes, start + hlen, width, field("fortran_order")?, field("shape")?);
    }
    let dtype = [DType::F32, DType::F16, DType::F64, DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32, DType::I64, DType::U64, DType::Bool]
        .into_iter()
        .find(|&t| descr(t).is_some_and(|x| x == d || x[1..] == d[1..] && (d.starts_with('<') || d.starts_with('|') || d.starts_with('='))))
        .ok_or(format!("unsupported dtype '{d}'"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err("Fortran-order arrays are not supported".into());
    }
    let s = field("shape")?;
    let s = &s[1..s.find(')').ok_or("bad shape")?];
    let shape: Vec<usize> =
        s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(|x| x.parse::<usize>().map_err(|_| format!("bad dim '{x}'"))).collect::<Result<_, _>>()?;
    let n: usize = shape.iter().product::<usize>() * dtype.size().unwrap_or(1);
    let data = bytes.get(start + hlen..start + hlen + n).ok_or(format!("data holds fewer than {n} bytes"))?.to_vec();
    Ok(Array { dtype, shape, data })
}

/// A string array's descr: bytes (`|S<n>`, n bytes an item) or unicode (`<U<n>`,
/// n UTF-32 code points): (item width in bytes, unicode).
fn string_width(d: &str) -> Option<(usize, bool)> {
    let (kind, n) = (d.get(1..2)?, d.get(2..)?.parse::<usize>().ok()?);
    match (kind, &d[..1]) {
        ("S", "|") => Some((n, false)),
        ("U", "<" | "|" | "=") => Some((n.checked_mul(4)?, true)),
        _ => None,
    }
}

fn parse_shape(s: &str) -> Result<Vec<usize>, String> {
    let s = &s[1..s.find(')').ok_or("bad shape")?];
    s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(|x| x.parse::<usize>().map_err(|_| format!("bad dim '{x}'"))).collect()
}

/// A string array as a STRING tensor (TFLite's string buffer). numpy pads items
/// with zeros to the width, so trailing NUL bytes (code points) are dropped, as
/// numpy itself drops them; unicode items are stored as UTF-8.
fn read_strings(bytes: &[u8], at: usize, (width, unicode): (usize, bool), fortran: &str, shape: &str) -> Result<Array, String> {
    if fortran.starts_with("True") {
        return Err("Fortran-order arrays are not supported".into());
    }
    let shape = parse_shape(shape)?;
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("shape overflows")?;
    let data = bytes.get(at..).unwrap_or(&[]);
    if n.checked_mul(width).is_none_or(|b| b > data.len()) {
        return Err(format!("data holds fewer than {n} items of {width} bytes"));
    }
    let mut items: Vec<Vec<u8>> = Vec::with_capacity(n);
    for k in 0..n {
        let raw = &data[k * width..(k + 1) * width];
        let item = if unicode {
            let mut cps: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            while cps.last() == Some(&0) {
                cps.pop();
            }
            cps.iter().map(|&c| char::from_u32(c).ok_or(format!("item {k}: invalid code point {c:#x}"))).collect::<Result<String, _>>()?.into_bytes()
        } else {
            let end = raw.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            raw[..end].to_vec()
        };
        items.push(item);
    }
    let data = ferrite_format::strings::write(&items).ok_or("strings exceed 2 GiB")?;
    Ok(Array { dtype: DType::String, shape, data })
}

pub fn write(dtype: DType, shape: &[usize], data: &[u8]) -> Result<Vec<u8>, String> {
    // A STRING tensor is written as a bytes array ('S', as wide as its longest item).
    let padded;
    let (data, d) = if dtype == DType::String {
        let items = ferrite_format::strings::parse(data).map_err(|e| e.to_string())?;
        let width = items.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let mut out = Vec::with_capacity(items.len() * width);
        for s in &items {
            out.extend_from_slice(s);
            out.resize(out.len() + width - s.len(), 0);
        }
        padded = (out, format!("|S{width}"));
        (&padded.0[..], padded.1.as_str())
    } else {
        (data, descr(dtype).ok_or(format!("cannot write {} to .npy", dtype.name()))?)
    };
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut h = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape_s}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn roundtrip() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let b = super::write(ferrite::DType::F32, &[1, 3], &data).unwrap();
        let a = super::read(&b).unwrap();
        assert_eq!(a.shape, vec![1, 3]);
        assert_eq!(a.data, data);
    }

    #[test]
    fn strings_roundtrip_and_unicode_reads_as_utf8() {
        let items = ["ab", "", "héllo"];
        let buf = ferrite_format::strings::write(&items).unwrap();
        let b = super::write(ferrite::DType::String, &[3], &buf).unwrap();
        let a = super::read(&b).unwrap();
        assert_eq!((a.dtype, a.shape.clone()), (ferrite::DType::String, vec![3]));
        assert_eq!(a.data, buf);
        // numpy's '<U2' array ["é", "ab"]: UTF-32LE code points, zero-padded.
        let mut u = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '<U2', 'fortran_order': False, 'shape': (2,), }";
        u.extend_from_slice(&(h.len() as u16).to_le_bytes());
        u.extend_from_slice(h.as_bytes());
        for c in [0xe9u32, 0, 0x61, 0x62] {
            u.extend_from_slice(&c.to_le_bytes());
        }
        let a = super::read(&u).unwrap();
        assert_eq!(ferrite_format::strings::parse(&a.data).unwrap(), ["é".as_bytes(), b"ab".as_slice()]);
        // Truncated data is an error.
        assert!(super::read(&u[..u.len() - 1]).is_err());
    }
}
