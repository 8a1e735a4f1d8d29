//! SLO rules judged by the running driver: live (`abort_on_fail` rules past their delay) and
//! at the end, on the workers' counts read from the store.

use super::driver::Driver;
use super::{END_SAVE_LIMIT, STORE_CALL_LIMIT};
use crate::judge::slo;
use crate::matrix::slo::Rule;
use std::collections::BTreeMap;
use std::time::Duration;
use stress_common::contract::{MemberName, RunId};
use stress_common::histogram::LatencyHistogram;
use stress_common::store::{Store, StoreError, within as bounded};

impl Driver<'_> {
    /// The `abort_on_fail` SLO rules past their delay, judged on the counts so far: the first
    /// breach (a rule with nothing measured yet is not judged live). On a breach every rule's
    /// verdict is saved as of now.
    pub(super) async fn slo_live(&mut self, started_ms: i64, elapsed: Duration) -> Option<String> {
        let due: Vec<&Rule> = self
            .plan
            .slo
            .iter()
            .filter(|r| r.abort_on_fail && elapsed >= r.delay)
            .collect();
        if due.is_empty() {
            return None;
        }
        let rows = match bounded(STORE_CALL_LIMIT, slo_rows(self.store, &self.plan.run_id)).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("SLO rules not checked this poll: {e}");
                return None;
            }
        };
        let groups = self.plan.client_groups();
        let window = (started_ms, stress_common::now_ms());
        let breach = due.iter().find_map(|r| {
            let o = r.judge(&rows, group_members(&groups, r).as_deref(), window);
            (o.observed.is_some() && !o.ok).then_some(o)
        })?;
        self.judge_slo(started_ms).await;
        slo::first_breach(&[breach])
    }

    /// Every SLO rule judged on the counts so far over the run since the workers started, and
    /// saved in the store (the report reads them there).
    pub(super) async fn judge_slo(&mut self, started_ms: i64) -> Vec<slo::Outcome> {
        if self.plan.slo.is_empty() {
            return Vec::new();
        }
        // Counts that cannot be read are not a breach: the rules go unjudged (the report
        // says the store's data is missing).
        let rows = match bounded(END_SAVE_LIMIT, slo_rows(self.store, &self.plan.run_id)).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("SLO rules not judged: the counts cannot be read: {e}");
                return Vec::new();
            }
        };
        let groups = self.plan.client_groups();
        let window = (started_ms, stress_common::now_ms());
        let outcomes: Vec<slo::Outcome> = self
            .plan
            .slo
            .iter()
            .map(|r| r.judge(&rows, group_members(&groups, r).as_deref(), window))
            .collect();
        let keyed: Vec<(String, slo::Outcome)> = outcomes
            .iter()
            .enumerate()
            .map(|(position, o)| (format!("{position:06}"), o.clone()))
            .collect();
        if let Err(e) = bounded(
            STORE_CALL_LIMIT,
            self.store.replace_documents(&self.plan.run_id, &keyed),
        )
        .await
        {
            tracing::warn!("SLO verdicts not saved: {e}");
        }
        outcomes
    }
}

/// A group rule's members (None: a run-level rule, every client).
pub(super) fn group_members(
    groups: &BTreeMap<String, Vec<MemberName>>,
    rule: &Rule,
) -> Option<Vec<String>> {
    let g = rule.group.as_ref()?;
    Some(
        groups
            .get(g)
            .map(|m| m.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
    )
}

/// The workers' cumulative counts as the SLO rules read them: per scenario, and per model.
pub(super) async fn slo_rows(store: &Store, run_id: &RunId) -> Result<Vec<slo::Row>, StoreError> {
    let decode = |text: &str| LatencyHistogram::decode(text).unwrap_or_default();
    let mut rows: Vec<slo::Row> = store
        .scenario_counts(run_id)
        .await?
        .into_iter()
        .map(|(member, c)| slo::Row {
            latency: decode(&c.latency_histogram),
            member,
            scenario: c.scenario,
            model: None,
            tests: c.tests,
            failures: c.failures,
            requests: c.requests,
        })
        .collect();
    rows.extend(
        store
            .model_counts(run_id)
            .await?
            .into_iter()
            .map(|(member, _, c)| slo::Row {
                latency: decode(&c.latency_histogram),
                member,
                scenario: c.scenario,
                model: Some(c.model),
                tests: c.tests,
                failures: c.failures,
                requests: c.requests,
            }),
    );
    Ok(rows)
}
