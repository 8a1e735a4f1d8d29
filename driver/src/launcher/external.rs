//! Servers that already run (a server group's `endpoints`): the driver did not launch them, so
//! no launcher knows them; the driver checks them itself, over the protocols it was given.
//!
//! * At start, [`check_at_start`]: every address answers (gRPC `ServerLive` and `ServerReady`,
//!   HTTP `/v2/health/live` and `/v2/health/ready`, `/metrics`), with a few tries; what does not
//!   is bad input, named by its matrix field.
//! * Every poll, [`probe_live`]: one liveness probe, which `failfast` counts.
//! * Before load, [`repository_index`] over gRPC when no HTTP address is known (the preflight).
//!
//! gRPC is spoken by hand over one h2 connection a call: these are three unary calls with
//! messages of a field or two, not worth generated code in the driver.

use crate::matrix::ExternalServer;
use crate::plan::preflight::IndexEntry;
use bytes::{Bytes, BytesMut};
use std::time::Duration;
use stress_common::http::{self, HttpError};
use stress_common::tritonserver;

/// How many times the start check tries an address before it gives up on it.
pub const START_ATTEMPTS: u32 = 3;
/// How long one try of the start check may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two tries.
pub const START_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Triton's gRPC service, as its `.proto` names it.
const GRPC_SERVICE: &str = "inference.GRPCInferenceService";

/// An address of an external server that failed the start check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    /// Which address: `grpc`, `http` or `metrics`.
    pub port: &'static str,
    /// Its matrix field, e.g. `server_groups.staging.endpoints[0].grpc`.
    pub field: String,
    /// What failed, with the address.
    pub why: String,
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
    let failure = |port: &'static str, why: String| StartFailure {
        port,
        field: s.port_field(port),
        why,
    };
    if let Some(grpc) = &s.ports.grpc {
        let at = |why| failure("grpc", why);
        for (method, what) in [("ServerLive", "live"), ("ServerReady", "ready")] {
            match grpc_flag(grpc, method, timeout).await {
                Ok(true) => {}
                Ok(false) => return Err(at(format!("gRPC {grpc} {method}: not {what}"))),
                Err(e) => return Err(at(format!("gRPC {grpc} {method}: {e}"))),
            }
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

async fn http_ok(address: &str, path: &str, timeout: Duration) -> Result<(), String> {
    match http::get(&format!("http://{address}{path}"), timeout).await {
        Ok(r) if r.is_ok() => Ok(()),
        Ok(r) => Err(format!("HTTP {address}{path} answered {}", r.status)),
        Err(HttpError::TimedOut { .. }) => Err(format!(
            "HTTP {address}{path} did not answer within {timeout:?}"
        )),
        Err(HttpError::Failed { cause, .. }) => {
            Err(format!("HTTP {address}{path} did not answer: {cause}"))
        }
    }
}

/// One liveness probe of a running external server: HTTP `/v2/health/live` when its HTTP
/// address is known, else gRPC `ServerLive`.
pub async fn probe_live(server: &ExternalServer, timeout: Duration) -> Result<(), String> {
    if let Some(address) = &server.ports.http {
        return tritonserver::probe_live(address, timeout).await;
    }
    let Some(grpc) = &server.ports.grpc else {
        return Err("no address to probe".into());
    };
    match grpc_flag(grpc, "ServerLive", timeout).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{grpc} ServerLive: not live")),
        Err(e) => Err(format!("{grpc} ServerLive: {e}")),
    }
}

/// The repository index over gRPC (`RepositoryIndex`, every model, loaded or not), for a
/// server whose HTTP address is unknown.
pub async fn repository_index(grpc: &str, timeout: Duration) -> Result<Vec<IndexEntry>, String> {
    let reply = grpc_unary(grpc, "RepositoryIndex", &[], timeout)
        .await
        .map_err(|e| format!("repository index over gRPC {grpc}: {e}"))?;
    parse_index_reply(&reply)
}

/// A `bool` reply (`ServerLive`, `ServerReady`: field 1, false when absent).
async fn grpc_flag(address: &str, method: &str, timeout: Duration) -> Result<bool, String> {
    let reply = grpc_unary(address, method, &[], timeout).await?;
    let fields = proto_fields(&reply)?;
    Ok(fields
        .iter()
        .any(|(tag, f)| *tag == 1 && matches!(f, Field::Varint(v) if *v != 0)))
}

/// One unary call of Triton's gRPC service on a fresh HTTP/2 connection; the reply message's
/// bytes, or why there are none (including a gRPC status other than OK).
async fn grpc_unary(
    address: &str,
    method: &str,
    request: &[u8],
    timeout: Duration,
) -> Result<Bytes, String> {
    let call = async {
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| e.to_string())?;
        let (client, connection) = h2::client::handshake(tcp)
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        // Ends when the call's last handle is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut client = client.ready().await.map_err(|e| e.to_string())?;
        let head = ::http::Request::builder()
            .method("POST")
            .uri(format!("http://{address}/{GRPC_SERVICE}/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| e.to_string())?;
        let (reply, mut send) = client
            .send_request(head, false)
            .map_err(|e| e.to_string())?;
        let mut frame = BytesMut::with_capacity(5 + request.len());
        frame.extend_from_slice(&[0]);
        frame.extend_from_slice(
            &u32::try_from(request.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        frame.extend_from_slice(request);
        send.send_data(frame.freeze(), true)
            .map_err(|e| e.to_string())?;
        let (parts, mut body) = reply.await.map_err(|e| e.to_string())?.into_parts();
        if parts.status != ::http::StatusCode::OK {
            return Err(format!("answered HTTP {}", parts.status));
        }
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(|e| e.to_string())?;
        // A status comes in the trailers, or alone in the headers ("trailers-only").
        let header = |name: &str| {
            trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .or_else(|| parts.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        match header("grpc-status").as_deref() {
            Some("0") => {}
            Some(code) => {
                return Err(format!(
                    "gRPC status {code}: {}",
                    header("grpc-message").unwrap_or_default()
                ));
            }
            None => return Err("no gRPC status in the reply (not a gRPC server?)".into()),
        }
        unframe(data.freeze())
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => Err(format!("did not answer within {timeout:?} (hung?)")),
    }
}

/// The message of a gRPC reply body: one frame, `[compressed: u8][length: u32 BE][message]`.
fn unframe(data: Bytes) -> Result<Bytes, String> {
    if data.len() < 5 {
        return Err(format!(
            "a reply of {} bytes is not a gRPC message",
            data.len()
        ));
    }
    if data[0] != 0 {
        return Err("a compressed reply (not asked for)".into());
    }
    let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    if data.len() < 5 + len {
        return Err(format!(
            "a reply message of {len} bytes, {} received",
            data.len() - 5
        ));
    }
    Ok(data.slice(5..5 + len))
}

/// One field of a protobuf message, as far as these replies need.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed 32 or 64 bits: skipped.
    Fixed,
}

fn varint(buf: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or("a protobuf varint ends early")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a protobuf varint longer than 64 bits".into())
}

/// The fields of a protobuf message, in order: (field number, value).
fn proto_fields(mut buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut fields = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let skip = |buf: &mut &[u8], n: usize| {
            if buf.len() < n {
                return Err("a protobuf field ends early".to_string());
            }
            *buf = &buf[n..];
            Ok(())
        };
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut buf)?),
            1 => {
                skip(&mut buf, 8)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|e| e.to_string())?;
                let value = buf.get(..len).ok_or("a protobuf field ends early")?;
                buf = &buf[len..];
                Field::Bytes(value)
            }
            5 => {
                skip(&mut buf, 4)?;
                Field::Fixed
            }
            other => return Err(format!("protobuf wire type {other} is not expected here")),
        };
        fields.push((key >> 3, field));
    }
    Ok(fields)
}

