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

pub fn write(dtype: DType, shape: &[usize], data: &[u8]) -> Result<Vec<u8>, String> {
    let d = descr(dtype).ok_or(format!("cannot write {} to .npy", dtype.name()))?;
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
}
