//! KServe v2 over HTTP/REST (reqwest, one keep-alive pool per server). Tensors go either as JSON
//! arrays or with Triton's binary tensor extension (`Inference-Header-Content-Length`: a JSON
//! header followed by the raw tensor bytes), chosen per client. An open loop's pacer sends its
//! requests itself on connections of [`DirectPool`] (`send_now`).

use super::http1_direct::DirectPool;
use super::{
    ClientError, InferRequest, InferResponse, Prepared, Protocol, SentCall, SequenceSession,
    TritonClient,
};
use crate::metadata::{ModelConfig, ModelMetadata};
use crate::tensor::{self, DataType, Tensor};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

const HEADER_LENGTH: http::HeaderName =
    http::HeaderName::from_static("inference-header-content-length");
/// The W3C trace context's header.
const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

#[derive(Clone)]
pub struct HttpClient {
    address: String,
    base: String,
    http: reqwest::Client,
    /// Connections whose requests the sending thread writes (None: made outside a runtime).
    direct: Option<Arc<DirectPool>>,
    /// Use the binary tensor extension (default) instead of JSON arrays.
    pub binary: bool,
}

fn transport(e: reqwest::Error) -> ClientError {
    if e.is_timeout() {
        ClientError::DeadlineExceeded(e.to_string())
    } else {
        // reqwest's text names the URL only; the causes say what went wrong.
        ClientError::Transport(super::with_causes(
            e.to_string(),
            std::error::Error::source(&e),
        ))
    }
}

