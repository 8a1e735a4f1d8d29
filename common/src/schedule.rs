//! An open loop's send times, defined once for the driver (which validates a matrix's schedule)
//! and the worker (which sends on it): constant gaps (`rate`), Poisson arrivals (`rate` with
//! `arrivals: poisson`: exponential gaps of the same mean, seeded), or perf_analyzer's
//! `--request-intervals` file (one gap in microseconds per line, cycled).

use crate::limits::{MAX_RATE, MIN_RATE};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How an open loop's requests arrive around their mean rate.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Every gap is `1 / rate` (perf_analyzer's `--request-distribution constant`).
    #[default]
    Constant,
    /// Exponential gaps of mean `1 / rate` (perf_analyzer's `--request-distribution poisson`):
    /// bursts and lulls, as independent users make them.
    Poisson,
}

/// Most lines a request-intervals file may have (perf_analyzer cycles the list, so a long
/// schedule needs no more).
pub const MAX_REQUEST_INTERVALS: usize = 1_000_000;
/// Largest file read for a schedule.
pub const MAX_REQUEST_INTERVALS_BYTES: u64 = 16 * 1024 * 1024;
/// Longest single gap of a request-intervals file: one hour.
pub const MAX_INTERVAL_US: u64 = 3_600_000_000;

/// What is wrong with a request-intervals file, at which line (1-based; 0: the whole file).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", if *.line > 0 { format!("line {}: ", .line) } else { String::new() })]
pub struct IntervalsError {
    pub line: usize,
    pub message: String,
}

/// Why a request-intervals file cannot be used; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum IntervalsFileError {
    /// Missing, unreadable, or not UTF-8.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: {size} bytes, more than the {MAX_REQUEST_INTERVALS_BYTES} a request-intervals file may have",
        path.display()
    )]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{}: {source}", path.display())]
    Invalid {
        path: PathBuf,
        source: IntervalsError,
    },
}

/// A request-intervals file's gaps, in order (cycled by [`SendTimes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestIntervals(Arc<[Duration]>);

impl RequestIntervals {
    /// Parses perf_analyzer's format: one whole number of microseconds per line, the gap
    /// before the next request. Blank lines and `#` comments are skipped; anything else that
    /// is not a whole number from 0 to [`MAX_INTERVAL_US`] is an error naming its line, as is
    /// a file with no gap, or gaps whose mean rate is outside the worker's limits.
    pub fn parse(text: &str) -> Result<Self, IntervalsError> {
        let mut gaps = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let value = raw.split('#').next().unwrap_or_default().trim();
            if value.is_empty() {
                continue;
            }
            if gaps.len() == MAX_REQUEST_INTERVALS {
                return Err(IntervalsError {
                    line,
                    message: format!("more than {MAX_REQUEST_INTERVALS} intervals"),
                });
            }
            let us: u64 = match value.parse::<i128>() {
                Ok(v) if v < 0 => {
                    return Err(IntervalsError {
                        line,
                        message: format!("interval {v} is negative: gaps are microseconds >= 0"),
                    });
                }
                Ok(v) if v > i128::from(MAX_INTERVAL_US) => {
                    return Err(IntervalsError {
                        line,
                        message: format!(
                            "interval {v} µs is longer than an hour ({MAX_INTERVAL_US} µs)"
                        ),
                    });
                }
                Ok(v) => v as u64,
                Err(_) => {
                    return Err(IntervalsError {
                        line,
                        message: format!(
                            "`{value}` is not a whole number of microseconds (one gap per line)"
                        ),
                    });
                }
            };
            gaps.push(Duration::from_micros(us));
        }
        if gaps.is_empty() {
            return Err(IntervalsError {
                line: 0,
                message: "no interval: the file needs one gap in microseconds per line".into(),
            });
        }
        let intervals = Self(gaps.into());
        let rate = intervals.mean_rate();
        if !(MIN_RATE..=MAX_RATE).contains(&rate) {
            return Err(IntervalsError {
                line: 0,
                message: format!(
                    "the intervals' mean rate {rate:.3}/s is outside {MIN_RATE} to {MAX_RATE} requests per second"
                ),
            });
        }
        Ok(intervals)
    }

    /// Reads and parses a file; errors name the file.
    pub fn read(path: &Path) -> Result<Self, IntervalsFileError> {
        let io = |source| IntervalsFileError::Io {
            path: path.into(),
            source,
        };
        let size = std::fs::metadata(path).map_err(io)?.len();
        if size > MAX_REQUEST_INTERVALS_BYTES {
            return Err(IntervalsFileError::TooLarge {
                path: path.into(),
                size,
            });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Self::parse(&text).map_err(|source| IntervalsFileError::Invalid {
            path: path.into(),
            source,
        })
    }

    pub fn gaps(&self) -> &[Duration] {
        &self.0
    }

    /// Requests per second over one pass of the list (infinite when every gap is 0).
    pub fn mean_rate(&self) -> f64 {
        let total: f64 = self.0.iter().map(Duration::as_secs_f64).sum();
        self.0.len() as f64 / total
    }
}

