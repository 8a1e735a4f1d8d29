//! The `Driver`: one run in progress, and its steps: record events, check models and external
//! servers before the load, stop members and fail the run on a verdict.

use super::finish::external_location;
use super::progress::Progress;
use super::{
    ACTIVITY_LOOK, DRIVER_MEMBER, FAILURE_SCRAPE_BUDGET, FAILURE_STOP_GRACE, FINAL_REPORT_GRACE,
    INDEX_TIMEOUT, STORE_CALL_LIMIT, Verdict, final_reports_in,
};
use crate::judge::classify::ServerEnd;
use crate::judge::failfast::{self, Cause};
use crate::launcher::external;
use crate::launcher::{LaunchError, Launcher};
use crate::matrix::Matrix;
use crate::plan::RunPlan;
use crate::plan::ServerEndpoint;
use crate::plan::preflight;
use crate::report::ServerIdentity;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use stress_common::contract::MemberName;
use stress_common::http;
use stress_common::status::{DriverFailure, EventKind, Stopping};
use stress_common::store::{Member, Store, within as bounded};
use tokio_util::sync::CancellationToken;

/// How long a suspected server gets to answer its liveness probe on the failure path.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Every server's addresses by name, the launched ones' and the external ones'.
pub(super) type Endpoints = BTreeMap<String, ServerEndpoint>;

/// One run in progress: launches the plan, feeds each poll's observations to the fail-fast
/// rules and acts on their verdict. The decisions are in [`failfast`]; this only does I/O.
pub(super) struct Driver<'a> {
    pub(super) store: &'a Store,
    pub(super) launcher: &'a mut dyn Launcher,
    pub(super) matrix: &'a Matrix,
    pub(super) plan: &'a RunPlan,
    pub(super) store_url: &'a str,
    pub(super) perf_analyzer: Option<&'a str>,
    pub(super) progress: &'a mut Progress,
    pub(super) cancel: &'a CancellationToken,
    /// The judgement of every failure record the workers write.
    pub(super) verdicts: crate::judge::verdicts::Verdicts,
    /// The run's OTLP receiver, when servers export spans to it.
    pub(super) spans: Option<&'a super::otlp::OtlpReceiver>,
}

