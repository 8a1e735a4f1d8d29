//! The run's OTLP/HTTP receiver (`driver::run::otlp`) on a real socket and a real store: both
//! encodings of Triton 2.51's real exports stored per member, a bad body refused and counted, a
//! failing or paused store never slowing the exporter (its spans dropped and counted), and
//! `otlp_forward` sending every body on, with the clients' spans of the same traces.

use axum::body::Bytes;
use axum::http::HeaderMap;
use driver::run::otlp::{
    CLIENT_SPANS_EVERY, OtlpReceiver, ReceiverCounts, STOP_LIMIT, STORE_QUEUE, server_spans,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stress_common::contract::RunId;
use stress_common::status::{StatusSink, WorkerSnapshot};
use stress_common::store::Store;
use stress_common::trace::{ClientSpan, ServerSpan};

const HTTP_EXPORT: &str =
    include_str!("../../common/src/testdata/tritonserver-2.51-otlp-http.json");
const GRPC_EXPORT: &str =
    include_str!("../../common/src/testdata/tritonserver-2.51-otlp-grpc.json");
const JSON: &str = "application/json";
const PROTOBUF: &str = "application/x-protobuf";
/// An exporter's request is answered well within this, whatever the store does.
const FAST: Duration = Duration::from_secs(1);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn request(json: &str) -> ExportTraceServiceRequest {
    serde_json::from_str(json).unwrap()
}

async fn sqlite() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::sqlite_url(&dir.path().join("store.sqlite")))
        .await
        .unwrap();
    (dir, store)
}

/// An answer: status, content type, body, and how long it took.
struct Answer {
    status: u16,
    content_type: String,
    body: Bytes,
    took: Duration,
}

async fn post(url: &str, content_type: &str, body: impl Into<reqwest::Body>) -> Answer {
    let start = Instant::now();
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = response.bytes().await.unwrap();
    Answer {
        status,
        content_type,
        body,
        took: start.elapsed(),
    }
}

/// A traced request whose span is the parent of a server's first span of `trace_id`.
fn client_span(trace_id: &str, span_id: &str) -> ClientSpan {
    ClientSpan {
        trace_id: trace_id.into(),
        span_id: span_id.into(),
        scenario: "Infer".into(),
        model: "add_sub".into(),
        server: "127.0.0.1:8000".into(),
        intended_ns: 1,
        sent_ns: 2,
        answered_ns: 3,
        received_ns: None,
        ok: true,
    }
}

/// The InferRequest span's trace and parent (the client's span) of an export.
fn client_of(export: &ExportTraceServiceRequest) -> ClientSpan {
    let spans = server_spans("", export);
    let first = spans.iter().find(|s| s.name == "InferRequest").unwrap();
    client_span(&first.trace_id, &first.parent_span_id)
}

#[tokio::test]
async fn both_encodings_are_stored_as_the_member_that_exported_them() {
    let (_dir, store) = sqlite().await;
    let run_id = RunId::new("otlp-stored");
    let receiver = OtlpReceiver::start(local(), store.clone(), run_id.clone(), None)
        .await
        .unwrap();
    let (http, grpc) = (request(HTTP_EXPORT), request(GRPC_EXPORT));
    let json = post(&receiver.url_for("s0"), JSON, HTTP_EXPORT).await;
    assert_eq!((json.status, json.content_type.as_str()), (200, JSON));
    let _: ExportTraceServiceResponse = serde_json::from_slice(&json.body).unwrap();
    let protobuf = post(&receiver.url_for("s1"), PROTOBUF, grpc.encode_to_vec()).await;
    assert_eq!(
        (protobuf.status, protobuf.content_type.as_str()),
        (200, PROTOBUF)
    );
    ExportTraceServiceResponse::decode(protobuf.body).unwrap();
    // A user's collector forwards another export (gRPC's, its trace made another).
    let mut external = grpc.clone();
    for span in &mut external.resource_spans[0].scope_spans[0].spans {
        span.trace_id[0] = 0x2a;
    }
    let collector = format!("http://{}/v1/traces", receiver.addr());
    assert_eq!(
        post(&collector, PROTOBUF, external.encode_to_vec())
            .await
            .status,
        200
    );
    let counts = receiver.stop().await;
    let stored = ReceiverCounts {
        bodies: 3,
        spans_received: 9,
        spans_stored: 9,
        ..ReceiverCounts::default()
    };
    assert_eq!(counts, stored);

    // The traces' client spans, so the tail read returns their server spans.
    let spans = [&http, &grpc, &external].map(client_of).to_vec();
    let snapshot = WorkerSnapshot {
        client_spans: spans,
        ..WorkerSnapshot::default()
    };
    store
        .sink(run_id.clone(), "client-0")
        .snapshot(&snapshot)
        .await
        .unwrap();
    let tail = store.traced_tail(&run_id, 1.0).await.unwrap();
    let of = |server: &str| -> Vec<ServerSpan> {
        let spans = tail.server.iter().filter(|s| s.server == server);
        spans.cloned().collect()
    };
    assert_eq!(of("s0"), server_spans("s0", &http));
    assert_eq!(of("s1"), server_spans("s1", &grpc));
    assert_eq!(of("external"), server_spans("external", &external));
    store.close().await;
}