/// An open loop's schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// `rate` requests per second, with gaps as `arrivals` draws them.
    Rate { rate: f64, arrivals: Arrivals },
    /// A request-intervals file's gaps, cycled.
    Intervals(RequestIntervals),
}

impl Schedule {
    /// The mean requests per second.
    pub fn mean_rate(&self) -> f64 {
        match self {
            Schedule::Rate { rate, .. } => *rate,
            Schedule::Intervals(i) => i.mean_rate(),
        }
    }

    /// The send times, as offsets from the loop's start; `seed` seeds Poisson's draws.
    pub fn times(&self, seed: u64) -> SendTimes {
        self.times_from(seed, 0)
    }

    /// The send times of a loop that goes on from request `first` of an earlier one: a
    /// request-intervals file's gaps start at that request's gap (the others do not care).
    pub fn times_from(&self, seed: u64, first: u64) -> SendTimes {
        SendTimes {
            schedule: self.clone(),
            rng: StdRng::seed_from_u64(seed),
            index: 0,
            first,
            elapsed_s: 0.0,
            elapsed: Duration::ZERO,
        }
    }
}

/// The intended send times of a [`Schedule`]: request `i`'s offset from the loop's start.
/// Constant gaps are computed as `i / rate` (no error accumulates over hours); other gaps
/// add up.
#[derive(Debug, Clone)]
pub struct SendTimes {
    schedule: Schedule,
    rng: StdRng,
    index: u64,
    /// Intervals: the list position of request 0.
    first: u64,
    /// Poisson: the sum of the gaps drawn so far, in seconds.
    elapsed_s: f64,
    /// Intervals: the sum of the gaps so far.
    elapsed: Duration,
}

impl Iterator for SendTimes {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let i = self.index;
        self.index += 1;
        let at = match &self.schedule {
            Schedule::Rate {
                rate,
                arrivals: Arrivals::Constant,
            } => Duration::try_from_secs_f64(i as f64 / rate).ok()?,
            Schedule::Rate {
                rate,
                arrivals: Arrivals::Poisson,
            } => {
                // The first request leaves at once, like the constant schedule's.
                if i > 0 {
                    // Inverse CDF of the exponential: 1 - U is in (0, 1], so ln is finite.
                    let u: f64 = self.rng.random();
                    self.elapsed_s += -(1.0 - u).ln() / rate;
                }
                Duration::try_from_secs_f64(self.elapsed_s).ok()?
            }
            Schedule::Intervals(list) => {
                let at = self.elapsed;
                let gaps = list.gaps();
                let gap = gaps[(self.first.wrapping_add(i) % gaps.len() as u64) as usize];
                self.elapsed = self.elapsed.checked_add(gap)?;
                at
            }
        };
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(s: &Schedule, n: usize) -> Vec<Duration> {
        s.times(7).take(n).collect()
    }

