//! The run's traced requests (issue 51) around its `Driver`: the OTLP receiver started when
//! the plan needs one ([`crate::plan::spans::needs_receiver`]), each exporting server pointed
//! at it at launch (the receiver sends the clients' spans on to `run.otlp_forward` as they are
//! recorded), and at the end what the receiver did saved for the report.

use super::otlp::OtlpReceiver;
use crate::launcher::Launcher;
use crate::matrix::{Matrix, ServerMember};
use crate::plan::RunPlan;
use crate::plan::spans::{exports_to_run, needs_receiver};
use std::borrow::Cow;
use stress_common::contract::RunId;
use stress_common::store::Store;

/// Starts the run's receiver where the launcher's servers reach it, when the plan needs one;
/// a launcher that knows no such address gets none, and says so.
pub(super) async fn start_receiver(
    plan: &RunPlan,
    matrix: &Matrix,
    launcher: &dyn Launcher,
    store: &Store,
) -> Option<OtlpReceiver> {
    if !needs_receiver(&plan.servers, &plan.clients) {
        return None;
    }
    let Some(bind) = launcher
        .span_receiver_host()
        .map(|host| std::net::SocketAddr::new(host, 0))
    else {
        tracing::warn!(
            "the {} launcher knows no address of the driver that its servers reach (set {}): the traced requests' server spans are not received",
            launcher.name(),
            crate::launcher::kube::DRIVER_ADDRESS_ENV
        );
        return None;
    };
    let forward = matrix.run.otlp_forward.as_ref().map(|u| u.url().clone());
    match OtlpReceiver::start(bind, store.clone(), plan.run_id.clone(), forward).await {
        Ok(receiver) => {
            tracing::info!(
                "traced requests: the run's OTLP/HTTP receiver is http://{}/v1/traces (a collector may forward the spans of servers the run does not launch there)",
                receiver.addr()
            );
            Some(receiver)
        }
        Err(e) => {
            tracing::warn!("no OTLP receiver for the run's spans ({bind}): {e}");
            None
        }
    }
}

/// The server as launched: one that exports its spans to the run gets the receiver's URL for
/// it (without a receiver it exports nowhere: its trace settings are dropped).
pub(super) fn pointed_at<'s>(
    server: &'s ServerMember,
    receiver: Option<&OtlpReceiver>,
) -> Cow<'s, ServerMember> {
    if !exports_to_run(server) {
        return Cow::Borrowed(server);
    }
    let mut pointed = server.clone();
    match receiver {
        Some(r) => {
            let trace = pointed.template.trace.as_mut().expect("exports_to_run");
            trace.url = Some(r.url_for(server.name.as_str()));
        }
        None => pointed.template.trace = None,
    }
    Cow::Owned(pointed)
}

/// The end: the receiver stopped (the clients' spans not sent on yet go now) and what it did
/// saved for the report.
pub(super) async fn finish_receiver(receiver: OtlpReceiver, store: &Store, run_id: &RunId) {
    let counts = receiver.stop().await;
    tracing::info!(
        "OTLP receiver: {} span(s) received, {} stored, {} dropped, {} bad bodies; {} body(ies) forwarded, {} not",
        counts.spans_received,
        counts.spans_stored,
        counts.spans_dropped,
        counts.bad_bodies,
        counts.forwarded,
        counts.forward_dropped
    );
    if let Err(e) = store.save_document(run_id, "", &counts).await {
        tracing::warn!("the OTLP receiver's counts not saved: {e}");
    }
}