#[tokio::test]
async fn a_body_that_is_not_otlp_is_refused_with_400_and_counted() {
    let (_dir, store) = sqlite().await;
    let run_id = RunId::new("otlp-bad");
    let receiver = OtlpReceiver::start(local(), store.clone(), run_id.clone(), None)
        .await
        .unwrap();
    let answer = post(&receiver.url_for("s0"), JSON, "{\"resourceSpans\": 7}").await;
    assert_eq!(answer.status, 400);
    let counts = receiver.stop().await;
    let refused = ReceiverCounts {
        bodies: 1,
        bad_bodies: 1,
        ..ReceiverCounts::default()
    };
    assert_eq!(counts, refused);
    assert_eq!(store.server_span_count(&run_id).await.unwrap(), 0);
}

#[tokio::test]
async fn a_failing_store_drops_the_spans_and_counts_them_and_the_exporter_never_sees_it() {
    let (_dir, store) = sqlite().await;
    let receiver = OtlpReceiver::start(local(), store.clone(), RunId::new("otlp-closed"), None)
        .await
        .unwrap();
    store.close().await;
    for _ in 0..5 {
        let answer = post(&receiver.url_for("s0"), JSON, HTTP_EXPORT).await;
        assert_eq!(answer.status, 200);
        assert!(answer.took < FAST, "{:?}", answer.took);
    }
    let counts = receiver.stop().await;
    assert_eq!((counts.spans_received, counts.spans_dropped), (15, 15));
    assert_eq!(counts.spans_stored, 0);
}

/// A store that does not answer (Postgres stopped with SIGSTOP): more bodies than the queue
/// holds are all answered at once, every span is dropped and counted, and the stop's flush
/// gives up in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_does_not_answer_never_holds_the_exporter_or_the_stop() {
    use stress_common::store::testing::TestPostgres;
    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    let TestPostgres::Throwaway(pg) = pg else {
        eprintln!("SKIPPED: pausing the store needs a Postgres of its own (TEST_DATABASE_URL)");
        return;
    };
    let store = Store::connect(pg.url()).await.unwrap();
    let run_id = RunId::new("otlp-paused");
    let receiver = OtlpReceiver::start(local(), store.clone(), run_id.clone(), None)
        .await
        .unwrap();
    pg.pause().unwrap();
    let bodies = STORE_QUEUE + 150;
    let url = receiver.url_for("s0");
    let mut slowest = Duration::ZERO;
    for _ in 0..bodies {
        let answer = post(&url, JSON, HTTP_EXPORT).await;
        assert_eq!(answer.status, 200);
        slowest = slowest.max(answer.took);
    }
    assert!(slowest < FAST, "an export took {slowest:?}");
    let start = Instant::now();
    let counts = receiver.stop().await;
    let took = start.elapsed();
    pg.resume().unwrap();
    assert!(took < STOP_LIMIT + Duration::from_secs(1), "{took:?}");
    let spans = 3 * bodies as u64;
    assert_eq!(
        (counts.spans_received, counts.spans_dropped),
        (spans, spans)
    );
    assert_eq!(store.server_span_count(&run_id).await.unwrap(), 0);
}

/// A forward target that keeps what it is sent: (content type, body).
async fn collector() -> (String, Arc<Mutex<Vec<(String, Bytes)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| async move {
            let content_type = headers["content-type"].to_str().unwrap().to_string();
            kept.lock().unwrap().push((content_type, body));
            ""
        }),
    );
    let listener = tokio::net::TcpListener::bind(local()).await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// `spans` recorded by a worker of `run_id`, as its snapshot writes them.
async fn record_client_spans(store: &Store, run_id: &RunId, spans: Vec<ClientSpan>) {
    let snapshot = WorkerSnapshot {
        client_spans: spans,
        ..WorkerSnapshot::default()
    };
    let sink = store.sink(run_id.clone(), "client-0");
    sink.snapshot(&snapshot).await.unwrap();
}

/// The (trace id, span id, name) of each span of a forwarded body.
fn forwarded_ids(body: &Bytes) -> Vec<(String, String, String)> {
    let forwarded = ExportTraceServiceRequest::decode(body.clone()).unwrap();
    server_spans("", &forwarded)
        .into_iter()
        .map(|s| (s.trace_id, s.span_id, s.name))
        .collect()
}