impl HttpClient {
    pub fn new(address: &str) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let direct = tokio::runtime::Handle::try_current()
            .ok()
            .map(|runtime| Arc::new(DirectPool::new(address, runtime)));
        Ok(Self {
            address: address.into(),
            base: format!("http://{address}"),
            http,
            direct,
            binary: true,
        })
    }

    pub fn with_binary(mut self, binary: bool) -> Self {
        self.binary = binary;
        self
    }

    async fn get(&self, path: &str) -> Result<reqwest::Response, ClientError> {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(transport)
    }

    async fn get_ok(&self, path: &str) -> Result<bool, ClientError> {
        Ok(self.get(path).await?.status().is_success())
    }

    /// GETs a JSON document; a non-success status is a server error with the server's message.
    async fn get_json(&self, path: &str) -> Result<Value, ClientError> {
        let r = self.get(path).await?;
        let status = r.status();
        let body = r.bytes().await.map_err(transport)?;
        if !status.is_success() {
            return Err(server_error(status, &body));
        }
        serde_json::from_slice(&body)
            .map_err(|e| ClientError::Protocol(format!("GET {path}: not JSON: {e}")))
    }

    /// The request as (JSON header, binary payload): the payload is empty in JSON mode.
    fn encode(&self, request: &InferRequest) -> Result<(Vec<u8>, Vec<Bytes>), ClientError> {
        let mut parameters = Map::new();
        if let Some(seq) = request.sequence {
            let id = if seq.string_id {
                json!(seq.id.to_string())
            } else {
                json!(seq.id)
            };
            parameters.insert("sequence_id".into(), id);
            parameters.insert("sequence_start".into(), json!(seq.start));
            parameters.insert("sequence_end".into(), json!(seq.end));
        }
        for (k, v) in &request.int_parameters {
            parameters.insert(k.clone(), json!(v));
        }
        let mut payload = Vec::new();
        let inputs: Vec<Value> = request
            .inputs
            .iter()
            .map(|t| {
                let mut input =
                    json!({"name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape});
                if self.binary || !json_capable(t.datatype) {
                    input["parameters"] = json!({"binary_data_size": t.data.len()});
                    payload.push(t.data.clone());
                } else {
                    input["data"] = tensor_to_json(t)?;
                }
                Ok(input)
            })
            .collect::<Result<_, ClientError>>()?;
        let outputs: Vec<Value> = request
            .outputs
            .iter()
            .map(|o| {
                let mut p = Map::new();
                let binary = self.binary || o.datatype.is_some_and(|d| !json_capable(d));
                p.insert("binary_data".into(), json!(binary));
                if let Some(n) = o.class_count {
                    p.insert("classification".into(), json!(n));
                }
                json!({"name": o.name, "parameters": p})
            })
            .collect();
        let mut body = json!({"inputs": inputs});
        if !parameters.is_empty() {
            body["parameters"] = Value::Object(parameters);
        }
        if !outputs.is_empty() {
            body["outputs"] = Value::Array(outputs);
        }
        let header = serde_json::to_vec(&body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((header, payload))
    }

    fn decode(header_length: Option<usize>, body: Bytes) -> Result<InferResponse, ClientError> {
        let (json_part, mut binary) = match header_length {
            Some(n) if n <= body.len() => (body.slice(..n), body.slice(n..)),
            Some(n) => {
                return Err(ClientError::Protocol(format!(
                    "header length {n} exceeds body length {}",
                    body.len()
                )));
            }
            None => (body.clone(), Bytes::new()),
        };
        let header: ResponseHeader = serde_json::from_slice(&json_part).map_err(|e| {
            ClientError::Protocol(format!("response header is not what KServe v2 says: {e}"))
        })?;
        let outputs = header.outputs.ok_or_else(|| {
            ClientError::Protocol(format!(
                "response without outputs: {}",
                String::from_utf8_lossy(&json_part)
            ))
        })?;
        let mut tensors = Vec::with_capacity(outputs.len());
        for o in outputs {
            let name = o.name.into_owned();
            let datatype = DataType::parse(&o.datatype).ok_or_else(|| {
                ClientError::Protocol(format!(
                    "output {name} has unsupported datatype {}",
                    o.datatype
                ))
            })?;
            let data = if let Some(size) = o.parameters.binary_data_size {
                let size = size as usize;
                if size > binary.len() {
                    return Err(ClientError::Protocol(format!(
                        "output {name}: binary_data_size {size} beyond the body"
                    )));
                }
                let d = binary.slice(..size);
                binary = binary.slice(size..);
                d
            } else {
                json_to_tensor_data(&name, datatype, &o.data)?
            };
            tensors.push(Tensor {
                name,
                datatype,
                shape: o.shape,
                data,
            });
        }
        Ok(InferResponse {
            model_version: header.model_version.into_owned(),
            outputs: tensors,
            received_at: None,
            sent_at: None,
        })
    }
}

/// The JSON header of an inference response, read into types rather than a JSON tree: it is
/// parsed for every response, and the tree's maps and strings were most of that cost.
#[derive(serde::Deserialize)]
struct ResponseHeader<'a> {
    #[serde(default, borrow)]
    model_version: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    outputs: Option<Vec<OutputHeader<'a>>>,
}

#[derive(serde::Deserialize)]
struct OutputHeader<'a> {
    #[serde(default, borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    datatype: std::borrow::Cow<'a, str>,
    #[serde(default)]
    shape: Vec<i64>,
    #[serde(default)]
    parameters: OutputParameters,
    /// The tensor as JSON, when it is not binary.
    #[serde(default)]
    data: Value,
}

#[derive(serde::Deserialize, Default)]
struct OutputParameters {
    binary_data_size: Option<u64>,
}

/// Triton 2.51 refuses FP16 and BF16 as JSON ("receiving FP16 data via JSON is not
/// supported"): in JSON mode those tensors travel binary.
fn json_capable(datatype: DataType) -> bool {
    !matches!(datatype, DataType::Fp16 | DataType::Bf16)
}

/// How a URL path names a model: `NAME`, or `NAME/versions/V`.
fn model_path(model: &str, version: &str) -> String {
    if version.is_empty() {
        model.to_string()
    } else {
        format!("{model}/versions/{version}")
    }
}

