//! Known issues: an entry as written ([`KnownIssue`]), and read once where it is checked
//! (`validate::check_known_issues`) into a [`Known`]: its message regex compiled and its `until`
//! day read, so nothing downstream reads those strings again.

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A failure known to happen.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KnownIssue {
    /// A short id, unique among the run's known issues (e.g. `triton-2.51-seq-reaper`).
    pub id: String,

    /// Which failures it is: every given field must match.
    #[serde(rename = "match")]
    pub matches: IssueMatch,

    /// Why it happens and what is done about it (the report shows it).
    pub reason: String,

    /// Where it is tracked (an upstream issue, a ticket).
    pub link: Option<String>,

    /// The last day (YYYY-MM-DD, UTC) it is excused: afterwards a match fails the run again
    /// and says the entry expired.
    pub until: Option<String>,

    /// More matches than this per hour of load fail the run (the allowance of a shorter run is
    /// pro-rated, at least one).
    #[serde(default, deserialize_with = "super::checked::per_hour")]
    pub max_per_hour: Option<f64>,
}

/// The failures a known issue is: each field given must match.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueMatch {
    /// The scenario (e.g. `SequenceValid`).
    pub scenario: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// Where the driver judged the fault lies (a `server` class leaves out a client that made
    /// the same mistake).
    pub class: Option<stress_common::signature::FailureClass>,
    /// What kind of error the client saw.
    pub error_kind: Option<stress_common::signature::ErrorKind>,
    /// A regular expression (Rust `regex` syntax) searched in the failure's text as recorded:
    /// `expected …, got …`.
    pub message: String,
}

/// One entry, compiled.
#[derive(Debug, Clone)]
pub struct Known {
    pub issue: KnownIssue,
    pub message: Regex,
    pub until: Option<jiff::civil::Date>,
}

/// Entries are the same when they were written the same (a regex compares by nothing else).
impl PartialEq for Known {
    fn eq(&self, other: &Self) -> bool {
        self.issue == other.issue
    }
}

impl Known {
    /// Whether the entry's `until` day is over on `today` (UTC).
    pub fn expired(&self, today: jiff::civil::Date) -> bool {
        self.until.is_some_and(|u| today > u)
    }

    /// How many matches a load of `hours` is allowed (None: no limit): `max_per_hour` pro-rated,
    /// rounded up, at least one.
    pub fn allowance(&self, hours: f64) -> Option<u64> {
        self.issue
            .max_per_hour
            .map(|rate| ((rate * hours.max(0.0)).ceil() as u64).max(1))
    }
}
