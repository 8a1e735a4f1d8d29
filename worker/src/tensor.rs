//! Tensors as they travel in KServe v2: a name, a datatype, a shape and little-endian raw bytes
//! (BYTES elements as 4-byte length-prefixed strings), the same layout for gRPC's
//! `raw_input_contents` and HTTP's binary tensor extension.

use bytes::Bytes;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Int32,
    Uint64,
    Fp32,
    Bytes,
}

impl DataType {
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Int32 => "INT32",
            DataType::Uint64 => "UINT64",
            DataType::Fp32 => "FP32",
            DataType::Bytes => "BYTES",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "INT32" => DataType::Int32,
            "UINT64" => DataType::Uint64,
            "FP32" => DataType::Fp32,
            "BYTES" => DataType::Bytes,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

impl Tensor {
    pub fn from_i32(name: &str, shape: Vec<i64>, values: &[i32]) -> Self {
        let mut data = Vec::with_capacity(values.len() * 4);
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        Self {
            name: name.into(),
            datatype: DataType::Int32,
            shape,
            data: data.into(),
        }
    }

    pub fn from_f32(name: &str, shape: Vec<i64>, values: &[f32]) -> Self {
        let mut data = Vec::with_capacity(values.len() * 4);
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        Self {
            name: name.into(),
            datatype: DataType::Fp32,
            shape,
            data: data.into(),
        }
    }

    pub fn to_i32(&self) -> Result<Vec<i32>, String> {
        if self.datatype != DataType::Int32 || !self.data.len().is_multiple_of(4) {
            return Err(format!(
                "output {} is {} with {} bytes, expected INT32",
                self.name,
                self.datatype.as_str(),
                self.data.len()
            ));
        }
        Ok(self
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// BYTES elements (4-byte little-endian length, then the bytes), lossily as UTF-8.
    pub fn to_strings(&self) -> Result<Vec<String>, String> {
        if self.datatype != DataType::Bytes {
            return Err(format!(
                "output {} is {}, expected BYTES",
                self.name,
                self.datatype.as_str()
            ));
        }
        let mut out = Vec::new();
        let mut rest = &self.data[..];
        while !rest.is_empty() {
            if rest.len() < 4 {
                return Err(format!("output {}: truncated BYTES length", self.name));
            }
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            rest = &rest[4..];
            if rest.len() < len {
                return Err(format!("output {}: truncated BYTES element", self.name));
            }
            out.push(String::from_utf8_lossy(&rest[..len]).into_owned());
            rest = &rest[len..];
        }
        Ok(out)
    }

    /// Encodes strings in the BYTES raw layout (used when HTTP JSON returns BYTES as strings).
    pub fn from_strings(name: &str, shape: Vec<i64>, values: &[String]) -> Self {
        let mut data = Vec::new();
        for v in values {
            data.extend_from_slice(&(v.len() as u32).to_le_bytes());
            data.extend_from_slice(v.as_bytes());
        }
        Self {
            name: name.into(),
            datatype: DataType::Bytes,
            shape,
            data: data.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int32_and_bytes_round_trip() {
        let t = Tensor::from_i32("X", vec![3], &[1, -2, 1 << 20]);
        assert_eq!(t.to_i32().unwrap(), vec![1, -2, 1 << 20]);
        let s = Tensor::from_strings("L", vec![2], &["0.9:3:red".into(), "x".into()]);
        assert_eq!(s.to_strings().unwrap(), vec!["0.9:3:red", "x"]);
        let truncated = Tensor {
            data: s.data.slice(..6),
            ..s
        };
        assert!(truncated.to_strings().is_err());
    }
}