impl Driver<'_> {
    /// What a silent worker did over [`ACTIVITY_LOOK`]: its CPU then and after.
    async fn activity_of(&mut self, member: &str) -> Option<failfast::Activity> {
        let before = self.launcher.cpu_use(member).await?;
        let started = tokio::time::Instant::now();
        tokio::time::sleep(ACTIVITY_LOOK).await;
        let after = self.launcher.cpu_use(member).await?;
        Some(failfast::Activity::between(
            before,
            after,
            started.elapsed(),
        ))
    }

    pub(super) async fn record(&self, member: &str, kind: EventKind, details: &str) {
        if let Err(e) = bounded(
            STORE_CALL_LIMIT,
            self.store
                .record_event(&self.plan.run_id, &MemberName::new(member), kind, details),
        )
        .await
        {
            tracing::warn!("event of {member} not recorded: {e}");
        }
    }

    pub(super) async fn update_member(&self, member: Member) {
        if let Err(e) = bounded(STORE_CALL_LIMIT, self.store.upsert_member(&member)).await {
            tracing::warn!("member {} not updated: {e}", member.member_id);
        }
    }

    /// A launch that failed: recorded and final.
    pub(super) async fn launch_failed(&self, e: LaunchError) -> Verdict {
        let (member, reason) = match e {
            LaunchError::Member { member, reason } | LaunchError::Blocked { member, reason } => {
                (member, reason)
            }
            LaunchError::Setup(reason) => {
                let details = DriverFailure::SetUp.details(&reason);
                self.record(DRIVER_MEMBER, EventKind::Failure, &details)
                    .await;
                return Verdict::Fail {
                    member: DRIVER_MEMBER.to_string(),
                    reason,
                };
            }
        };
        self.record(&member, EventKind::Failure, &reason).await;
        Verdict::Fail { member, reason }
    }

    /// Marks when the driver began to stop the run, before any worker is told: failures after
    /// it happened during the stop (see [`crate::judge::rootcause`]), and a worker told to stop reads
    /// it to know whether its tests in flight may finish.
    pub(super) async fn record_stopping(&self, stop: Stopping) {
        self.record(DRIVER_MEMBER, EventKind::Running, &stop.details())
            .await;
    }

    /// A failed run's first steps after the verdict: the workers stop (SIGTERM: they flush
    /// their final counts) and the servers still up give a last sample, so the report's
    /// reconciliation compares the same moment on both sides; the rest of the failure path
    /// (`stop_all`) then ends the servers. Bounded: a hung server's scrape waits no longer.
    pub(super) async fn wind_down(&mut self, sampler: crate::run::sampler::ServerSampler) {
        let clients = self.plan.client_names();
        let stop = self.launcher.stop_clients(FAILURE_STOP_GRACE);
        tokio::pin!(stop);
        tokio::select! {
            _ = &mut stop => tracing::info!("workers stopped; the servers' last sample"),
            _ = final_reports_in(self.store, &self.plan.run_id, clients) => {
                // Their counts are in: their processes or pods get a moment to be seen
                // ending, not the seconds a kubelet takes for a node's worth of pods.
                let _ = tokio::time::timeout(FINAL_REPORT_GRACE, &mut stop).await;
                tracing::info!("every worker's final report is in; the servers' last sample");
            }
        }
        if tokio::time::timeout(FAILURE_SCRAPE_BUDGET, sampler.finish())
            .await
            .is_err()
        {
            tracing::info!("the servers' last sample not taken within {FAILURE_SCRAPE_BUDGET:?}");
        }
    }

    /// A rule fired: probe a failed client's servers, blame, record, fail. `endpoints` name
    /// the server that held a client's calls unanswered.
    pub(super) async fn fail(
        &mut self,
        cause: Cause,
        endpoints: &BTreeMap<String, ServerEndpoint>,
    ) -> Verdict {
        let targets = self.plan.targets_of(cause.member());
        let holder = match &cause {
            Cause::Unanswered { server, .. } => failfast::server_at(server, targets, endpoints),
            _ => None,
        };
        let mut probes = Vec::new();
        if failfast::needs_probe(&cause, &self.plan.client_names()) {
            // Calls held unanswered: the holder's probe says whether it is up at all.
            let probed = match holder {
                Some(h) => std::slice::from_ref(h),
                None => targets,
            };
            for server in probed {
                let r = match self.plan.external(server) {
                    Some(e) => external::probe_live(e, PROBE_TIMEOUT).await,
                    None => self.launcher.server_live(server, PROBE_TIMEOUT).await,
                };
                let dead = r.is_err();
                probes.push((server.clone(), r));
                if dead {
                    break;
                }
            }
        }
        for (server, probe) in &probes {
            if let (Err(why), Some(ep)) = (probe, endpoints.get(server.as_str())) {
                self.verdicts.server_ended(ServerEnd {
                    member: server.to_string(),
                    addresses: ep.addresses(),
                    at_ms: stress_common::now_ms(),
                    reason: format!("failed its liveness probe: {why}"),
                });
            }
        }
        let mut activity = None;
        if let Cause::StaleHeartbeat { member, .. } = &cause {
            // Bounded: a pod's is read through the API server, which may be what hangs.
            let look = self.activity_of(member);
            activity = tokio::time::timeout(ACTIVITY_LOOK + 2 * PROBE_TIMEOUT, look)
                .await
                .ok()
                .flatten();
        }
        // The holder's own count of what waits in it (bounded: a hung server's metrics
        // endpoint may hang too).
        let mut pending = None;
        if let Some(h) = holder {
            let text = tokio::time::timeout(
                PROBE_TIMEOUT,
                super::finish::server_metrics_text(self.launcher, self.plan, h),
            )
            .await;
            pending = text
                .ok()
                .flatten()
                .map(|t| stress_common::triton_metrics::parse(&t));
        }
        let blame = failfast::with_activity(
            failfast::attribute(&cause, &probes, holder),
            &cause,
            activity,
        );
        let blame = failfast::with_pending(blame, &cause, pending.as_deref());
        if blame.record {
            self.record(&blame.member, EventKind::Failure, &blame.reason)
                .await;
        }
        self.record_stopping(Stopping::Failed {
            member: blame.member.clone(),
        })
        .await;
        Verdict::Fail {
            member: blame.member,
            reason: blame.reason,
        }
    }

    /// Before any load: every model a client group's `models:` names must be READY on each of
    /// its target servers, as their repository indexes say; else the run stops as bad input
    /// naming each model and server. A server that cannot give its index fails the run.
    pub(super) async fn check_models(
        &mut self,
        endpoints: &BTreeMap<String, ServerEndpoint>,
    ) -> Result<(), Verdict> {
        let needs = preflight::needs(self.plan);
        let servers: BTreeSet<&MemberName> = needs.iter().flat_map(|n| &n.servers).collect();
        let mut indexes = BTreeMap::new();
        for server in servers {
            let Some(ep) = endpoints.get(server.as_str()) else {
                continue;
            };
            let url = format!("http://{}/v2/repository/index", ep.http);
            // `{}`: every model, loaded or not, so a model that failed to load is named with
            // its state and reason rather than as absent.
            let index = if ep.http.is_empty() {
                // An external server given by its gRPC address only.
                external::repository_index(&ep.grpc, INDEX_TIMEOUT)
                    .await
                    .map_err(|e| e.to_string())
            } else {
                match http::post_json(&url, &serde_json::json!({}), INDEX_TIMEOUT).await {
                    Ok(r) if r.is_ok() => {
                        preflight::parse_index(&r.body).map_err(|e| e.to_string())
                    }
                    Ok(r) => Err(format!(
                        "repository index: HTTP {}: {}",
                        r.status,
                        r.body.trim()
                    )),
                    Err(e) => Err(format!("repository index: {e}")),
                }
            };
            match index {
                Ok(index) => {
                    indexes.insert(server.clone(), index);
                }
                Err(reason) => {
                    self.record(server, EventKind::Failure, &reason).await;
                    return Err(Verdict::Fail {
                        member: server.to_string(),
                        reason,
                    });
                }
            }
        }
        let missing = preflight::missing_models(&needs, &indexes);
        if missing.is_empty() {
            return Ok(());
        }
        let reason = missing
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let details = DriverFailure::Refused.details(&reason);
        self.record(DRIVER_MEMBER, EventKind::Failure, &details)
            .await;
        Err(Verdict::BadInput(reason))
    }

    /// Asks every server what it is (`GET /v2`, or `ServerMetadata` over gRPC for a server
    /// known by its gRPC address only) and keeps the answers in the store: the report and a
    /// run's diff name the Triton version that served. No answer only leaves it unnamed.
    pub(super) async fn record_identities(&mut self, endpoints: &BTreeMap<String, ServerEndpoint>) {
        let asks = endpoints.iter().map(|(name, ep)| async move {
            let answer = if ep.http.is_empty() {
                external::server_metadata(&ep.grpc, INDEX_TIMEOUT)
                    .await
                    .map(|(name, version)| ServerIdentity { name, version })
                    .map_err(|e| e.to_string())
            } else {
                match http::get(&format!("http://{}/v2", ep.http), INDEX_TIMEOUT).await {
                    Ok(r) if r.is_ok() => serde_json::from_str::<ServerIdentity>(&r.body)
                        .map_err(|e| format!("GET /v2: {e}")),
                    Ok(r) => Err(format!("GET /v2: HTTP {}", r.status)),
                    Err(e) => Err(format!("GET /v2: {e}")),
                }
            };
            (name, answer)
        });
        for (name, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(identity) => {
                    let saved = bounded(
                        STORE_CALL_LIMIT,
                        self.store.save_document(&self.plan.run_id, name, &identity),
                    )
                    .await;
                    if let Err(e) = saved {
                        tracing::warn!("{name}'s version not recorded: {e}");
                    }
                }
                Err(e) => tracing::warn!("{name} did not say its version: {e}"),
            }
        }
    }

    /// Before anything is launched: every external server answers at each of its addresses,
    /// else the run stops as bad input naming each that does not (file:line, field, address,
    /// what failed).
    pub(super) async fn check_externals(&mut self) -> Result<(), Verdict> {
        let plan = self.plan;
        if plan.externals.is_empty() {
            return Ok(());
        }
        for e in &plan.externals {
            let details = format!("checking {}", external_location(e));
            self.record(&e.name, EventKind::Starting, &details).await;
        }
        self.progress.show(&format!(
            "checking {} external server(s)",
            plan.externals.len()
        ));
        let checks = plan.externals.iter().map(external::check_at_start);
        let results = tokio::select! {
            r = futures::future::join_all(checks) => r,
            _ = self.cancel.cancelled() => return Err(Verdict::Aborted("interrupted while checking external servers".into())),
        };
        let mut failures = Vec::new();
        for (e, result) in plan.externals.iter().zip(results) {
            match result {
                Ok(()) => {
                    let details = format!("live and ready ({})", external_location(e));
                    self.record(&e.name, EventKind::Running, &details).await;
                }
                Err(f) => {
                    let port = e.by_protocol.then_some(f.port);
                    let at = self
                        .matrix
                        .locate_endpoint(&e.group, e.index, port)
                        .map(|at| format!("{at}: "))
                        .unwrap_or_default();
                    let reason = format!(
                        "{at}{}: existing server {} does not answer: {} ({} tries)",
                        f.field,
                        e.name,
                        f.why,
                        external::START_ATTEMPTS
                    );
                    self.record(&e.name, EventKind::Failure, &reason).await;
                    failures.push(reason);
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Verdict::BadInput(failures.join("; ")))
        }
    }
}
