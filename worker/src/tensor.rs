//! Tensors as they travel in KServe v2: a name, a datatype, a shape and little-endian raw bytes
//! (BYTES elements as 4-byte length-prefixed strings), the same layout for gRPC's
//! `raw_input_contents` and HTTP's binary tensor extension.

use bytes::Bytes;

/// Declares Triton's datatypes once: the wire name, the model config's name and the element size
/// (None for BYTES, whose elements are length-prefixed).
macro_rules! datatypes {
    ($($variant:ident => $wire:literal, $config:literal, $size:expr;)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DataType {
            $($variant,)+
        }

        impl DataType {
            pub const ALL: [DataType; [$($wire),+].len()] = [$(DataType::$variant,)+];

            /// The name on the wire (`INT32`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(DataType::$variant => $wire,)+
                }
            }

            /// The wire name (`INT32`), case-sensitive as the protocol is.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some(DataType::$variant),)+
                    _ => None,
                }
            }

            /// The model config's name (`TYPE_INT32`; BYTES is `TYPE_STRING`).
            pub fn parse_config(s: &str) -> Option<Self> {
                match s {
                    $($config => Some(DataType::$variant),)+
                    _ => None,
                }
            }

            /// Bytes per element; None for BYTES.
            pub fn size(self) -> Option<usize> {
                match self {
                    $(DataType::$variant => $size,)+
                }
            }
        }
    };
}

datatypes! {
    Bool => "BOOL", "TYPE_BOOL", Some(1);
    Uint8 => "UINT8", "TYPE_UINT8", Some(1);
    Uint16 => "UINT16", "TYPE_UINT16", Some(2);
    Uint32 => "UINT32", "TYPE_UINT32", Some(4);
    Uint64 => "UINT64", "TYPE_UINT64", Some(8);
    Int8 => "INT8", "TYPE_INT8", Some(1);
    Int16 => "INT16", "TYPE_INT16", Some(2);
    Int32 => "INT32", "TYPE_INT32", Some(4);
    Int64 => "INT64", "TYPE_INT64", Some(8);
    Fp16 => "FP16", "TYPE_FP16", Some(2);
    Bf16 => "BF16", "TYPE_BF16", Some(2);
    Fp32 => "FP32", "TYPE_FP32", Some(4);
    Fp64 => "FP64", "TYPE_FP64", Some(8);
    Bytes => "BYTES", "TYPE_STRING", None;
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DataType {
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64
        )
    }
}

/// One element as a number (BYTES excepted): what JSON data, validation and messages use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    /// FP16, BF16 and FP32 (shown as the f32 they are, not as a longer f64).
    Float32(f32),
    Float(f64),
}

impl Scalar {
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Scalar::Bool(b) => b.into(),
            Scalar::Unsigned(v) => v.into(),
            Scalar::Signed(v) => v.into(),
            Scalar::Float32(v) => v.into(),
            Scalar::Float(v) => v.into(),
        }
    }

    pub fn as_f64(self) -> Option<f64> {
        match self {
            Scalar::Float32(v) => Some(v.into()),
            Scalar::Float(v) => Some(v),
            _ => None,
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Unsigned(v) => write!(f, "{v}"),
            Scalar::Signed(v) => write!(f, "{v}"),
            // Debug: 1e300 stays short, and 1.0 reads as a float.
            Scalar::Float32(v) => write!(f, "{v:?}"),
            Scalar::Float(v) => write!(f, "{v:?}"),
        }
    }
}

