//! Servers that already run (a server group's `endpoints`): the driver did not launch them, so
//! no launcher knows them; the driver checks them itself, over the protocols it was given.
//!
//! * At start, [`check_at_start`]: every address answers (gRPC `ServerLive` and `ServerReady`,
//!   HTTP `/v2/health/live` and `/v2/health/ready`, `/metrics`), with a few tries; what does not
//!   is bad input, named by its matrix field.
//! * Every poll, [`probe_live`]: one liveness probe, which `failfast` counts.
//! * Before load, [`repository_index`] over gRPC when no HTTP address is known (the preflight).
//!
//! gRPC goes through the generated client of `triton_proto` (the worker's too), on a connection
//! per call: these calls are a few a poll, and a fresh connection is what a new client sees.

use crate::matrix::ExternalServer;
use crate::plan::preflight::IndexEntry;
use std::time::Duration;
use stress_common::http;
use stress_common::tritonserver::{self, ProbeError};
use tonic::transport::{Channel, Endpoint};
use triton_proto::grpc_inference_service_client::GrpcInferenceServiceClient;

/// How many times the start check tries an address before it gives up on it.
pub const START_ATTEMPTS: u32 = 3;
/// How long one try of the start check may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two tries.
pub const START_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// An address of an external server that failed the start check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    /// Which address: `grpc`, `http` or `metrics`.
    pub port: &'static str,
    /// Its matrix field, e.g. `server_groups.staging.endpoints[0].grpc`.
    pub field: String,
    /// What failed, with the address.
    pub why: ProbeError,
}

/// Checks every address of `server` at start, each up to [`START_ATTEMPTS`] times; the error
/// names the address's field and what failed.
pub async fn check_at_start(server: &ExternalServer) -> Result<(), StartFailure> {
    let mut last = Ok(());
    for attempt in 1..=START_ATTEMPTS {
        last = check_once(server, START_TIMEOUT).await;
        if last.is_ok() {
            return Ok(());
        }
        if attempt < START_ATTEMPTS {
            tokio::time::sleep(START_RETRY_PAUSE).await;
        }
    }
    last
}

/// One try of every address: the first that fails.
async fn check_once(s: &ExternalServer, timeout: Duration) -> Result<(), StartFailure> {
    let failure = |port: &'static str, why: ProbeError| StartFailure {
        port,
        field: s.port_field(port),
        why,
    };
    if let Some(grpc) = &s.ports.grpc {
        let at = |why| failure("grpc", why);
        for (method, what) in [("ServerLive", "live"), ("ServerReady", "ready")] {
            grpc_flag(grpc, method, what, timeout).await.map_err(at)?;
        }
    }
    if let Some(address) = &s.ports.http {
        for path in ["/v2/health/live", "/v2/health/ready"] {
            if let Err(why) = http_ok(address, path, timeout).await {
                return Err(failure("http", why));
            }
        }
    }
    if let Some(address) = &s.ports.metrics
        && let Err(why) = http_ok(address, "/metrics", timeout).await
    {
        return Err(failure("metrics", why));
    }
    Ok(())
}

async fn http_ok(address: &str, path: &str, timeout: Duration) -> Result<(), ProbeError> {
    ProbeError::of_http(
        format!("HTTP {address}{path}"),
        http::get(&format!("http://{address}{path}"), timeout).await,
        timeout,
    )
}

/// One liveness probe of a running external server: HTTP `/v2/health/live` when its HTTP
/// address is known, else gRPC `ServerLive`.
pub async fn probe_live(server: &ExternalServer, timeout: Duration) -> Result<(), ProbeError> {
    if let Some(address) = &server.ports.http {
        return tritonserver::probe_live(address, timeout).await;
    }
    let Some(grpc) = &server.ports.grpc else {
        return Err(ProbeError::NoAddress {
            member: server.name.to_string(),
        });
    };
    grpc_flag(grpc, "ServerLive", "live", timeout).await
}

/// The repository index over gRPC (`RepositoryIndex`, every model, loaded or not), for a
/// server whose HTTP address is unknown.
pub async fn repository_index(
    grpc: &str,
    timeout: Duration,
) -> Result<Vec<IndexEntry>, ProbeError> {
    let endpoint = format!("gRPC {grpc} RepositoryIndex");
    let reply = within(&endpoint, timeout, async {
        let mut client = connect(&endpoint, grpc, timeout).await?;
        client
            .repository_index(triton_proto::RepositoryIndexRequest::default())
            .await
            .map_err(|s| refused(&endpoint, s))
    })
    .await?;
    Ok(reply
        .into_inner()
        .models
        .into_iter()
        .map(|m| IndexEntry {
            name: m.name,
            version: m.version,
            state: m.state,
            reason: m.reason,
        })
        .collect())
}

