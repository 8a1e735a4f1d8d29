//! The scenario catalogue: names as in Triton's `qa/L0_long_running_stress`, their default weights
//! (upstream's, per mille) and the descriptions the L0 table prints. The worker runs them; the driver
//! validates matrix weights against the same list.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Scenario {
    Timeout,
    ImageClassification,
    CrashingClient,
    SequenceNoEnd,
    SequenceValidNoEnd,
    SequenceValidValid,
    SequenceNoStart,
    SequenceValid,
    PerfAnalyzer,
    Load,
}

impl Scenario {
    pub const ALL: [Scenario; 10] = [
        Scenario::Timeout,
        Scenario::ImageClassification,
        Scenario::CrashingClient,
        Scenario::SequenceNoEnd,
        Scenario::SequenceValidNoEnd,
        Scenario::SequenceValidValid,
        Scenario::SequenceNoStart,
        Scenario::SequenceValid,
        Scenario::PerfAnalyzer,
        Scenario::Load,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Timeout => "Timeout",
            Scenario::ImageClassification => "ImageClassification",
            Scenario::CrashingClient => "CrashingClient",
            Scenario::SequenceNoEnd => "SequenceNoEnd",
            Scenario::SequenceValidNoEnd => "SequenceValidNoEnd",
            Scenario::SequenceValidValid => "SequenceValidValid",
            Scenario::SequenceNoStart => "SequenceNoStart",
            Scenario::SequenceValid => "SequenceValid",
            Scenario::PerfAnalyzer => "PerfAnalyzer",
            Scenario::Load => "Load",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Upstream's weights (per mille). Upstream's PerfAnalyzer share is split between the external
    /// perf_analyzer run and the built-in Load scenario, which needs no external binary.
    pub fn default_weight(self) -> u32 {
        match self {
            Scenario::Timeout => 60,
            Scenario::ImageClassification => 80,
            Scenario::CrashingClient => 60,
            Scenario::SequenceNoEnd => 62,
            Scenario::SequenceValidNoEnd => 68,
            Scenario::SequenceValidValid => 68,
            Scenario::SequenceNoStart => 7,
            Scenario::SequenceValid => 295,
            Scenario::PerfAnalyzer => 100,
            Scenario::Load => 200,
        }
    }

    /// Upstream lets only the perf_analyzer run fail without failing the test.
    pub fn allowed_to_fail(self) -> bool {
        matches!(self, Scenario::PerfAnalyzer)
    }

    pub fn description(self) -> &'static str {
        match self {
            Scenario::Timeout => {
                "Request with a client deadline shorter than the model's delay must time out; the server must still answer"
            }
            Scenario::ImageClassification => {
                "Batch of committed images through the classification extension; every top-1 label must match"
            }
            Scenario::CrashingClient => {
                "Child process sending to the delayed model is SIGKILLed mid-flight; the server must stay live and ready"
            }
            Scenario::SequenceNoEnd => {
                "Sequence with START and no END; the server reclaims it after its idle timeout"
            }
            Scenario::SequenceValidNoEnd => {
                "A complete sequence, then a START-only sequence left open on the same correlation id"
            }
            Scenario::SequenceValidValid => {
                "Two complete sequences back to back on the same correlation id; both checked"
            }
            Scenario::SequenceNoStart => {
                "Request without START on a closed correlation id must fail with the START-flag error"
            }
            Scenario::SequenceValid => "START ... END sequence; every running-sum output checked",
            Scenario::PerfAnalyzer => {
                "External perf_analyzer run against the load model (allowed to fail)"
            }
            Scenario::Load => {
                "perf_analyzer-style constant concurrency or open-loop constant rate; every response validated"
            }
        }
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_case_insensitively() {
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.name()), Some(s));
            assert_eq!(Scenario::parse(&s.name().to_lowercase()), Some(s));
        }
        assert_eq!(Scenario::parse("SequenceBogus"), None);
    }
}