    #[test]
    fn constant_gaps_are_exact_and_do_not_drift() {
        let s = Schedule::Rate {
            rate: 2000.0,
            arrivals: Arrivals::Constant,
        };
        let t = take(&s, 4);
        assert_eq!(t, [0, 500, 1000, 1500].map(Duration::from_micros).to_vec());
        // An hour later, request 7.2 million is still on the microsecond.
        let late = s.times(0).nth(7_200_000).unwrap();
        assert_eq!(late, Duration::from_secs(3600));
    }

    #[test]
    fn poisson_gaps_have_the_rate_as_mean_and_exponential_spread() {
        let rate = 1000.0;
        let s = Schedule::Rate {
            rate,
            arrivals: Arrivals::Poisson,
        };
        let n = 200_000;
        let t = take(&s, n + 1);
        let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        // Exponential: mean 1/rate and coefficient of variation 1 (constant gaps have 0).
        assert!((mean * rate - 1.0).abs() < 0.01, "mean gap {mean}");
        let cv = var.sqrt() / mean;
        assert!((cv - 1.0).abs() < 0.02, "coefficient of variation {cv}");
        // P(gap > 3/rate) = e^-3 ≈ 0.0498.
        let long = gaps.iter().filter(|g| **g > 3.0 / rate).count() as f64 / n as f64;
        assert!((long - (-3.0f64).exp()).abs() < 0.003, "tail {long}");
        // Seeded: the same seed, the same schedule; another seed, another.
        assert_eq!(take(&s, 100), take(&s, 100));
        assert_ne!(
            s.times(8).take(100).collect::<Vec<_>>(),
            s.times(7).take(100).collect::<Vec<_>>()
        );
    }

    #[test]
    fn request_intervals_cycle_like_perf_analyzers() {
        let list = RequestIntervals::parse("100\n200\n\n# a comment\n300 # trailing\n").unwrap();
        assert_eq!(list.gaps().len(), 3);
        assert!((list.mean_rate() - 5000.0).abs() < 1e-6);
        let t = take(&Schedule::Intervals(list), 6);
        assert_eq!(
            t,
            [0, 100, 300, 600, 700, 900]
                .map(Duration::from_micros)
                .to_vec()
        );
        // A later window goes on from request 2's gap (300 µs), then 100, 200, ...
        let list = RequestIntervals::parse("100\n200\n300\n").unwrap();
        let t: Vec<_> = Schedule::Intervals(list).times_from(0, 2).take(4).collect();
        assert_eq!(t, [0, 300, 400, 600].map(Duration::from_micros).to_vec());
    }

    #[test]
    fn bad_request_intervals_name_their_line() {
        let err = |text: &str| RequestIntervals::parse(text).unwrap_err();
        assert_eq!(err("").line, 0);
        assert!(err("").message.contains("no interval"), "{}", err(""));
        assert!(err("\n# only comments\n").message.contains("no interval"));
        let e = err("100\n-5\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("negative"), "{e}");
        let e = err("100\n200\n1.5\n");
        assert_eq!(e.line, 3);
        assert!(e.to_string().starts_with("line 3: `1.5`"), "{e}");
        let e = err("abc");
        assert_eq!(e.line, 1);
        let e = err("99999999999999999999999999999999999999999");
        assert_eq!(e.line, 1, "{e}");
        assert_eq!(err("3600000001").line, 1);
        // Every gap 0: no rate at all.
        let e = err("0\n0\n");
        assert!(e.message.contains("mean rate"), "{e}");
        // A burst within a list with a pause is fine.
        assert!(RequestIntervals::parse("0\n0\n1000\n").is_ok());
    }

    #[test]
    fn reading_a_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gaps.txt");
        std::fs::write(&path, "10\nx\n").unwrap();
        let e = RequestIntervals::read(&path).unwrap_err().to_string();
        assert!(e.contains("gaps.txt: line 2:"), "{e}");
        let missing = RequestIntervals::read(&dir.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("none"), "{missing}");
    }
}
