//! The forwarder of `run.otlp_forward`: `http://` or `https://`, the latter verified against the
//! system's roots (rustls-native-certs: `SSL_CERT_FILE` and `SSL_CERT_DIR` add a private CA).
//!
//! hyper with hyper-rustls on ring, not reqwest: reqwest's TLS would come with its features to
//! every crate of the workspace that uses reqwest (cargo unifies them), and each of their
//! clients would then need a crypto provider installed first; kube already brings these crates.

use super::{FORWARD_LIMIT, Failing, Forward, Queue, Shared, add};
use axum::body::Bytes;
use axum::http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;

type ForwardClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The forwarder: each queued body sent on to `url`, bounded.
pub(super) async fn forward_bodies(
    url: reqwest::Url,
    mut queue: Queue<Forward>,
    shared: Arc<Shared>,
) {
    let counts = &shared.counts;
    let client = forward_client(&url);
    let mut failing = Failing::default();
    while let Some(f) = queue.next().await {
        let limit = queue.limit(FORWARD_LIMIT);
        let error = match tokio::time::timeout(limit, send(&client, &url, f)).await {
            Ok(result) => result.err(),
            Err(_) => Some(format!("no answer within {limit:?}")),
        };
        let count = match error {
            None => &counts.forwarded,
            Some(_) => &counts.forward_dropped,
        };
        add(count, 1);
        failing.saw(&format!("OTLP receiver: forwarding to {url}"), error);
    }
}

/// One body sent; an error says why it did not arrive.
async fn send(client: &ForwardClient, url: &reqwest::Url, f: Forward) -> Result<(), String> {
    let mut request = Request::post(url.as_str()).header(header::CONTENT_TYPE, f.content_type);
    if f.gzip {
        request = request.header(header::CONTENT_ENCODING, "gzip");
    }
    let request = request.body(Full::new(f.body)).map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| {
        // hyper's own message is "client error (Connect)": the cause says what failed.
        let cause = std::error::Error::source(&e).map(|c| format!(": {c}"));
        format!("{e}{}", cause.unwrap_or_default())
    })?;
    let status = response.status();
    // Read to its end, so the connection goes back to the pool (an https target's handshake is
    // not paid again for every body).
    let _ = response.into_body().collect().await;
    match status {
        s if s.is_success() => Ok(()),
        s => Err(format!("answered {s}")),
    }
}

/// A client for `http://` and `https://`. Without any root certificate on the machine (a bare
/// container), `https://` targets fail their handshakes, counted, and `http://` ones work.
fn forward_client(url: &reqwest::Url) -> ForwardClient {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider.clone())
        .unwrap_or_else(|e| {
            if url.scheme() == "https" {
                tracing::warn!("OTLP receiver: no root certificates for {url}: {e}");
            }
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports rustls' default protocol versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            HttpsConnectorBuilder::new().with_tls_config(config)
        });
    let connector = builder.https_or_http().enable_http1().build();
    Client::builder(TokioExecutor::new()).build(connector)
}