fn tensor_to_json(t: &Tensor) -> Result<Value, ClientError> {
    let Some(size) = t.datatype.size() else {
        return Ok(json!(
            t.to_strings()
                .map_err(|e| ClientError::Protocol(e.to_string()))?
        ));
    };
    if !t.data.len().is_multiple_of(size) {
        return Err(ClientError::Protocol(format!(
            "tensor {}: {} bytes is not a whole number of {} elements",
            t.name,
            t.data.len(),
            t.datatype
        )));
    }
    Ok(Value::Array(
        t.data
            .chunks_exact(size)
            .map(|c| tensor::decode_scalar(t.datatype, c).to_json())
            .collect(),
    ))
}

fn json_to_tensor_data(name: &str, datatype: DataType, data: &Value) -> Result<Bytes, ClientError> {
    let values = data
        .as_array()
        .ok_or_else(|| ClientError::Protocol(format!("output {name} has no data array")))?;
    let bad = || ClientError::Protocol(format!("output {name}: data does not match {datatype}"));
    if datatype == DataType::Bytes {
        let strings: Vec<String> = values
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        return Ok(Tensor::from_strings(name, vec![], &strings).data);
    }
    let mut out = Vec::new();
    for v in values {
        tensor::encode_json_scalar(datatype, v, &mut out).ok_or_else(bad)?;
    }
    Ok(out.into())
}

#[async_trait::async_trait]
impl TritonClient for HttpClient {
    fn address(&self) -> &str {
        &self.address
    }

    fn protocol(&self) -> Protocol {
        Protocol::Http
    }

    async fn server_live(&self) -> Result<bool, ClientError> {
        self.get_ok("/v2/health/live").await
    }

    async fn server_ready(&self) -> Result<bool, ClientError> {
        self.get_ok("/v2/health/ready").await
    }

    async fn model_ready(&self, model: &str) -> Result<bool, ClientError> {
        self.get_ok(&format!("/v2/models/{model}/ready")).await
    }

    async fn server_metadata(&self) -> Result<(String, String), ClientError> {
        let v: Value = self
            .http
            .get(format!("{}/v2", self.base))
            .send()
            .await
            .map_err(transport)?
            .json()
            .await
            .map_err(transport)?;
        Ok((
            v["name"].as_str().unwrap_or_default().into(),
            v["version"].as_str().unwrap_or_default().into(),
        ))
    }

    async fn max_batch_size(&self, model: &str) -> Result<i64, ClientError> {
        let v = self.get_json(&format!("/v2/models/{model}/config")).await?;
        Ok(v["max_batch_size"].as_i64().unwrap_or(0))
    }

    async fn model_version_ready(&self, model: &str, version: &str) -> Result<bool, ClientError> {
        self.get_ok(&format!("/v2/models/{}/ready", model_path(model, version)))
            .await
    }

    async fn model_metadata(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        let v = self
            .get_json(&format!("/v2/models/{}", model_path(model, version)))
            .await?;
        serde_json::from_value(v)
            .map_err(|e| ClientError::Protocol(format!("model metadata of {model}: {e}")))
    }

    async fn model_config(&self, model: &str, version: &str) -> Result<ModelConfig, ClientError> {
        let v = self
            .get_json(&format!("/v2/models/{}/config", model_path(model, version)))
            .await?;
        ModelConfig::from_json(&v)
            .map_err(|e| ClientError::Protocol(format!("model config of {model}: {e}")))
    }

    fn prepare(&self, request: &InferRequest) -> Result<Prepared, ClientError> {
        let (header, payload) = self.encode(request)?;
        let header_length = (!payload.is_empty()).then_some(header.len());
        let mut body = header;
        for p in &payload {
            body.extend_from_slice(p);
        }
        let model_path = model_path(&request.model, &request.version);
        let head =
            DirectHead::new(&self.address, &model_path, header_length).map(std::sync::Arc::new);
        Ok(Prepared::Http {
            model_path,
            body: Bytes::from(body),
            header_length,
            head,
        })
    }