/// The server's name and version over gRPC (`ServerMetadata`), for a server whose HTTP address
/// is unknown.
pub async fn server_metadata(
    grpc: &str,
    timeout: Duration,
) -> Result<(String, String), ProbeError> {
    let endpoint = format!("gRPC {grpc} ServerMetadata");
    let reply = within(&endpoint, timeout, async {
        let mut client = connect(&endpoint, grpc, timeout).await?;
        client
            .server_metadata(triton_proto::ServerMetadataRequest {})
            .await
            .map_err(|s| refused(&endpoint, s))
    })
    .await?
    .into_inner();
    Ok((reply.name, reply.version))
}

/// `ServerLive` or `ServerReady` answered yes (`what`: `live` or `ready`), or why not.
async fn grpc_flag(
    address: &str,
    method: &str,
    what: &str,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let endpoint = format!("gRPC {address} {method}");
    let yes = within(&endpoint, timeout, async {
        let mut client = connect(&endpoint, address, timeout).await?;
        let reply = match method {
            "ServerLive" => client
                .server_live(triton_proto::ServerLiveRequest {})
                .await
                .map(|r| r.into_inner().live),
            "ServerReady" => client
                .server_ready(triton_proto::ServerReadyRequest {})
                .await
                .map(|r| r.into_inner().ready),
            other => unreachable!("no flag call {other}"),
        };
        reply.map_err(|s| refused(&endpoint, s))
    })
    .await?;
    if yes {
        Ok(())
    } else {
        Err(ProbeError::Refused {
            endpoint,
            answer: format!("not {what}"),
        })
    }
}

/// A client of Triton's gRPC service on a fresh HTTP/2 connection to `address` (`host:port`).
/// `endpoint` names the call in its errors.
async fn connect(
    endpoint: &str,
    address: &str,
    timeout: Duration,
) -> Result<GrpcInferenceServiceClient<Channel>, ProbeError> {
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| ProbeError::BadAddress {
            endpoint: endpoint.into(),
            cause: e.to_string(),
        })?
        .connect_timeout(timeout);
    let channel = channel.connect().await.map_err(|e| {
        // tonic's own text is "transport error"; the causes say what happened.
        let cause = stress_common::with_causes(e.to_string(), std::error::Error::source(&e));
        ProbeError::Unreachable {
            endpoint: endpoint.into(),
            cause,
        }
    })?;
    Ok(GrpcInferenceServiceClient::new(channel))
}

/// A gRPC status as a refusal: its code and message (a server that is not gRPC answers with no
/// status at all, which tonic reports as such).
fn refused(endpoint: &str, s: tonic::Status) -> ProbeError {
    ProbeError::Refused {
        endpoint: endpoint.into(),
        answer: format!("gRPC status {:?}: {}", s.code(), s.message()),
    }
}

/// `call` within `timeout`, or that it did not answer (a hung server accepts and never replies).
async fn within<T>(
    endpoint: &str,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, ProbeError>>,
) -> Result<T, ProbeError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(ProbeError::TimedOut {
                endpoint: endpoint.into(),
                timeout,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_that_refuses_fails_the_start_check_naming_its_field() {
        let port = tritonserver::free_port().unwrap();
        let address = format!("127.0.0.1:{port}");
        let server = ExternalServer {
            name: stress_common::contract::MemberName::new("staging-1"),
            group: "staging".into(),
            index: 1,
            ports: crate::matrix::EndpointPorts {
                grpc: Some(address.clone()),
                ..Default::default()
            },
            by_protocol: true,
        };
        let e = check_once(&server, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(
            (e.port, e.field.as_str()),
            ("grpc", "server_groups.staging.endpoints[1].grpc")
        );
        assert_eq!(e.why.label(), "unreachable", "{e:?}");
        let why = e.why.to_string();
        assert!(
            why.starts_with(&format!("gRPC {address} ServerLive did not answer: "))
                && why.contains("refused"),
            "{why}"
        );
        let e = probe_live(&server, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(e.label(), "unreachable");
        assert!(e.to_string().contains("refused"), "{e}");
    }
}
