//! The pre-flight check of a run's models: before any load, every server a client group
//! targets must have each model of the group's `models:` READY. Which needed models are missing
//! where is decided here, purely, from the servers' repository indexes (Triton's
//! `POST /v2/repository/index`); `run` fetches the indexes and acts on the answer.

use crate::plan::RunPlan;
use serde::Deserialize;
use std::collections::BTreeMap;
use stress_common::contract::MemberName;

/// One entry of a repository index.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    /// Empty for a model that was never loaded.
    #[serde(default)]
    pub version: String,
    /// `READY`, `UNAVAILABLE`, `LOADING`, ...; empty for a model that was never loaded.
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub reason: String,
}

/// A repository index that is not one.
#[derive(Debug, thiserror::Error)]
#[error("unreadable repository index: {0}")]
pub struct UnreadableIndex(#[from] serde_json::Error);

/// Parses the index a server answered.
pub fn parse_index(body: &str) -> Result<Vec<IndexEntry>, UnreadableIndex> {
    Ok(serde_json::from_str(body)?)
}

/// A model a client group needs: its name and, when the matrix pins one, its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeededModel {
    pub name: String,
    pub version: Option<u64>,
}

impl NeededModel {
    pub fn label(&self) -> String {
        match self.version {
            Some(v) => format!("{}@{v}", self.name),
            None => self.name.clone(),
        }
    }
}

/// What one client group needs of which servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupNeeds {
    pub group: String,
    pub servers: Vec<MemberName>,
    pub models: Vec<NeededModel>,
}

/// The needs of every client group with `models:` (the QA scenarios' models are checked by the
/// worker's own pre-flight, as before).
pub fn needs(plan: &RunPlan) -> Vec<GroupNeeds> {
    let mut needs: Vec<GroupNeeds> = Vec::new();
    for c in &plan.clients {
        if c.template.models.is_empty() || needs.iter().any(|n| n.group == c.group) {
            continue;
        }
        needs.push(GroupNeeds {
            group: c.group.clone(),
            servers: c.targets.clone(),
            models: c
                .template
                .models
                .iter()
                .map(|m| NeededModel {
                    name: m.name.clone(),
                    version: m.version,
                })
                .collect(),
        });
    }
    needs
}

/// A needed model that a server lacks or has not READY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingModel {
    pub group: String,
    pub server: MemberName,
    pub model: String,
    /// What the index says instead: absent, or its state and reason.
    pub why: String,
}

impl std::fmt::Display for MissingModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "client group {} needs model {}, but server {} {}",
            self.group, self.model, self.server, self.why
        )
    }
}

/// Every needed model that a target server lacks or has not READY, in the order of the groups,
/// their models and their servers. A server without an index (not asked) is not judged here.
pub fn missing_models(
    needs: &[GroupNeeds],
    indexes: &BTreeMap<MemberName, Vec<IndexEntry>>,
) -> Vec<MissingModel> {
    let mut missing = Vec::new();
    for need in needs {
        for model in &need.models {
            for server in &need.servers {
                let Some(index) = indexes.get(server) else {
                    continue;
                };
                if let Some(why) = why_not_ready(model, index) {
                    missing.push(MissingModel {
                        group: need.group.clone(),
                        server: server.clone(),
                        model: model.label(),
                        why,
                    });
                }
            }
        }
    }
    missing
}

