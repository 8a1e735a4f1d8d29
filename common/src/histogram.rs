//! Latency histograms (HDR, microseconds) that merge exactly across workers: percentiles of a whole
//! run are read from the merged histogram, never averaged from per-worker percentiles.

use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    #[error("latency histogram is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("latency histogram does not decode: {0}")]
    Decode(String),
}

#[derive(Clone, PartialEq)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("p50_us", &self.percentile_us(50.0))
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The highest latency tracked exactly; slower requests are clamped to it (an hour).
const MAX_TRACKED_US: u64 = 3_600_000_000;

impl LatencyHistogram {
    pub fn new() -> Self {
        Self {
            inner: Histogram::new_with_bounds(1, MAX_TRACKED_US, 3)
                .expect("static histogram bounds are valid"),
        }
    }

    pub fn record(&mut self, latency: std::time::Duration) {
        let us = (latency.as_micros() as u64).clamp(1, MAX_TRACKED_US);
        self.inner.saturating_record(us);
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both sides share the same bounds, so adding cannot fail.
        let _ = self.inner.add(&other.inner);
    }

    /// What was recorded after `earlier`, a previous state of the same cumulative histogram:
    /// the exact histogram of a window. Counts that `earlier` has beyond `self` (a restarted
    /// worker) make it an error, and the window should be taken as `self` alone.
    pub fn since(&self, earlier: &LatencyHistogram) -> Result<LatencyHistogram, HistogramError> {
        let mut window = self.clone();
        window
            .inner
            .subtract(&earlier.inner)
            .map_err(|e| HistogramError::Decode(format!("not an earlier state: {e:?}")))?;
        Ok(window)
    }

    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    pub fn percentile_us(&self, percentile: f64) -> u64 {
        if self.inner.is_empty() {
            0
        } else {
            self.inner.value_at_quantile(percentile / 100.0)
        }
    }

    pub fn max_us(&self) -> u64 {
        self.inner.max()
    }

    /// Compressed HDR V2 encoding in base64: small enough to upsert every poll interval.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.inner, &mut bytes)
            .expect("serialising into a Vec cannot fail");
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Decodes [`Self::encode`]'s output; an empty string is an empty histogram.
    pub fn decode(text: &str) -> Result<Self, HistogramError> {
        if text.is_empty() {
            return Ok(Self::new());
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(text)?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| HistogramError::Decode(format!("{e:?}")))?;
        let ours = Self::new();
        // Ours (the usual case) is used as it is: the report decodes hundreds of thousands.
        if (decoded.low(), decoded.high(), decoded.sigfig())
            == (ours.inner.low(), ours.inner.high(), ours.inner.sigfig())
        {
            return Ok(Self { inner: decoded });
        }
        let mut out = ours;
        out.inner
            .add(&decoded)
            .map_err(|e| HistogramError::Decode(format!("{e:?}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn merged_percentiles_come_from_all_samples() {
        let mut fast = LatencyHistogram::new();
        let mut slow = LatencyHistogram::new();
        for _ in 0..90 {
            fast.record(Duration::from_micros(100));
        }
        for _ in 0..10 {
            slow.record(Duration::from_millis(50));
        }
        let mut all = LatencyHistogram::decode(&fast.encode()).unwrap();
        all.merge(&LatencyHistogram::decode(&slow.encode()).unwrap());
        assert_eq!(all.count(), 100);
        assert!((99..=101).contains(&all.percentile_us(50.0)));
        assert!(all.percentile_us(95.0) >= 49_000);
    }

    #[test]
    fn a_window_is_the_cumulative_histogram_minus_its_earlier_state() {
        let mut h = LatencyHistogram::new();
        for _ in 0..100 {
            h.record(Duration::from_millis(1));
        }
        let earlier = h.clone();
        for _ in 0..10 {
            h.record(Duration::from_millis(80));
        }
        let window = h.since(&earlier).unwrap();
        assert_eq!(window.count(), 10);
        assert!(window.percentile_us(50.0) >= 79_000, "{window:?}");
        assert!(earlier.since(&h).is_err(), "not an earlier state");
    }

    #[test]
    fn empty_text_is_an_empty_histogram_and_garbage_is_an_error() {
        assert_eq!(LatencyHistogram::decode("").unwrap().count(), 0);
        assert!(LatencyHistogram::decode("not base64!").is_err());
    }

    #[test]
    fn a_histogram_of_other_bounds_decodes_into_ours_and_merges() {
        // Written by another tool (or an older version) with a narrower range and precision.
        let mut other = Histogram::<u64>::new_with_bounds(1, 100_000, 2).unwrap();
        other.record_n(50, 9).unwrap();
        other.record(90_000).unwrap();
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&other, &mut bytes)
            .unwrap();
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        let decoded = LatencyHistogram::decode(&text).unwrap();
        assert_eq!(
            decoded.inner.high(),
            MAX_TRACKED_US,
            "ours, not the writer's"
        );
        assert_eq!(decoded.count(), 10);
        let mut ours = LatencyHistogram::new();
        ours.record(std::time::Duration::from_secs(10));
        ours.merge(&decoded);
        assert_eq!(ours.count(), 11);
        assert_eq!(ours.percentile_us(50.0), 50);
        assert!(ours.max_us() >= 10_000_000);
        // Ours round-trips as it is.
        assert_eq!(LatencyHistogram::decode(&ours.encode()).unwrap(), ours);
    }
}