    async fn infer_prepared(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
    ) -> Result<InferResponse, ClientError> {
        // On an idle keep-alive connection of our own, written from this task at once: no
        // pool lookup, URL parse or task hop per request (most of reqwest's cost here).
        let started = tokio::time::Instant::now();
        if let Some(sent) = self.send_direct(prepared, None)
            && let Some(answer) =
                within(timeout, direct_answer(&self.address, sent.response)).await?
        {
            return Ok(answer);
        }
        // No idle connection, or the server had ended it (see `direct_answer`): the request
        // goes the ordinary way, in the time left.
        let timeout = timeout.map(|t| t.saturating_sub(started.elapsed()));
        self.post_infer(prepared, timeout, None).await
    }

    /// On the load's own path (the direct pool), so that the traced request is timed as the
    /// load it samples and carries when it was written and when its answer arrived.
    async fn infer_traced(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
        traceparent: &str,
    ) -> Result<InferResponse, ClientError> {
        let value = http::HeaderValue::from_str(traceparent)
            .map_err(|_| ClientError::Protocol(format!("traceparent {traceparent:?}")))?;
        let started = tokio::time::Instant::now();
        if let (Some(direct), Some(request)) =
            (&self.direct, self.direct_request(prepared, Some(&value)))
        {
            let sent = within(timeout, direct.send_on_any(request)).await?;
            if let Some(mut answer) =
                within(timeout, direct_answer(&self.address, sent.response)).await?
            {
                answer.sent_at = Some(sent.sent_at);
                answer.received_at = sent.received.instant();
                return Ok(answer);
            }
        }
        // No direct pool, or the server had ended the connection (see `direct_answer`).
        let timeout = timeout.map(|t| t.saturating_sub(started.elapsed()));
        self.post_infer(prepared, timeout, Some(value)).await
    }

    fn send_now(&self, prepared: &Prepared, timeout: Option<Duration>) -> Option<SentCall> {
        let response = self.send_direct(prepared, None)?.response;
        let address = self.address.clone();
        Some(Box::pin(async move {
            let answered = async {
                direct_answer(&address, response).await?.ok_or_else(|| {
                    ClientError::Transport(format!(
                        "{address}: the connection closed before an answer began"
                    ))
                })
            };
            within(timeout, answered).await
        }))
    }

    async fn sequence_session(&self) -> Result<Box<dyn SequenceSession>, ClientError> {
        Ok(Box::new(HttpSequenceSession {
            client: self.clone(),
        }))
    }
}

/// HTTP has no stream: a sequence's requests are consecutive POSTs carrying the sequence flags.
struct HttpSequenceSession {
    client: HttpClient,
}

#[async_trait::async_trait]
impl SequenceSession for HttpSequenceSession {
    async fn infer(&mut self, request: &InferRequest) -> Result<InferResponse, ClientError> {
        self.client.infer(request).await
    }
}

/// What an inference request's body is: JSON, or a JSON header of `header_length` bytes and
/// binary tensors.
fn body_headers(header_length: Option<usize>) -> http::HeaderMap {
    let mut headers = http::HeaderMap::with_capacity(2);
    let content_type = match header_length {
        Some(n) => {
            headers.insert(HEADER_LENGTH, n.into());
            "application/octet-stream"
        }
        None => "application/json",
    };
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    headers
}