/// IEEE half precision bits to f32 (exact).
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exp = ((bits >> 10) & 0x1f) as u32;
    let mant = (bits & 0x3ff) as u32;
    let magnitude = match exp {
        0 => {
            // Zero or subnormal: mant × 2^-24.
            let v = mant as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        0x1f => 0x7f80_0000 | (mant << 13),
        _ => ((exp + 127 - 15) << 23) | (mant << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// f32 to IEEE half precision bits, rounding to nearest even; out of range saturates to infinity.
pub fn f32_to_f16(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: shift the mantissa (with its implicit 1) into place, rounding to even.
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut h = m >> shift;
        if rest > half || (rest == half && h & 1 == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    let mut h = ((e as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        // May carry into the exponent, up to infinity: still the right rounding.
        h += 1;
    }
    sign | h as u16
}

/// bfloat16 bits to f32 (exact: the upper half of an f32).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 to bfloat16 bits, rounding to nearest even (NaN stays NaN).
pub fn f32_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// Decodes one element of a fixed-size datatype from little-endian bytes (`b` has the size).
pub fn decode_scalar(datatype: DataType, b: &[u8]) -> Scalar {
    let u = |n: usize| {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        u64::from_le_bytes(a)
    };
    match datatype {
        DataType::Bool => Scalar::Bool(b[0] != 0),
        DataType::Uint8 => Scalar::Unsigned(u(1)),
        DataType::Uint16 => Scalar::Unsigned(u(2)),
        DataType::Uint32 => Scalar::Unsigned(u(4)),
        DataType::Uint64 => Scalar::Unsigned(u(8)),
        DataType::Int8 => Scalar::Signed(b[0] as i8 as i64),
        DataType::Int16 => Scalar::Signed(u(2) as u16 as i16 as i64),
        DataType::Int32 => Scalar::Signed(u(4) as u32 as i32 as i64),
        DataType::Int64 => Scalar::Signed(u(8) as i64),
        DataType::Fp16 => Scalar::Float32(f16_to_f32(u(2) as u16)),
        DataType::Bf16 => Scalar::Float32(bf16_to_f32(u(2) as u16)),
        DataType::Fp32 => Scalar::Float32(f32::from_bits(u(4) as u32)),
        DataType::Fp64 => Scalar::Float(f64::from_bits(u(8))),
        DataType::Bytes => unreachable!("BYTES has no fixed-size elements"),
    }
}

/// Encodes a JSON number or boolean as one little-endian element of `datatype`; None when the
/// value does not fit (a float for an integer type, out of range, a number for BOOL).
pub fn encode_json_scalar(
    datatype: DataType,
    v: &serde_json::Value,
    out: &mut Vec<u8>,
) -> Option<()> {
    let int = |lo: i128, hi: i128| -> Option<i128> {
        let x = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from))?;
        (lo..=hi).contains(&x).then_some(x)
    };
    match datatype {
        DataType::Bool => out.push(u8::from(v.as_bool()?)),
        DataType::Uint8 => out.push(int(0, u8::MAX as i128)? as u8),
        DataType::Uint16 => {
            out.extend_from_slice(&(int(0, u16::MAX as i128)? as u16).to_le_bytes())
        }
        DataType::Uint32 => {
            out.extend_from_slice(&(int(0, u32::MAX as i128)? as u32).to_le_bytes())
        }
        DataType::Uint64 => {
            out.extend_from_slice(&(int(0, u64::MAX as i128)? as u64).to_le_bytes())
        }
        DataType::Int8 => out.push(int(i8::MIN as i128, i8::MAX as i128)? as i8 as u8),
        DataType::Int16 => {
            out.extend_from_slice(&(int(i16::MIN as i128, i16::MAX as i128)? as i16).to_le_bytes())
        }
        DataType::Int32 => {
            out.extend_from_slice(&(int(i32::MIN as i128, i32::MAX as i128)? as i32).to_le_bytes())
        }
        DataType::Int64 => {
            out.extend_from_slice(&(int(i64::MIN as i128, i64::MAX as i128)? as i64).to_le_bytes())
        }
        DataType::Fp16 => out.extend_from_slice(&f32_to_f16(v.as_f64()? as f32).to_le_bytes()),
        DataType::Bf16 => out.extend_from_slice(&f32_to_bf16(v.as_f64()? as f32).to_le_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(v.as_f64()? as f32).to_le_bytes()),
        DataType::Fp64 => out.extend_from_slice(&v.as_f64()?.to_le_bytes()),
        DataType::Bytes => return None,
    }
    Some(())
}

/// What is wrong with a tensor's raw data, or with the datatype it was read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// BYTES data ends inside an element's 4-byte length.
    #[error("element {element}: {left} bytes left, too few for a 4-byte length")]
    TruncatedLength { element: usize, left: usize },
    /// BYTES data ends inside an element: its length says more than is left.
    #[error("element {element}: length {length} but only {left} bytes left")]
    TruncatedElement {
        element: usize,
        length: usize,
        left: usize,
    },
    /// Read as INT32, but another datatype or not a whole number of 4-byte values.
    #[error("output {output} is {datatype} with {len} bytes, expected INT32")]
    NotInt32 {
        output: String,
        datatype: DataType,
        len: usize,
    },
    /// Read as BYTES, but another datatype.
    #[error("output {output} is {datatype}, expected BYTES")]
    NotBytes { output: String, datatype: DataType },
    /// A BYTES output whose raw data is malformed (`source`: how).
    #[error("output {output}: malformed BYTES: {source}")]
    MalformedBytes {
        output: String,
        source: Box<TensorError>,
    },
}

/// The elements of a BYTES tensor's raw data (4-byte little-endian length, then the bytes), or
/// why the data is malformed ([`TensorError::TruncatedLength`],
/// [`TensorError::TruncatedElement`]).
pub fn split_bytes(data: &[u8]) -> Result<Vec<&[u8]>, TensorError> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(TensorError::TruncatedLength {
                element: out.len(),
                left: rest.len(),
            });
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        rest = &rest[4..];
        if rest.len() < len {
            return Err(TensorError::TruncatedElement {
                element: out.len(),
                length: len,
                left: rest.len(),
            });
        }
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    Ok(out)
}

/// Appends one BYTES element in the raw layout.
pub fn push_bytes_element(out: &mut Vec<u8>, element: &[u8]) {
    out.extend_from_slice(&(element.len() as u32).to_le_bytes());
    out.extend_from_slice(element);
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

    pub fn to_i32(&self) -> Result<Vec<i32>, TensorError> {
        if self.datatype != DataType::Int32 || !self.data.len().is_multiple_of(4) {
            return Err(TensorError::NotInt32 {
                output: self.name.clone(),
                datatype: self.datatype,
                len: self.data.len(),
            });
        }
        Ok(self
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// BYTES elements (4-byte little-endian length, then the bytes), lossily as UTF-8.
    pub fn to_strings(&self) -> Result<Vec<String>, TensorError> {
        if self.datatype != DataType::Bytes {
            return Err(TensorError::NotBytes {
                output: self.name.clone(),
                datatype: self.datatype,
            });
        }
        split_bytes(&self.data)
            .map(|elements| {
                elements
                    .into_iter()
                    .map(|e| String::from_utf8_lossy(e).into_owned())
                    .collect()
            })
            .map_err(|e| TensorError::MalformedBytes {
                output: self.name.clone(),
                source: Box::new(e),
            })
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

    #[test]
    fn tensor_errors_say_what_is_wrong() {
        // 6 bytes: a length of 9, then 2 bytes of it.
        let short_element = [9, 0, 0, 0, b'a', b'b'];
        let e = split_bytes(&short_element).unwrap_err();
        assert_eq!(
            e,
            TensorError::TruncatedElement {
                element: 0,
                length: 9,
                left: 2
            }
        );
        assert_eq!(e.to_string(), "element 0: length 9 but only 2 bytes left");
        // One whole element, then 3 bytes: too few for the next length.
        let short_length = [1, 0, 0, 0, b'a', 1, 0, 0];
        let e = split_bytes(&short_length).unwrap_err();
        assert!(
            matches!(
                e,
                TensorError::TruncatedLength {
                    element: 1,
                    left: 3
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "element 1: 3 bytes left, too few for a 4-byte length"
        );

        let ints = Tensor::from_i32("X", vec![1], &[7]);
        let e = ints.to_strings().unwrap_err();
        assert!(
            matches!(&e, TensorError::NotBytes { output, datatype: DataType::Int32 } if output == "X"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "output X is INT32, expected BYTES");

        let strings = Tensor::from_strings("L", vec![1], &["abc".into()]);
        let e = strings.to_i32().unwrap_err();
        assert!(
            matches!(&e, TensorError::NotInt32 { output, datatype: DataType::Bytes, len: 7 } if output == "L"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "output L is BYTES with 7 bytes, expected INT32"
        );

        let truncated = Tensor {
            data: strings.data.slice(..5),
            ..strings
        };
        let e = truncated.to_strings().unwrap_err();
        match &e {
            TensorError::MalformedBytes { output, source } => {
                assert_eq!(output, "L");
                assert!(matches!(
                    **source,
                    TensorError::TruncatedElement {
                        element: 0,
                        length: 3,
                        left: 1
                    }
                ));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "output L: malformed BYTES: element 0: length 3 but only 1 bytes left"
        );
    }
}