/// `RepositoryIndexResponse { repeated ModelIndex models = 1; }` with `ModelIndex { string
/// name = 1; string version = 2; string state = 3; string reason = 4; }`.
fn parse_index_reply(reply: &[u8]) -> Result<Vec<IndexEntry>, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut models = Vec::new();
    for (tag, field) in proto_fields(reply)? {
        let (1, Field::Bytes(model)) = (tag, field) else {
            continue;
        };
        let mut entry = IndexEntry {
            name: String::new(),
            version: String::new(),
            state: String::new(),
            reason: String::new(),
        };
        for (tag, field) in proto_fields(model)? {
            let Field::Bytes(value) = field else { continue };
            match tag {
                1 => entry.name = text(value),
                2 => entry.version = text(value),
                3 => entry.state = text(value),
                4 => entry.reason = text(value),
                _ => {}
            }
        }
        models.push(entry);
    }
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn bytes_field(tag: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![tag << 3 | 2, value.len() as u8];
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn an_index_reply_decodes() {
        let mut add_sub = bytes_field(1, b"add_sub");
        add_sub.extend(bytes_field(2, b"1"));
        add_sub.extend(bytes_field(3, b"READY"));
        let mut broken = bytes_field(1, b"broken");
        broken.extend(bytes_field(3, b"UNAVAILABLE"));
        broken.extend(bytes_field(4, b"load failed"));
        // An unknown varint field (number 9) is skipped.
        broken.extend([9 << 3, 0x96, 0x01]);
        let mut reply = bytes_field(1, &add_sub);
        reply.extend(bytes_field(1, &broken));
        let index = parse_index_reply(&reply).unwrap();
        assert_eq!(index.len(), 2);
        assert_eq!(
            (
                index[0].name.as_str(),
                index[0].version.as_str(),
                index[0].state.as_str()
            ),
            ("add_sub", "1", "READY")
        );
        assert_eq!(
            (
                index[1].name.as_str(),
                index[1].version.as_str(),
                index[1].reason.as_str()
            ),
            ("broken", "", "load failed")
        );
        assert!(parse_index_reply(&[]).unwrap().is_empty());
        assert!(
            parse_index_reply(&[1 << 3 | 2, 5, b'a']).is_err(),
            "truncated"
        );
    }

    #[test]
    fn flags_and_frames() {
        assert_eq!(
            proto_fields(&[0x08, 0x01]).unwrap(),
            [(1, Field::Varint(1))]
        );
        assert_eq!(
            proto_fields(&[0x08, 0x96, 0x01]).unwrap(),
            [(1, Field::Varint(150))]
        );
        assert!(proto_fields(&[0x08]).is_err());
        let framed = Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x01]);
        assert_eq!(&unframe(framed).unwrap()[..], [0x08, 0x01]);
        assert!(unframe(Bytes::from_static(&[0, 0, 0, 0, 3, 0x08])).is_err());
        assert!(unframe(Bytes::from_static(&[0, 0])).is_err());
    }

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
        assert!(
            e.why.starts_with(&format!("gRPC {address} ServerLive: ")) && e.why.contains("refused"),
            "{e:?}"
        );
        let e = probe_live(&server, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(e.contains("refused"), "{e}");
    }
}