/// Every export body goes on as it came; the clients' spans of the same traces go on as the
/// workers record them (the first while the receiver runs, within a pass of
/// `CLIENT_SPANS_EVERY`), the last ones at the stop.
#[tokio::test]
async fn every_body_is_forwarded_as_it_came_and_the_clients_spans_as_they_are_recorded() {
    let (_dir, store) = sqlite().await;
    let (url, seen) = collector().await;
    let forward = Some(url.parse().unwrap());
    let run_id = RunId::new("otlp-forward");
    let receiver = OtlpReceiver::start(local(), store.clone(), run_id.clone(), forward)
        .await
        .unwrap();
    let grpc = request(GRPC_EXPORT).encode_to_vec();
    post(&receiver.url_for("s0"), JSON, HTTP_EXPORT).await;
    post(&receiver.url_for("s1"), PROTOBUF, grpc.clone()).await;
    let [first, last] = [request(HTTP_EXPORT), request(GRPC_EXPORT)].map(|r| client_of(&r));
    record_client_spans(&store, &run_id, vec![first.clone()]).await;
    let deadline = Instant::now() + CLIENT_SPANS_EVERY * 3;
    while seen.lock().unwrap().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the client span was not sent on while the receiver ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    record_client_spans(&store, &run_id, vec![last.clone()]).await;
    let counts = receiver.stop().await;
    assert_eq!((counts.forwarded, counts.forward_dropped), (4, 0));

    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], (JSON.to_string(), Bytes::from(HTTP_EXPORT)));
    assert_eq!(seen[1], (PROTOBUF.to_string(), Bytes::from(grpc)));
    let name = "infer add_sub".to_string();
    for (body, client) in seen[2..].iter().zip([first, last]) {
        assert_eq!(body.0, PROTOBUF);
        assert_eq!(
            forwarded_ids(&body.1),
            [(client.trace_id, client.span_id, name.clone())]
        );
    }
}

#[tokio::test]
async fn a_forward_target_that_is_down_costs_the_exporter_nothing_and_is_counted() {
    let (_dir, store) = sqlite().await;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind(local())
        .unwrap()
        .local_addr()
        .unwrap();
    let forward = Some(format!("http://{closed}/v1/traces").parse().unwrap());
    let run_id = RunId::new("otlp-forward-down");
    let receiver = OtlpReceiver::start(local(), store.clone(), run_id.clone(), forward)
        .await
        .unwrap();
    let answer = post(&receiver.url_for("s0"), JSON, HTTP_EXPORT).await;
    assert_eq!(answer.status, 200);
    assert!(answer.took < FAST, "{:?}", answer.took);
    let counts = receiver.stop().await;
    assert_eq!((counts.forwarded, counts.forward_dropped), (0, 1));
    assert_eq!(store.server_span_count(&run_id).await.unwrap(), 3);
}

/// The real thing: tritonserver 2.51 exports a request traced by its `traceparent` to its
/// member's path, and the three spans are in the store under that member, the first one the
/// client span's child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_tritonserver_exports_a_traced_request_s_three_spans() {
    use stress_common::trace::TraceContext;
    use stress_common::tritonserver::{ServerSpec, TritonServer, find_binary};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let binary = find_binary(Some(&root)).unwrap_or_else(|e| panic!("{e}"));
    let (dir, store) = sqlite().await;
    let run_id = RunId::new("otlp-triton");
    let receiver = OtlpReceiver::start(local(), store.clone(), run_id.clone(), None)
        .await
        .unwrap();
    let mut spec = ServerSpec::new(binary, vec![root.join("models")], dir.path().join("t.log"));
    spec.extra_args = [
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--log-verbose=0",
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=0",
        &format!(
            "--trace-config=opentelemetry,url={}",
            receiver.url_for("s0")
        ),
        "--trace-config=opentelemetry,bsp_schedule_delay=200",
    ]
    .map(String::from)
    .to_vec();
    let mut server = TritonServer::start_ready(spec, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("tritonserver: {e}"));
    let context = TraceContext {
        trace_id: 0x3af7651916cd43dd8448eb211c80319c,
        span_id: 0xd7ad6b7169203331,
    };
    let data: Vec<i32> = (0..16).collect();
    let body = serde_json::json!({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [16], "data": data},
        {"name": "INPUT1", "datatype": "INT32", "shape": [16], "data": data},
    ]});
    let url = format!("http://{}/v2/models/add_sub/infer", server.http_address());
    let answer = reqwest::Client::new()
        .post(url)
        .header("traceparent", context.traceparent())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{answer:?}");
    let client = client_span(&context.trace_hex(), &context.span_hex());
    let snapshot = WorkerSnapshot {
        client_spans: vec![client],
        ..WorkerSnapshot::default()
    };
    store
        .sink(run_id.clone(), "client-0")
        .snapshot(&snapshot)
        .await
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let tail = store.traced_tail(&run_id, 1.0).await.unwrap();
        if tail.server.len() >= 3 || Instant::now() > give_up {
            break tail.server;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    server.stop(Duration::from_secs(10)).await;
    receiver.stop().await;
    let mut names: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| (s.server.as_str(), s.name.as_str()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("s0", "InferRequest"), ("s0", "add_sub"), ("s0", "compute")]
    );
    let first = spans.iter().find(|s| s.name == "InferRequest").unwrap();
    assert_eq!(first.parent_span_id, context.span_hex());
    assert!(first.event("HTTP_RECV_START").is_some(), "{first:?}");
}

