//! Known issues, ready to match (pure): the matrix's `known_issues` and `--known-issues FILE`'s
//! entries with their regular expressions compiled and dates read. A failure an entry matches
//! (every field it gives: scenario, model, class, error kind, and its message regex searched in
//! the failure's `expected …, got …`) is excused while the entry is in date and its rate within
//! `max_per_hour` over the load (pro-rated for a shorter run, at least one).

use stress_common::signature::{ErrorKind, FailureClass};
use stress_common::status::FailureRecord;

pub use crate::matrix::known::Known;

/// A run's known issues.
#[derive(Debug, Clone, Default)]
pub struct KnownIssues {
    entries: Vec<Known>,
}

impl KnownIssues {
    /// The entries as read where they were checked (the matrix's, then a file's).
    pub fn new(entries: Vec<Known>) -> Self {
        KnownIssues { entries }
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
        KnownIssues::new(crate::matrix::parse_known_issues(yaml, "known.yaml").unwrap())
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
    fn an_entry_is_read_once_where_it_is_checked() {
        let entries = crate::matrix::parse_known_issues(REAPER, "known.yaml").unwrap();
        assert_eq!(entries[0].until, Some(jiff::civil::date(2026, 12, 31)));
        assert!(
            entries[0]
                .message
                .is_match("sequence 7 must specify the START flag")
        );
        assert!(!entries[0].expired(jiff::civil::date(2026, 12, 31)));
        assert!(entries[0].expired(jiff::civil::date(2027, 1, 1)));
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
