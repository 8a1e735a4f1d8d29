//! OTLP trace messages to and from the store's spans (pure): what a server exported
//! ([`server_spans`]), and the clients' spans as an export of their own ([`client_request`]).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use stress_common::trace::{ClientSpan, ServerSpan, SpanEvent};

/// The spans of an export request, as `member` exported them: ids in lowercase hex (a root's
/// parent empty), times in Unix nanoseconds.
pub fn server_spans(member: &str, request: &ExportTraceServiceRequest) -> Vec<ServerSpan> {
    let spans = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans);
    spans
        .map(|s| ServerSpan {
            server: member.to_string(),
            trace_id: hex(&s.trace_id),
            span_id: hex(&s.span_id),
            parent_span_id: hex(&s.parent_span_id),
            name: s.name.clone(),
            start_ns: unix_ns(s.start_time_unix_nano),
            end_ns: unix_ns(s.end_time_unix_nano),
            events: s
                .events
                .iter()
                .map(|e| SpanEvent {
                    name: e.name.clone(),
                    at_ns: unix_ns(e.time_unix_nano),
                })
                .collect(),
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex digits as bytes; an id that is not hex becomes empty (OTLP: invalid).
fn unhex(digits: &str) -> Vec<u8> {
    if !digits.len().is_multiple_of(2) {
        return Vec::new();
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(digits.get(i..i + 2)?, 16).ok())
        .collect::<Option<_>>()
        .unwrap_or_default()
}

fn unix_ns(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// The clients' spans as one OTLP request of `service`: a CLIENT span each ("infer MODEL",
/// from the intended send to the answer, the server's InferRequest its child), events
/// `intended`, `sent`, `answered`, attributes `stress.scenario`, `stress.model` and
/// `server.address`, status ERROR when the request failed.
pub fn client_request(spans: &[ClientSpan], service: &str) -> ExportTraceServiceRequest {
    let event = |name: &str, at: i64| span::Event {
        name: name.into(),
        time_unix_nano: u64::try_from(at).unwrap_or(0),
        ..Default::default()
    };
    let spans = spans
        .iter()
        .map(|c| Span {
            trace_id: unhex(&c.trace_id),
            span_id: unhex(&c.span_id),
            name: format!("infer {}", c.model),
            kind: span::SpanKind::Client as i32,
            start_time_unix_nano: u64::try_from(c.intended_ns.min(c.sent_ns)).unwrap_or(0),
            end_time_unix_nano: u64::try_from(c.answered_ns).unwrap_or(0),
            attributes: vec![
                string("stress.scenario", &c.scenario),
                string("stress.model", &c.model),
                string("server.address", &c.server),
            ],
            events: [
                Some(event("intended", c.intended_ns)),
                Some(event("sent", c.sent_ns)),
                c.received_ns.map(|at| event("received", at)),
                Some(event("answered", c.answered_ns)),
            ]
            .into_iter()
            .flatten()
            .collect(),
            status: (!c.ok).then(|| Status {
                code: opentelemetry_proto::tonic::trace::v1::status::StatusCode::Error as i32,
                message: "the request failed".into(),
            }),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![string("service.name", service)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "triton-stress".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    const HTTP: &str =
        include_str!("../../../../common/src/testdata/tritonserver-2.51-otlp-http.json");
    pub(crate) const GRPC: &str =
        include_str!("../../../../common/src/testdata/tritonserver-2.51-otlp-grpc.json");

    fn spans_of(body: &str) -> Vec<ServerSpan> {
        let request: ExportTraceServiceRequest = serde_json::from_str(body).unwrap();
        server_spans("s0", &request)
    }

    fn events(names_and_times: &[(&str, i64)]) -> Vec<SpanEvent> {
        names_and_times
            .iter()
            .map(|&(name, at_ns)| SpanEvent {
                name: name.into(),
                at_ns,
            })
            .collect()
    }

    #[test]
    fn an_http_request_s_three_spans_read_exactly() {
        let trace_id = "0af7651916cd43dd8448eb211c80319c".to_string();
        let span = |span_id: &str, parent: &str, name: &str, start_ns, end_ns, events| ServerSpan {
            server: "s0".into(),
            trace_id: trace_id.clone(),
            span_id: span_id.into(),
            parent_span_id: parent.into(),
            name: name.into(),
            start_ns,
            end_ns,
            events,
        };
        let compute = events(&[
            ("COMPUTE_START", 1796445262812449878),
            ("COMPUTE_INPUT_END", 1796445262812640793),
            ("COMPUTE_OUTPUT_START", 1796445262830689049),
            ("COMPUTE_END", 1796445262830785083),
        ]);
        let model = events(&[
            ("REQUEST_START", 1796445262812355382),
            ("QUEUE_START", 1796445262812389843),
            ("REQUEST_END", 1796445262830842338),
        ]);
        let frontend = events(&[
            ("HTTP_RECV_START", 1796445262812081302),
            ("HTTP_RECV_END", 1796445262812097306),
            ("INFER_RESPONSE_COMPLETE", 1796445262830763921),
            ("HTTP_SEND_START", 1796445262830867566),
            ("HTTP_SEND_END", 1796445262830873986),
        ]);
        assert_eq!(
            spans_of(HTTP),
            [
                span(
                    "30df1a7f0c98a8fc",
                    "0f79463ec5b5f9ad",
                    "compute",
                    1796445262812449878,
                    1796445262830785083,
                    compute
                ),
                span(
                    "0f79463ec5b5f9ad",
                    "8b6862c3bdaa2bb3",
                    "add_sub",
                    1796445262812355382,
                    1796445262830842338,
                    model
                ),
                span(
                    "8b6862c3bdaa2bb3",
                    "b7ad6b7169203331",
                    "InferRequest",
                    1796445262812133901,
                    1796445262830919413,
                    frontend
                ),
            ]
        );
    }

    #[test]
    fn a_grpc_request_s_spans_chain_from_the_client_s_span() {
        let spans = spans_of(GRPC);
        let chain: Vec<(&str, &str, &str)> = spans
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.span_id.as_str(),
                    s.parent_span_id.as_str(),
                )
            })
            .collect();
        assert_eq!(
            chain,
            [
                ("compute", "7ac3878ea4d471bb", "7a0dd6100abc452b"),
                ("add_sub", "7a0dd6100abc452b", "73042c4f2cac2cb1"),
                ("InferRequest", "73042c4f2cac2cb1", "c7ad6b7169203331"),
            ]
        );
        assert!(
            spans
                .iter()
                .all(|s| s.trace_id == "1af7651916cd43dd8448eb211c80319c")
        );
        assert_eq!(
            spans[2].event("GRPC_WAITREAD_END"),
            Some(1796445263060060890)
        );
    }

    #[test]
    fn client_spans_become_client_spans_of_their_traces() {
        let client = |ok: bool, received_ns: Option<i64>| ClientSpan {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "b7ad6b7169203331".into(),
            scenario: "Infer".into(),
            model: "add_sub".into(),
            server: "127.0.0.1:8000".into(),
            intended_ns: 100,
            sent_ns: 150,
            answered_ns: 900,
            received_ns,
            ok,
        };
        let request = client_request(
            &[client(true, None), client(false, Some(880))],
            "triton-stress",
        );
        let resource = request.resource_spans[0].resource.as_ref().unwrap();
        assert_eq!(
            resource.attributes,
            [string("service.name", "triton-stress")]
        );
        let otlp = &request.resource_spans[0].scope_spans[0].spans;
        assert_eq!(otlp[0].kind, span::SpanKind::Client as i32);
        assert_eq!(otlp[0].status, None);
        assert_eq!(otlp[1].status.as_ref().map(|s| s.code), Some(2));
        assert_eq!(
            otlp[0].attributes[2],
            string("server.address", "127.0.0.1:8000")
        );
        // Read back as a server would: the same ids, a root, from the intended send to the answer.
        let back = &server_spans("x", &request)[0];
        assert_eq!(
            (
                back.trace_id.as_str(),
                back.span_id.as_str(),
                back.parent_span_id.as_str()
            ),
            ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "")
        );
        assert_eq!(
            (back.name.as_str(), back.start_ns, back.end_ns),
            ("infer add_sub", 100, 900)
        );
        assert_eq!(
            back.events,
            events(&[("intended", 100), ("sent", 150), ("answered", 900)])
        );
        // Where the client had the kernel's receive time, the span says when the answer came.
        assert_eq!(
            server_spans("x", &request)[1].events,
            events(&[
                ("intended", 100),
                ("sent", 150),
                ("received", 880),
                ("answered", 900)
            ])
        );
        assert_eq!(unhex("0g"), Vec::<u8>::new());
    }
}