/// The length of the JSON part of a binary-extension response.
fn inference_header_length(headers: &http::HeaderMap) -> Option<usize> {
    headers
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

impl HttpClient {
    /// Sends `prepared` through reqwest's pool (with a `traceparent` header when given),
    /// within `timeout`.
    async fn post_infer(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
        traceparent: Option<http::HeaderValue>,
    ) -> Result<InferResponse, ClientError> {
        let Prepared::Http {
            model_path,
            body,
            header_length,
            ..
        } = prepared
        else {
            return Err(ClientError::WrongProtocol);
        };
        let mut headers = body_headers(*header_length);
        if let Some(value) = traceparent {
            headers.insert(TRACEPARENT, value);
        }
        let mut builder = self
            .http
            .post(format!("{}/v2/models/{model_path}/infer", self.base))
            .headers(headers);
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let response = builder.body(body.clone()).send().await.map_err(transport)?;
        let status = response.status();
        let header_length = inference_header_length(response.headers());
        let body = response.bytes().await.map_err(transport)?;
        answer(status, header_length, body)
    }

    /// Writes `prepared` (with a `traceparent` header when given) now on an idle connection of
    /// the direct pool; None when none is idle.
    fn send_direct(
        &self,
        prepared: &Prepared,
        traceparent: Option<&http::HeaderValue>,
    ) -> Option<super::http1_direct::DirectSend> {
        let direct = self.direct.as_ref()?;
        direct.send_now(self.direct_request(prepared, traceparent)?)
    }

    /// `prepared` as a request of the direct pool (with a `traceparent` header when given).
    fn direct_request(
        &self,
        prepared: &Prepared,
        traceparent: Option<&http::HeaderValue>,
    ) -> Option<hyper::Request<http_body_util::Full<Bytes>>> {
        let Prepared::Http {
            body,
            head: Some(head),
            ..
        } = prepared
        else {
            return None;
        };
        let mut request = hyper::Request::new(http_body_util::Full::new(body.clone()));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = head.uri.clone();
        *request.headers_mut() = head.headers.clone();
        if let Some(value) = traceparent {
            request.headers_mut().insert(TRACEPARENT, value.clone());
        }
        Some(request)
    }
}

/// The path and headers of an inference request on the direct pool: the same for every send
/// of one prepared request, so parsed and validated once (cloning them is reference counts
/// and two small copies; building them was a `format!`, a URI parse and three header inserts
/// per request).
#[derive(Debug, Clone)]
pub struct DirectHead {
    uri: http::Uri,
    headers: http::HeaderMap,
}

impl DirectHead {
    fn new(authority: &str, model_path: &str, header_length: Option<usize>) -> Option<Self> {
        let uri = format!("/v2/models/{model_path}/infer").parse().ok()?;
        let mut headers = body_headers(header_length);
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_str(authority).ok()?,
        );
        Some(Self { uri, headers })
    }
}

/// The answer to a request of the direct pool; None when its connection closed before any
/// answer began: hyper cancelled the request before writing it, or the server had already
/// ended the idle keep-alive connection when the request reached it (the race every HTTP/1.1
/// client meets; browsers send such a request again). A server that dies with the request
/// fails the second attempt too (no connection), so nothing is hidden.
async fn direct_answer(
    address: &str,
    response: super::http1_direct::ResponseFuture,
) -> Result<Option<InferResponse>, ClientError> {
    let failed = |e: hyper::Error| {
        ClientError::Transport(super::with_causes(
            format!("{address}: {e}"),
            std::error::Error::source(&e),
        ))
    };
    let response = match response.await {
        Ok(response) => response,
        Err(e) if e.is_canceled() || e.is_incomplete_message() => return Ok(None),
        Err(e) => return Err(failed(e)),
    };
    let status = response.status();
    let header_length = inference_header_length(response.headers());
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(failed)?
        .to_bytes();
    answer(status, header_length, body).map(Some)
}

/// `answered`, or DeadlineExceeded after `timeout`.
async fn within<T>(
    timeout: Option<Duration>,
    answered: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    match timeout {
        Some(t) => tokio::time::timeout(t, answered)
            .await
            .map_err(|_| ClientError::DeadlineExceeded(format!("no response within {t:?}")))?,
        None => answered.await,
    }
}

/// An inference's answer, whichever way it was sent.
fn answer(
    status: http::StatusCode,
    header_length: Option<usize>,
    body: Bytes,
) -> Result<InferResponse, ClientError> {
    if !status.is_success() {
        return Err(server_error(status, &body));
    }
    HttpClient::decode(header_length, body)
}

