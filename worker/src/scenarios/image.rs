//! ImageClassification: a batch of the committed images, preprocessed as the model expects
//! (224×224, RGB, channel mean subtracted, CHW), sent with Triton's classification extension
//! (class_count = 1); every result must carry the image's expected label.

use super::{Failure, Outcome, TestEnv};
use crate::client::{InferRequest, RequestedOutput};
use crate::tensor::Tensor;

pub const SIDE: usize = 224;
const MEAN: [f32; 3] = [123.68, 116.78, 103.94];

/// The committed images and the label each must be classified as.
pub const IMAGES: &[(&str, &[u8], &str)] = &[
    (
        "tomato.png",
        include_bytes!("../../assets/images/tomato.png"),
        "red",
    ),
    (
        "sky.png",
        include_bytes!("../../assets/images/sky.png"),
        "blue",
    ),
];

/// The request every test sends and the label expected for each batch entry.
#[derive(Debug, Clone)]
pub struct ImageBatch {
    pub request: InferRequest,
    pub expected: Vec<String>,
}

/// Why a PNG does not decode into RGB.
#[derive(Debug, thiserror::Error)]
pub enum PngError {
    #[error("{0}")]
    Decode(#[from] png::DecodingError),
    #[error("image too large")]
    TooLarge,
    #[error("unsupported PNG colour type {0:?}")]
    UnsupportedColourType(png::ColorType),
}

/// A committed image that does not decode: no batch can be built.
#[derive(Debug, thiserror::Error)]
#[error("{name}: {source}")]
pub struct ImageError {
    pub name: &'static str,
    pub source: PngError,
}

/// Decodes an 8-bit RGB or RGBA PNG into (width, height, RGB bytes).
pub fn decode_png(bytes: &[u8]) -> Result<(usize, usize, Vec<u8>), PngError> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or(PngError::TooLarge)?];
    let info = reader.next_frame(&mut buf)?;
    let (w, h) = (info.width as usize, info.height as usize);
    let rgb = match info.color_type {
        png::ColorType::Rgb => buf[..w * h * 3].to_vec(),
        png::ColorType::Rgba => buf[..w * h * 4]
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        png::ColorType::Grayscale => buf[..w * h].iter().flat_map(|&g| [g, g, g]).collect(),
        other => return Err(PngError::UnsupportedColourType(other)),
    };
    Ok((w, h, rgb))
}

/// Bilinear resize to 224×224, then (pixel − channel mean) in CHW order.
pub fn preprocess(w: usize, h: usize, rgb: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; 3 * SIDE * SIDE];
    let sx = w as f32 / SIDE as f32;
    let sy = h as f32 / SIDE as f32;
    for y in 0..SIDE {
        let fy = ((y as f32 + 0.5) * sy - 0.5).clamp(0.0, (h - 1) as f32);
        let (y0, ty) = (fy.floor() as usize, fy.fract());
        let y1 = (y0 + 1).min(h - 1);
        for x in 0..SIDE {
            let fx = ((x as f32 + 0.5) * sx - 0.5).clamp(0.0, (w - 1) as f32);
            let (x0, tx) = (fx.floor() as usize, fx.fract());
            let x1 = (x0 + 1).min(w - 1);
            for c in 0..3 {
                let p = |xx: usize, yy: usize| rgb[(yy * w + xx) * 3 + c] as f32;
                let top = p(x0, y0) * (1.0 - tx) + p(x1, y0) * tx;
                let bottom = p(x0, y1) * (1.0 - tx) + p(x1, y1) * tx;
                out[c * SIDE * SIDE + y * SIDE + x] = top * (1.0 - ty) + bottom * ty - MEAN[c];
            }
        }
    }
    out
}

impl ImageBatch {
    /// A batch of `batch` entries cycling through the committed images.
    pub fn new(model: &str, batch: usize) -> Result<Self, ImageError> {
        let decoded: Vec<(Vec<f32>, &str)> = IMAGES
            .iter()
            .map(|(name, bytes, label)| {
                let (w, h, rgb) =
                    decode_png(bytes).map_err(|source| ImageError { name, source })?;
                Ok((preprocess(w, h, &rgb), *label))
            })
            .collect::<Result<_, ImageError>>()?;
        let mut data = Vec::with_capacity(batch * 3 * SIDE * SIDE);
        let mut expected = Vec::with_capacity(batch);
        for i in 0..batch {
            let (pixels, label) = &decoded[i % decoded.len()];
            data.extend_from_slice(pixels);
            expected.push(label.to_string());
        }
        let side = SIDE as i64;
        let mut request = InferRequest::new(
            model,
            vec![Tensor::from_f32(
                "INPUT",
                vec![batch as i64, 3, side, side],
                &data,
            )],
        );
        request.outputs = vec![RequestedOutput {
            name: "OUTPUT".into(),
            class_count: Some(1),
            datatype: None,
        }];
        Ok(Self { request, expected })
    }
}

/// The label of a classification result "score:index:label".
pub fn label_of(result: &str) -> &str {
    result.splitn(3, ':').nth(2).unwrap_or("")
}

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let batch = env.images;
    let model = batch.request.model.clone();
    let mut request = batch.request.clone();
    request.timeout = Some(env.settings.request_timeout);
    let response = match env.infer(&request).await {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(Failure::client(&model, "a classification", &e)),
    };
    let results = match response
        .output("OUTPUT")
        .map_err(|e| e.to_string())
        .and_then(|t| t.to_strings().map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(Failure::new(&model, "classification strings", e)),
    };
    if results.len() != batch.expected.len() {
        return Outcome::Failed(Failure::new(
            &model,
            format!("{} results", batch.expected.len()),
            format!("{} results: {results:?}", results.len()),
        ));
    }
    for (i, (got, want)) in results.iter().zip(&batch.expected).enumerate() {
        if label_of(got) != want {
            return Outcome::Failed(Failure::new(
                &model,
                format!(
                    "label {want} for batch entry {i} ({})",
                    IMAGES[i % IMAGES.len()].0
                ),
                format!("\"{got}\""),
            ));
        }
    }
    Outcome::Passed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_images_decode_and_preprocess_to_224() {
        for (name, bytes, _) in IMAGES {
            let (w, h, rgb) = decode_png(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(rgb.len(), w * h * 3);
            assert_eq!(preprocess(w, h, &rgb).len(), 3 * SIDE * SIDE);
        }
        assert_eq!(label_of("0.93:3:red"), "red");
        assert_eq!(label_of("garbage"), "");
    }

    #[test]
    fn a_uniform_image_stays_uniform_after_resize() {
        let rgb: Vec<u8> = std::iter::repeat_n([200u8, 10, 20], 50 * 30)
            .flatten()
            .collect();
        let out = preprocess(50, 30, &rgb);
        assert!(
            out[..SIDE * SIDE]
                .iter()
                .all(|v| (v - (200.0 - MEAN[0])).abs() < 1e-3)
        );
    }
}