/// None when the index has the model (at its version, if pinned) READY; else why not.
fn why_not_ready(model: &NeededModel, index: &[IndexEntry]) -> Option<String> {
    let version = model.version.map(|v| v.to_string());
    let entries: Vec<&IndexEntry> = index
        .iter()
        .filter(|e| e.name == model.name)
        .filter(|e| version.as_ref().is_none_or(|v| e.version == *v))
        .collect();
    if entries.iter().any(|e| e.state == "READY") {
        return None;
    }
    let Some(e) = entries.iter().find(|e| !e.state.is_empty()) else {
        let what = if version.is_some() && index.iter().any(|e| e.name == model.name) {
            "does not have that version in its repository"
        } else {
            "does not have it in its repository"
        };
        return Some(what.to_string());
    };
    let mut why = format!("has it {}", e.state);
    if !e.reason.is_empty() {
        why.push_str(&format!(" ({})", e.reason));
    }
    Some(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, version: &str, state: &str, reason: &str) -> IndexEntry {
        IndexEntry {
            name: name.into(),
            version: version.into(),
            state: state.into(),
            reason: reason.into(),
        }
    }

    fn need(group: &str, servers: &[&str], models: &[(&str, Option<u64>)]) -> GroupNeeds {
        GroupNeeds {
            group: group.into(),
            servers: servers.iter().map(|s| MemberName::new(*s)).collect(),
            models: models
                .iter()
                .map(|(n, v)| NeededModel {
                    name: n.to_string(),
                    version: *v,
                })
                .collect(),
        }
    }

    #[test]
    fn a_needed_model_must_be_ready_on_every_target_server() {
        let indexes: BTreeMap<MemberName, Vec<IndexEntry>> = [
            (
                "a-0".into(),
                vec![
                    entry("add_sub", "1", "READY", ""),
                    entry("dyn", "1", "READY", ""),
                    entry("dyn", "2", "UNAVAILABLE", "unloaded"),
                    entry("broken", "1", "UNAVAILABLE", "bad config"),
                    entry("idle", "", "", ""),
                ],
            ),
            ("a-1".into(), vec![entry("dyn", "2", "READY", "")]),
        ]
        .into();
        let needs = [
            need(
                "g",
                &["a-0", "a-1"],
                &[
                    ("add_sub", None),
                    ("dyn", Some(2)),
                    ("broken", None),
                    ("idle", None),
                    ("dyn", Some(3)),
                ],
            ),
            need("h", &["a-0"], &[("add_sub", None), ("dyn", Some(1))]),
        ];
        let got: Vec<String> = missing_models(&needs, &indexes)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "client group g needs model add_sub, but server a-1 does not have it in its repository",
                "client group g needs model dyn@2, but server a-0 has it UNAVAILABLE (unloaded)",
                "client group g needs model broken, but server a-0 has it UNAVAILABLE (bad config)",
                "client group g needs model broken, but server a-1 does not have it in its repository",
                "client group g needs model idle, but server a-0 does not have it in its repository",
                "client group g needs model idle, but server a-1 does not have it in its repository",
                "client group g needs model dyn@3, but server a-0 does not have that version in its repository",
                "client group g needs model dyn@3, but server a-1 does not have that version in its repository",
            ]
        );
        assert!(missing_models(&needs[1..], &indexes).is_empty());
        assert!(
            missing_models(&needs, &BTreeMap::new()).is_empty(),
            "servers not asked are not judged"
        );
    }

    #[test]
    fn needs_come_from_groups_with_models() {
        let m = crate::matrix::parse(
            r#"
version: 1
run: {name: p, duration: 10s}
server_templates:
  t: {tritonserver: {binary: auto}, model_repositories: [models]}
client_templates:
  qa: {worker: {binary: auto}, protocol: grpc}
  infer: {worker: {binary: auto}, protocol: http, models: [{name: add_sub}, {name: dyn, version: 2}]}
server_groups:
  a: {template: t, instances: 2}
client_groups:
  q: {template: qa, target: a, instances: 1}
  i: {template: infer, target: a, instances: 3}
"#,
            "p.yaml",
        )
        .unwrap();
        let plan = RunPlan::new(&m, "p-1".into(), None);
        assert_eq!(
            needs(&plan),
            [need(
                "i",
                &["a-0", "a-1"],
                &[("add_sub", None), ("dyn", Some(2))]
            )]
        );
    }

    #[test]
    fn triton_index_parses() {
        let body = r#"[{"name":"add_sub","version":"1","state":"READY"},{"name":"x"}]"#;
        let index = parse_index(body).unwrap();
        assert_eq!(index[0], entry("add_sub", "1", "READY", ""));
        assert_eq!(index[1], entry("x", "", "", ""));
        assert!(parse_index("{").is_err());
    }
}
