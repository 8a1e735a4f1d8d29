//! What changed between a run and the previous run of the same matrix name: the verdict, the
//! failure signatures new and gone, QPS and p99 per scenario, the servers' Triton versions, and
//! the matrix text line by line.
//! Pure: `driver serve` reads the two reports and matrix texts and renders what this returns.

use super::Report;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    pub run_id: String,
    pub verdict: String,
    pub started_at_ms: i64,
}

/// A signature in one run and not in the other.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignatureChange {
    pub signature: String,
    pub scenario: String,
    pub model: String,
    pub message: String,
    pub count: u64,
}

/// A scenario's load in both runs (None: the scenario did not run there).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioChange {
    pub scenario: String,
    pub qps: (Option<f64>, Option<f64>),
    pub p99_ms: (Option<f64>, Option<f64>),
    pub failures: (Option<u64>, Option<u64>),
}

/// What a server said it was in both runs (None: not in that run, or it did not say).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerChange {
    pub server: String,
    pub version: (Option<String>, Option<String>),
}

impl ServerChange {
    pub fn changed(&self) -> bool {
        self.version.0 != self.version.1
    }
}

/// A line of the matrix diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", content = "line", rename_all = "snake_case")]
pub enum Line {
    Same(String),
    Removed(String),
    Added(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDiff {
    pub run: Side,
    pub previous: Side,
    pub signatures_new: Vec<SignatureChange>,
    pub signatures_gone: Vec<SignatureChange>,
    pub scenarios: Vec<ScenarioChange>,
    /// Per server (of either run): the Triton version it said, before and now.
    pub servers: Vec<ServerChange>,
    /// The matrix as each run recorded it, line by line (empty when the texts are equal).
    pub matrix: Vec<Line>,
}

fn side(r: &Report) -> Side {
    Side {
        run_id: r.run_id.clone(),
        verdict: r.verdict.clone(),
        started_at_ms: r.started_at_ms,
    }
}

fn signatures(r: &Report) -> BTreeMap<&str, SignatureChange> {
    r.signatures
        .iter()
        .map(|s| {
            (
                s.signature.as_str(),
                SignatureChange {
                    signature: s.signature.clone(),
                    scenario: s.scenario.clone(),
                    model: s.model.clone(),
                    message: s.message.clone(),
                    count: s.count,
                },
            )
        })
        .collect()
}

/// `run` against `previous`, each with the matrix text it recorded.
pub fn diff(run: &Report, run_matrix: &str, previous: &Report, previous_matrix: &str) -> RunDiff {
    let (now, before) = (signatures(run), signatures(previous));
    let only = |a: &BTreeMap<&str, SignatureChange>, b: &BTreeMap<&str, SignatureChange>| {
        a.iter()
            .filter(|(k, _)| !b.contains_key(*k))
            .map(|(_, v)| v.clone())
            .collect()
    };
    let rows = |r: &Report| -> BTreeMap<String, (f64, f64, u64)> {
        r.scenarios
            .iter()
            .map(|s| {
                (
                    s.scenario.clone(),
                    (s.qps, s.p99_us as f64 / 1000.0, s.failures),
                )
            })
            .collect()
    };
    let (rows_now, rows_before) = (rows(run), rows(previous));
    let names: BTreeSet<&String> = rows_now.keys().chain(rows_before.keys()).collect();
    let scenarios = names
        .into_iter()
        .map(|name| {
            let (a, b) = (rows_before.get(name), rows_now.get(name));
            ScenarioChange {
                scenario: name.clone(),
                qps: (a.map(|r| r.0), b.map(|r| r.0)),
                p99_ms: (a.map(|r| r.1), b.map(|r| r.1)),
                failures: (a.map(|r| r.2), b.map(|r| r.2)),
            }
        })
        .collect();
    let versions = |r: &Report| -> BTreeMap<String, Option<String>> {
        r.servers
            .iter()
            .map(|s| (s.member_id.clone(), s.version.clone()))
            .collect()
    };
    let (versions_now, versions_before) = (versions(run), versions(previous));
    let servers = versions_now
        .keys()
        .chain(versions_before.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|server| ServerChange {
            server: server.clone(),
            version: (
                versions_before.get(server).cloned().flatten(),
                versions_now.get(server).cloned().flatten(),
            ),
        })
        .collect();
    RunDiff {
        run: side(run),
        previous: side(previous),
        signatures_new: only(&now, &before),
        signatures_gone: only(&before, &now),
        scenarios,
        servers,
        matrix: if run_matrix == previous_matrix {
            Vec::new()
        } else {
            lines(previous_matrix, run_matrix)
        },
    }
}

/// Past this many lines on a side, the matrix diff is the two texts whole (a longest common
/// subsequence costs lines × lines).
const MAX_DIFF_LINES: usize = 4000;

/// A line diff of `before` to `after` (longest common subsequence).
pub fn lines(before: &str, after: &str) -> Vec<Line> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    if a.len() > MAX_DIFF_LINES || b.len() > MAX_DIFF_LINES {
        return a
            .iter()
            .map(|l| Line::Removed(l.to_string()))
            .chain(b.iter().map(|l| Line::Added(l.to_string())))
            .collect();
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(Line::Same(a[i].to_string()));
            (i, j) = (i + 1, j + 1);
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            out.push(Line::Removed(a[i].to_string()));
            i += 1;
        } else {
            out.push(Line::Added(b[j].to_string()));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| Line::Removed(l.to_string())));
    out.extend(b[j..].iter().map(|l| Line::Added(l.to_string())));
    out
}

/// `before` to `after` as lines marked `-`, `+` or ` `.
pub fn unified(before: &str, after: &str) -> String {
    lines(before, after)
        .into_iter()
        .map(|l| match l {
            Line::Same(t) => format!("  {t}\n"),
            Line::Removed(t) => format!("- {t}\n"),
            Line::Added(t) => format!("+ {t}\n"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_diff_keeps_what_is_common_and_marks_the_rest() {
        use Line::*;
        let d = lines("a\nb\nc\nd\n", "a\nc\nd\ne\n");
        assert_eq!(
            d,
            [
                Same("a".into()),
                Removed("b".into()),
                Same("c".into()),
                Same("d".into()),
                Added("e".into())
            ]
        );
        assert_eq!(lines("", "x"), [Added("x".into())]);
        assert_eq!(lines("x", ""), [Removed("x".into())]);
        assert!(
            lines("same\n", "same\n")
                .iter()
                .all(|l| matches!(l, Same(_)))
        );
    }

    #[test]
    fn json_names_each_line_s_operation() {
        let json = serde_json::to_value(Line::Added("x: 1".into())).unwrap();
        assert_eq!(json, serde_json::json!({"op": "added", "line": "x: 1"}));
    }
}