/// A non-2xx answer: Triton's `{"error": "..."}` message when it sent one, else the body.
fn server_error(status: http::StatusCode, body: &[u8]) -> ClientError {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    ClientError::Server {
        code: status.as_u16().to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers every request with one INT32 output, on any connection, and
    /// closes a connection that stays idle for 100 ms (as servers end idle keep-alive
    /// connections). Returns its address.
    fn closing_idle_server() -> String {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                std::thread::spawn(move || {
                    stream
                        .set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    loop {
                        let mut length = 0;
                        let mut line = String::new();
                        // An idle connection (no request within 100 ms) is closed.
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        while line.trim_end() != "" {
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = v.trim().parse().unwrap();
                            }
                            line.clear();
                            reader.read_line(&mut line).unwrap();
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        let answer = br#"{"model_name":"m","outputs":[{"name":"A","datatype":"INT32","shape":[1],"data":[7]}]}"#;
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            answer.len()
                        );
                        writer.write_all(head.as_bytes()).unwrap();
                        writer.write_all(answer).unwrap();
                    }
                });
            }
        });
        address
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_on_a_connection_the_server_closed_goes_out_again() {
        let address = closing_idle_server();
        let client = HttpClient::new(&address).unwrap();
        let request = InferRequest::new("m", vec![Tensor::from_i32("X", vec![1], &[1])]);
        let prepared = client.prepare(&request).unwrap();
        let timeout = Some(Duration::from_secs(5));
        // The first request has the pool make a connection; it goes the ordinary way.
        client.infer_prepared(&prepared, timeout).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        // The server closes the pool's idle connection; the runtime has not seen it yet (this
        // thread blocks), so the next request goes out on it and meets its end.
        std::thread::sleep(Duration::from_millis(300));
        let answer = client.infer_prepared(&prepared, timeout).await.unwrap();
        assert_eq!(answer.output("A").unwrap().to_i32().unwrap(), vec![7]);
    }

    #[test]
    fn binary_response_is_split_by_header_length() {
        let header = br#"{"outputs":[{"name":"A","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"B","datatype":"INT32","shape":[1],"data":[7]}]}"#;
        let mut body = header.to_vec();
        body.extend_from_slice(&1i32.to_le_bytes());
        body.extend_from_slice(&(-1i32).to_le_bytes());
        let r = HttpClient::decode(Some(header.len()), Bytes::from(body)).unwrap();
        assert_eq!(r.output("A").unwrap().to_i32().unwrap(), vec![1, -1]);
        assert_eq!(r.output("B").unwrap().to_i32().unwrap(), vec![7]);
        assert!(HttpClient::decode(Some(10_000), Bytes::from_static(b"{}")).is_err());
        let none = HttpClient::decode(None, Bytes::from_static(br#"{"model_name":"m"}"#));
        assert!(format!("{:?}", none.unwrap_err()).contains("without outputs"));
        let odd = br#"{"outputs":[{"name":"A","datatype":"INT33","shape":[1],"data":[1]}]}"#;
        let odd = HttpClient::decode(None, Bytes::from_static(odd));
        assert!(format!("{:?}", odd.unwrap_err()).contains("unsupported datatype INT33"));
        let bad = br#"{"outputs":[{"name":"A","datatype":"INT32","shape":["x"]}]}"#;
        assert!(HttpClient::decode(None, Bytes::from_static(bad)).is_err());
    }

    /// The JSON header's `parameters` of a sequence request.
    fn sequence_parameters(flags: crate::client::SequenceFlags) -> Value {
        let client = HttpClient::new("127.0.0.1:1").unwrap();
        let mut r = InferRequest::new("m", vec![Tensor::from_i32("X", vec![1], &[1])]);
        r.sequence = Some(flags);
        let (header, _) = client.encode(&r).unwrap();
        serde_json::from_slice::<Value>(&header).unwrap()["parameters"].clone()
    }

    #[test]
    fn sequence_ids_go_as_numbers_or_as_strings() {
        let flags = crate::client::SequenceFlags {
            id: u64::MAX,
            start: true,
            end: false,
            string_id: false,
        };
        assert_eq!(
            sequence_parameters(flags),
            json!({"sequence_id": u64::MAX, "sequence_start": true, "sequence_end": false})
        );
        assert_eq!(
            sequence_parameters(crate::client::SequenceFlags {
                id: 42,
                end: true,
                string_id: true,
                ..flags
            }),
            json!({"sequence_id": "42", "sequence_start": true, "sequence_end": true})
        );
    }
}