/// A private CA and a certificate it signed for 127.0.0.1 (openssl), in `dir`: ca.pem,
/// cert.pem, key.pem.
fn private_ca_and_certificate(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (Debian's openssl package)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let new_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509", "-days", "2", "-subj", "/CN=test-ca"],
            &new_key[..],
            &["-keyout", "ca-key.pem", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req", "-subj", "/CN=127.0.0.1"],
            &new_key[..],
            &["-keyout", "key.pem", "-out", "cert.csr"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("cert.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "cert.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "cert.ext",
        "-out",
        "cert.pem",
    ]);
}

/// A forward target over TLS with `dir`'s certificate: its URL, and the bodies it is sent.
async fn tls_collector(dir: &std::path::Path) -> (String, Arc<Mutex<Vec<Bytes>>>) {
    use http_body_util::BodyExt;
    use hyper_util::rt::TokioIo;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(local()).await.unwrap();
    let url = format!("https://{}/v1/traces", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, kept) = (acceptor.clone(), kept.clone());
            tokio::spawn(async move {
                // A client that does not trust the certificate ends here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let keep = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move {
                            let body = request.into_body().collect().await?.to_bytes();
                            kept.lock().unwrap().push(body);
                            Ok::<_, hyper::Error>(hyper::Response::new(String::new()))
                        }
                    },
                );
                let http = hyper::server::conn::http1::Builder::new();
                let _ = http.serve_connection(TokioIo::new(tls), keep).await;
            });
        }
    });
    (url, seen)
}

/// `otlp_forward: https://...`: the target's certificate is verified against the system's
/// roots, to which `SSL_CERT_FILE` adds a private CA. The test runs itself (this binary's
/// ignored test below) twice, since the roots are read from the environment: with the CA
/// the body arrives; without it the handshake fails and the body is dropped, counted.
#[test]
fn an_https_forward_target_is_sent_every_body_when_its_ca_is_trusted_and_none_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    private_ca_and_certificate(dir.path());
    for (ca, forwarded) in [(Some(dir.path().join("ca.pem")), "1"), (None, "0")] {
        let mut run = std::process::Command::new(std::env::current_exe().unwrap());
        run.args(["--ignored", "--exact", "forward_over_tls", "--nocapture"])
            .env("TLS_COLLECTOR_DIR", dir.path())
            .env("EXPECT_FORWARDED", forwarded)
            .env_remove("SSL_CERT_DIR");
        match ca {
            Some(ca) => run.env("SSL_CERT_FILE", ca),
            None => run.env_remove("SSL_CERT_FILE"),
        };
        let out = run.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("1 passed"),
            "with the CA {}: {said}{}",
            forwarded == "1",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
#[ignore = "run by an_https_forward_target_is_sent_every_body_when_its_ca_is_trusted_and_none_otherwise"]
async fn forward_over_tls() {
    let dir = std::path::PathBuf::from(
        std::env::var("TLS_COLLECTOR_DIR").expect("set by the test that runs this one"),
    );
    let forwarded: u64 = std::env::var("EXPECT_FORWARDED").unwrap().parse().unwrap();
    let (_store_dir, store) = sqlite().await;
    let (url, seen) = tls_collector(&dir).await;
    let run_id = RunId::new("otlp-forward-tls");
    let receiver = OtlpReceiver::start(local(), store, run_id, Some(url.parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(
        post(&receiver.url_for("s0"), JSON, HTTP_EXPORT)
            .await
            .status,
        200
    );
    let counts = receiver.stop().await;
    assert_eq!(
        (counts.forwarded, counts.forward_dropped),
        (forwarded, 1 - forwarded)
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, forwarded);
    assert!(seen.iter().all(|body| *body == HTTP_EXPORT));
}
