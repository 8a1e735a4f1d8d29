use super::convert::tests::GRPC;
use super::*;

/// A write takes queued bodies until it holds [`BATCH_SPANS`] (the body that crosses it
/// whole); the rest wait for the next.
#[test]
fn a_store_write_takes_bodies_up_to_its_span_cap() {
    let body = |n: usize| {
        let request: ExportTraceServiceRequest = serde_json::from_str(GRPC).unwrap();
        let span = server_spans("triton-0", &request).remove(0);
        vec![span; n]
    };
    let mut queued: Vec<Vec<ServerSpan>> = (0..9).map(|_| body(BATCH_SPANS / 4)).collect();
    let batch = batch_from(body(BATCH_SPANS / 4), || queued.pop());
    assert_eq!(batch.len(), BATCH_SPANS);
    assert_eq!(queued.len(), 6, "the rest wait");
    let batch = batch_from(body(1), || queued.pop());
    assert_eq!(
        batch.len(),
        1 + 4 * (BATCH_SPANS / 4),
        "the body that crosses it, whole"
    );
    assert_eq!(batch_from(body(3), || None).len(), 3);
}

#[test]
fn protobuf_and_json_bodies_decode_to_the_same_request() {
    let request: ExportTraceServiceRequest = serde_json::from_str(GRPC).unwrap();
    let protobuf = request.encode_to_vec();
    let decoded = Encoding::Protobuf.decode(&protobuf, false).unwrap();
    assert_eq!(
        decoded,
        Encoding::Json.decode(GRPC.as_bytes(), false).unwrap()
    );
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gzip, &protobuf).unwrap();
    let gzipped = gzip.finish().unwrap();
    assert_eq!(Encoding::Protobuf.decode(&gzipped, true).unwrap(), request);
    let refused = Encoding::Protobuf
        .decode(b"\xff\xff\xff", false)
        .unwrap_err();
    assert_eq!(refused.0, StatusCode::BAD_REQUEST);
}
