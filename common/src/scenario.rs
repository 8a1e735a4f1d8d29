//! The scenario catalogue: names as in Triton's `qa/L0_long_running_stress`, their default weights
//! (upstream's, per mille) and the descriptions the L0 table prints. The worker runs them; the driver
//! validates matrix weights against the same list.

use serde::{Deserialize, Serialize};

/// Declares the catalogue once: every scenario's name, default weight and description, from which
/// the enum, [`Scenario::ALL`], [`Scenario::name`] and the lookups are derived (nothing hand-kept
/// in parallel lists).
macro_rules! catalogue {
    ($($(#[$doc:meta])* $variant:ident => weight $weight:expr, $description:expr;)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Scenario {
            $($(#[$doc])* $variant,)+
        }

        impl Scenario {
            pub const ALL: [Scenario; [$(stringify!($variant)),+].len()] = [$(Scenario::$variant,)+];

            pub fn name(self) -> &'static str {
                match self {
                    $(Scenario::$variant => stringify!($variant),)+
                }
            }

            /// Upstream's weights (per mille). Upstream's PerfAnalyzer share is split between the
            /// external perf_analyzer run and the built-in Load scenario, which needs no external
            /// binary.
            pub fn default_weight(self) -> u32 {
                match self {
                    $(Scenario::$variant => $weight,)+
                }
            }

            pub fn description(self) -> &'static str {
                match self {
                    $(Scenario::$variant => $description,)+
                }
            }
        }
    };
}

catalogue! {
    Timeout => weight 60,
        "Request with a client deadline shorter than the model's delay must time out; the server must still answer";
    ImageClassification => weight 80,
        "Batch of committed images through the classification extension; every top-1 label must match";
    CrashingClient => weight 60,
        "Child process sending to the delayed model is SIGKILLed mid-flight; the server must stay live and ready";
    SequenceNoEnd => weight 62,
        "Sequence with START and no END; the server reclaims it after its idle timeout";
    SequenceValidNoEnd => weight 68,
        "A complete sequence, then a START-only sequence left open on the same correlation id";
    SequenceValidValid => weight 68,
        "Two complete sequences back to back on the same correlation id; both checked";
    SequenceNoStart => weight 7,
        "Request without START on a closed correlation id must fail with the START-flag error";
    SequenceValid => weight 295,
        "START ... END sequence; every running-sum output checked";
    PerfAnalyzer => weight 100,
        "External perf_analyzer run against the load model (allowed to fail)";
    Load => weight 200,
        "perf_analyzer-style constant concurrency or open-loop constant rate; every response validated";
    Infer => weight 100,
        "Any model, requests built from its metadata and config (--model); every output checked for presence, datatype, shape, size and validation data";
}

impl Scenario {
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Whether the mix a worker runs when none is given includes the scenario. `Infer` drives
    /// the models a user names (`--model`): without them it runs only when listed by name (then
    /// against the load model), so the default mix stays upstream's.
    pub fn in_default_mix(self) -> bool {
        !matches!(self, Scenario::Infer)
    }

    /// Upstream lets only the perf_analyzer run fail without failing the test.
    pub fn allowed_to_fail(self) -> bool {
        matches!(self, Scenario::PerfAnalyzer)
    }

    /// Whether the server answers this scenario's requests with an error by design (their
    /// latency is recorded, but they are no success on the server): a sequence's first request
    /// without the START flag.
    pub fn answered_with_errors(self) -> bool {
        matches!(self, Scenario::SequenceNoStart)
    }

    /// Whether this scenario's tests drive sequences (START ... END on a correlation id): a
    /// failed one is a sequence cut short. Only the `Sequence*` scenarios: whether an `Infer`
    /// test drives a sequence model depends on the model, which is not knowable here.
    pub fn uses_sequences(self) -> bool {
        matches!(
            self,
            Scenario::SequenceNoEnd
                | Scenario::SequenceValidNoEnd
                | Scenario::SequenceValidValid
                | Scenario::SequenceNoStart
                | Scenario::SequenceValid
        )
    }

    /// Whether this scenario's requests are sent by a child process the worker kills, so that
    /// it counts them but never sees their answers (the crashing client).
    pub fn sent_by_a_child(self) -> bool {
        matches!(self, Scenario::CrashingClient)
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

    #[test]
    fn the_sequence_scenarios_are_those_named_so() {
        for s in Scenario::ALL {
            assert_eq!(s.uses_sequences(), s.name().starts_with("Sequence"), "{s}");
        }
        assert!(!Scenario::Infer.uses_sequences());
    }
}
