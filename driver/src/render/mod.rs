//! The report rendered: as text ([`text`]), one self-contained HTML page ([`html`]), JUnit XML
//! ([`junit`]) and the webhook's summary ([`webhook`]).

pub mod chart;
pub mod dashboard;
pub mod html;
pub mod junit;
pub mod text;
pub mod webhook;

use crate::report::Report;
use stress_common::signature::FailureClass;

/// Where a client's failure judged the server's (class `server`) was really seen: the server
/// the failing request went to, as `triton-0 (triton 2.51.0)`. None: the root cause is not a
/// client's failure of class `server`, or its server is not one of the run's.
pub fn server_bug(r: &Report) -> Option<String> {
    let root = r.analysis.root_cause.as_ref()?;
    let s = root.signature.as_ref()?;
    if s.class != FailureClass::Server || root.role != "CLIENT" {
        return None;
    }
    let judged = r.signatures.iter().find(|j| j.signature == s.signature)?;
    let address = judged.example.server.as_str();
    let server = r.servers.iter().find(|row| {
        !address.is_empty()
            && row
                .address
                .split_whitespace()
                .any(|a| a.split_once('=').is_some_and(|(_, at)| at == address))
    })?;
    let version = server.version.as_deref().unwrap_or("version unknown");
    Some(format!("{} ({version})", server.member_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::rootcause::RootCause;
    use crate::judge::verdicts::JudgedSignature;
    use crate::report::ServerRow;

    /// A run whose root cause is clients-0's failure on 127.0.0.1:15025, of `class`.
    fn run_failed_by_a_client(class: &str) -> Report {
        let mut r = Report {
            servers: vec![ServerRow {
                member_id: "triton-0".into(),
                group: "triton".into(),
                address: "grpc=127.0.0.1:15025 http=127.0.0.1:15026".into(),
                external: false,
                metrics: String::new(),
                version: Some("triton 2.51.0".into()),
            }],
            ..Report::default()
        };
        let mut signature: JudgedSignature = serde_json::from_value(serde_json::json!({
            "signature": "sig1-6dc71cec99d4", "version": 1, "scenario": "SequenceValid",
            "model": "sequence_nobatch", "error_kind": "rejected",
            "message": "must specify the START flag", "class": class,
            "evidence": "the server contradicted itself", "count": 1, "first_at_ms": 1,
            "last_at_ms": 1, "members": ["clients-0"], "servers": ["127.0.0.1:15025"],
            "status": "new", "fails": "a new failure", "example_member": "clients-0", "example": {
                "at_ms": 1, "scenario": "SequenceValid", "server": "127.0.0.1:15025",
                "model": "sequence_nobatch", "expected": "", "actual": ""
            }
        }))
        .expect("a judged signature");
        signature.example.server = "127.0.0.1:15025".into();
        r.signatures = vec![signature];
        let mut root = RootCause {
            member_id: "clients-0".into(),
            role: "CLIENT".into(),
            at_ms: 1,
            reason: "SequenceValid on 127.0.0.1:15025 model sequence_nobatch".into(),
            caused_members: Vec::new(),
            signature: None,
            class: None,
            evidence: None,
        };
        root.judge(&r.signatures);
        r.analysis.root_cause = Some(root);
        r
    }

    #[test]
    fn a_clients_failure_judged_the_servers_reads_as_a_server_bug() {
        let r = run_failed_by_a_client("server");
        assert_eq!(server_bug(&r).as_deref(), Some("triton-0 (triton 2.51.0)"));
        let text = r.render();
        assert!(
            text.contains(
                "== Root cause ==\nSERVER BUG on triton-0 (triton 2.51.0), seen by CLIENT \
                 clients-0 at "
            ),
            "{text}"
        );
        // The client's own fault stays the client's.
        let ours = run_failed_by_a_client("client");
        assert_eq!(server_bug(&ours), None);
        assert!(
            ours.render()
                .contains("== Root cause ==\nCLIENT clients-0 at ")
        );
    }
}
