//! Known issues, ready to match (pure): the matrix's `known_issues` and `--known-issues FILE`'s
//! entries with their regular expressions compiled and dates read. A failure an entry matches
//! (every field it gives: scenario, model, class, error kind, and its message regex searched in
//! the failure's `expected …, got …`) is excused while the entry is in date and its rate within
//! `max_per_hour` over the load (pro-rated for a shorter run, at least one).

use regex::Regex;
use stress_common::signature::{ErrorKind, FailureClass};
use stress_common::status::FailureRecord;

use crate::matrix::KnownIssue;

/// One entry, compiled.
#[derive(Debug, Clone)]
pub struct Known {
    pub issue: KnownIssue,
    message: Regex,
    until: Option<jiff::civil::Date>,
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

/// A known issue that does not compile (the file checks let it through): which one, which field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KnownIssueError {
    #[error("known issue {id}: match.message: {error}")]
    Message { id: String, error: String },
    #[error("known issue {id}: until: {error}")]
    Until { id: String, error: String },
}

/// A run's known issues.
#[derive(Debug, Clone, Default)]
pub struct KnownIssues {
    entries: Vec<Known>,
}

impl KnownIssues {
    /// Compiles validated entries (the matrix and known-issues file checks ran first; an entry
    /// that still does not compile is an error naming it).
    pub fn new(issues: &[KnownIssue]) -> Result<Self, KnownIssueError> {
        let entries = issues
            .iter()
            .map(|issue| {
                let message =
                    Regex::new(&issue.matches.message).map_err(|e| KnownIssueError::Message {
                        id: issue.id.clone(),
                        error: e.to_string(),
                    })?;
                let until = issue
                    .until
                    .as_deref()
                    .map(str::parse::<jiff::civil::Date>)
                    .transpose()
                    .map_err(|e| KnownIssueError::Until {
                        id: issue.id.clone(),
                        error: e.to_string(),
                    })?;
                Ok(Known {
                    issue: issue.clone(),
                    message,
                    until,
                })
            })
            .collect::<Result<_, KnownIssueError>>()?;
        Ok(KnownIssues { entries })
    }

    pub fn entries(&self) -> &[Known] {
        &self.entries
    }

    /// The first entry that matches `record`, seen as `kind` and judged `class`.
    pub fn find(
        &self,
        record: &FailureRecord,
        kind: ErrorKind,
        class: FailureClass,
    ) -> Option<&Known> {
        let text = format!("expected {}, got {}", record.expected, record.actual);
        self.entries.iter().find(|k| {
            let m = &k.issue.matches;
            m.scenario.as_ref().is_none_or(|s| *s == record.scenario)
                && m.model.as_ref().is_none_or(|s| *s == record.model)
                && m.class.is_none_or(|c| c == class)
                && m.error_kind.is_none_or(|e| e == kind)
                && k.message.is_match(&text)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(yaml: &str) -> KnownIssues {
        KnownIssues::new(&crate::matrix::parse_known_issues(yaml, "known.yaml").unwrap()).unwrap()
    }

    fn record(scenario: &str, model: &str, actual: &str) -> FailureRecord {
        FailureRecord {
            scenario: scenario.into(),
            model: model.into(),
            expected: "step 2 answered".into(),
            actual: actual.into(),
            error_kind: None,
            ..Default::default()
        }
    }

    const REAPER: &str = r#"
- id: triton-2.51-seq-reaper
  match: { model: sequence_nobatch, class: server, error_kind: rejected, message: "must specify the START flag" }
  reason: tritonserver 2.51 reaps a sequence by its backlog enqueue time
  until: 2026-12-31
  max_per_hour: 10
"#;

    #[test]
    fn an_entry_that_does_not_compile_is_named_with_its_field() {
        let mut entries = crate::matrix::parse_known_issues(REAPER, "known.yaml").unwrap();
        entries[0].matches.message = "(unclosed".into();
        let err = KnownIssues::new(&entries).unwrap_err();
        assert!(
            matches!(&err, KnownIssueError::Message { id, .. } if id == "triton-2.51-seq-reaper"),
            "{err:?}"
        );
        entries[0].matches.message = "START".into();
        entries[0].until = Some("2026-13-40".into());
        let err = KnownIssues::new(&entries).unwrap_err();
        assert!(matches!(err, KnownIssueError::Until { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("known issue triton-2.51-seq-reaper: until: ")
        );
    }

    #[test]
    fn every_given_field_must_match() {
        let k = issues(REAPER);
        let rejected = "server error (InvalidArgument): sequence 7 must specify the START flag";
        let r = record("SequenceValid", "sequence_nobatch", rejected);
        let found = k.find(&r, ErrorKind::Rejected, FailureClass::Server);
        assert_eq!(found.unwrap().issue.id, "triton-2.51-seq-reaper");
        assert!(
            k.find(&r, ErrorKind::Rejected, FailureClass::Client)
                .is_none(),
            "a client that forgot START is not the upstream bug"
        );
        let other_model = record("SequenceValid", "sequence_batch", rejected);
        assert!(
            k.find(&other_model, ErrorKind::Rejected, FailureClass::Server)
                .is_none()
        );
        let other_text = record("SequenceValid", "sequence_nobatch", "OUTPUT [3]");
        assert!(
            k.find(&other_text, ErrorKind::Rejected, FailureClass::Server)
                .is_none()
        );
    }

    #[test]
    fn an_entry_expires_after_its_day_and_its_allowance_is_pro_rated() {
        let k = issues(REAPER);
        let e = &k.entries()[0];
        let day = |s: &str| s.parse::<jiff::civil::Date>().unwrap();
        assert!(!e.expired(day("2026-12-31")), "the last day is still in");
        assert!(e.expired(day("2027-01-01")));
        assert_eq!(e.allowance(1.0), Some(10));
        assert_eq!(e.allowance(0.25), Some(3), "2.5 rounded up");
        assert_eq!(e.allowance(0.01), Some(1), "at least one");
        let unlimited = issues("[{id: x, match: {message: x}, reason: r}]");
        assert_eq!(unlimited.entries()[0].allowance(5.0), None);
        assert!(!unlimited.entries()[0].expired(day("2100-01-01")));
    }
}
