//! KServe v2 over gRPC: tonic's generated client on one HTTP/2 connection per server
//! (`H2Connection`), shared by every stream of the worker; tensors travel in
//! `raw_input_contents` / `raw_output_contents`. The load scenario's requests are encoded once
//! and sent as ready gRPC frames.

use super::grpc_frame;
use super::h2_connection::H2Connection;
use super::unary_h2::Answer;
use super::{
    ClientError, DecoupledSession, InferRequest, InferResponse, Prepared, Protocol, SentCall,
    SequenceSession, StreamEnd, StreamOutcome, StreamResponse, TritonClient,
};
use crate::metadata::{ConfigTensor, ModelConfig, ModelMetadata, SequenceBatching, TensorMetadata};
use crate::tensor::{DataType, Tensor};
use prost::Message;
use std::collections::HashMap;
use std::time::Duration;
use triton_proto::{
    self as proto, InferParameter, ModelInferRequest, ModelStreamInferResponse,
    grpc_inference_service_client::GrpcInferenceServiceClient,
    infer_parameter::ParameterChoice,
    model_infer_request::{InferInputTensor, InferRequestedOutputTensor},
};

/// Request parameter that makes Triton answer a final flag sent without a response with an empty
/// response of its own (Triton's parameters extension); without it a stream whose model sends
/// the flag alone has no way to say that a request is complete.
pub const ENABLE_EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";
/// Response parameter Triton sets on a decoupled model's streamed responses: true on the last.
pub const FINAL_RESPONSE: &str = "triton_final_response";

/// ModelInfer's path, as tonic's generated client names it.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// The W3C trace context's metadata key (gRPC metadata keys are lowercase).
const TRACEPARENT: &str = "traceparent";

#[derive(Clone)]
pub struct GrpcClient {
    connection: H2Connection,
    client: GrpcInferenceServiceClient<H2Connection>,
}

fn status_error(status: tonic::Status) -> ClientError {
    match status.code() {
        tonic::Code::DeadlineExceeded => ClientError::DeadlineExceeded(status.message().into()),
        // tonic's own deadline timer fires as CANCELLED "Timeout expired" when it beats the
        // server's DEADLINE_EXCEEDED.
        tonic::Code::Cancelled if status.message() == "Timeout expired" => {
            ClientError::DeadlineExceeded(status.message().into())
        }
        // "tcp connect error" alone does not say why: add the causes ("Connection refused").
        tonic::Code::Unavailable => ClientError::Transport(super::with_causes(
            status.message().to_string(),
            std::error::Error::source(&status),
        )),
        code => ClientError::Server {
            code: format!("{code:?}"),
            message: status.message().into(),
        },
    }
}

fn param(choice: ParameterChoice) -> InferParameter {
    InferParameter {
        parameter_choice: Some(choice),
    }
}

impl GrpcClient {
    pub async fn connect(address: &str) -> Result<Self, ClientError> {
        let connection = H2Connection::connect(address).await.map_err(status_error)?;
        let origin = connection.uri("/");
        Ok(Self {
            client: GrpcInferenceServiceClient::with_origin(connection.clone(), origin)
                .max_decoding_message_size(grpc_frame::MAX_MESSAGE)
                .max_encoding_message_size(usize::MAX),
            connection,
        })
    }

    /// The wire form of a request. Tensor data is shared (`Bytes`), so converting a prepared
    /// request again per send copies no payload.
    pub fn to_proto(request: &InferRequest) -> ModelInferRequest {
        let mut parameters = HashMap::new();
        if let Some(seq) = request.sequence {
            let id = if seq.string_id {
                ParameterChoice::StringParam(seq.id.to_string())
            } else {
                // Triton accepts int64_param or string_param here, not uint64_param.
                ParameterChoice::Int64Param(seq.id as i64)
            };
            parameters.insert("sequence_id".to_string(), param(id));
            parameters.insert(
                "sequence_start".to_string(),
                param(ParameterChoice::BoolParam(seq.start)),
            );
            parameters.insert(
                "sequence_end".to_string(),
                param(ParameterChoice::BoolParam(seq.end)),
            );
        }
        for (k, v) in &request.int_parameters {
            parameters.insert(k.clone(), param(ParameterChoice::Int64Param(*v)));
        }
        ModelInferRequest {
            model_name: request.model.clone(),
            model_version: request.version.clone(),
            id: String::new(),
            parameters,
            inputs: request
                .inputs
                .iter()
                .map(|t| InferInputTensor {
                    name: t.name.clone(),
                    datatype: t.datatype.as_str().into(),
                    shape: t.shape.clone(),
                    parameters: HashMap::new(),
                    contents: None,
                })
                .collect(),
            outputs: request
                .outputs
                .iter()
                .map(|o| InferRequestedOutputTensor {
                    name: o.name.clone(),
                    parameters: o
                        .class_count
                        .map(|n| {
                            HashMap::from([(
                                "classification".to_string(),
                                param(ParameterChoice::Int64Param(n as i64)),
                            )])
                        })
                        .unwrap_or_default(),
                })
                .collect(),
            raw_input_contents: request.inputs.iter().map(|t| t.data.clone()).collect(),
        }
    }

    pub fn from_proto(
        mut response: proto::ModelInferResponse,
    ) -> Result<InferResponse, ClientError> {
        if response.raw_output_contents.len() != response.outputs.len() {
            return Err(ClientError::Protocol(format!(
                "{} outputs but {} raw output buffers",
                response.outputs.len(),
                response.raw_output_contents.len()
            )));
        }
        let outputs = std::mem::take(&mut response.outputs)
            .into_iter()
            .zip(std::mem::take(&mut response.raw_output_contents))
            .map(|(o, data)| {
                let datatype = DataType::parse(&o.datatype).ok_or_else(|| {
                    ClientError::Protocol(format!(
                        "output {} has unsupported datatype {}",
                        o.name, o.datatype
                    ))
                })?;
                Ok(Tensor {
                    name: o.name,
                    datatype,
                    shape: o.shape,
                    data,
                })
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        Ok(InferResponse {
            model_version: response.model_version,
            outputs,
            received_at: None,
            sent_at: None,
        })
    }

    /// Sends an encoded ModelInfer request (the load scenario's hot path): no per-request
    /// encoding or copying, and the response's tensors are slices of the received bytes.
    ///
    /// The deadline is enforced here, on the client, and not sent as `grpc-timeout`: when
    /// Triton 2.51 expires a deadline itself it resets the stream twice, which the h2 crate
    /// treats as a connection PROTOCOL_ERROR that fails every request sharing the connection.
    pub async fn infer_frame(
        &self,
        frame: bytes::Bytes,
        timeout: Option<Duration>,
    ) -> Result<InferResponse, ClientError> {
        Self::answer(self.connection.unary(MODEL_INFER, frame), timeout).await
    }

    /// A ModelInfer call's response within its deadline, decoded, with its receive time.
    async fn answer(
        call: impl std::future::Future<Output = Result<Answer, tonic::Status>>,
        timeout: Option<Duration>,
    ) -> Result<InferResponse, ClientError> {
        let Answer {
            message,
            arrived,
            sent,
        } = match timeout {
            Some(t) => tokio::time::timeout(t, call)
                .await
                .map_err(|_| ClientError::DeadlineExceeded(format!("no response within {t:?}")))?,
            None => call.await,
        }
        .map_err(status_error)?;
        let response = proto::ModelInferResponse::decode(message)
            .map_err(|e| ClientError::Protocol(format!("ModelInferResponse: {e}")))?;
        let mut response = Self::from_proto(response)?;
        response.received_at = arrived;
        response.sent_at = sent;
        Ok(response)
    }

    pub async fn model_config_proto(
        &self,
        model: &str,
        version: &str,
    ) -> Result<proto::ModelConfig, ClientError> {
        let response = self
            .client
            .clone()
            .model_config(proto::ModelConfigRequest {
                name: model.into(),
                version: version.into(),
            })
            .await
            .map_err(status_error)?;
        response
            .into_inner()
            .config
            .ok_or_else(|| ClientError::Protocol("ModelConfig response without a config".into()))
    }

    pub async fn model_statistics(
        &self,
        model: &str,
    ) -> Result<proto::ModelStatisticsResponse, ClientError> {
        Ok(self
            .client
            .clone()
            .model_statistics(proto::ModelStatisticsRequest {
                name: model.into(),
                version: String::new(),
            })
            .await
            .map_err(status_error)?
            .into_inner())
    }

    pub async fn repository_index(&self) -> Result<proto::RepositoryIndexResponse, ClientError> {
        Ok(self
            .client
            .clone()
            .repository_index(proto::RepositoryIndexRequest {
                repository_name: String::new(),
                ready: false,
            })
            .await
            .map_err(status_error)?
            .into_inner())
    }

    pub async fn model_metadata_proto(
        &self,
        model: &str,
        version: &str,
    ) -> Result<proto::ModelMetadataResponse, ClientError> {
        Ok(self
            .client
            .clone()
            .model_metadata(proto::ModelMetadataRequest {
                name: model.into(),
                version: version.into(),
            })
            .await
            .map_err(status_error)?
            .into_inner())
    }
}

#[async_trait::async_trait]
impl TritonClient for GrpcClient {
    fn address(&self) -> &str {
        self.connection.address()
    }

    fn protocol(&self) -> Protocol {
        Protocol::Grpc
    }

    async fn server_live(&self) -> Result<bool, ClientError> {
        let r = self
            .client
            .clone()
            .server_live(proto::ServerLiveRequest {})
            .await
            .map_err(status_error)?;
        Ok(r.into_inner().live)
    }

    async fn server_ready(&self) -> Result<bool, ClientError> {
        let r = self
            .client
            .clone()
            .server_ready(proto::ServerReadyRequest {})
            .await
            .map_err(status_error)?;
        Ok(r.into_inner().ready)
    }

    async fn model_ready(&self, model: &str) -> Result<bool, ClientError> {
        let r = self
            .client
            .clone()
            .model_ready(proto::ModelReadyRequest {
                name: model.into(),
                version: String::new(),
            })
            .await
            .map_err(status_error)?;
        Ok(r.into_inner().ready)
    }

    async fn server_metadata(&self) -> Result<(String, String), ClientError> {
        let r = self
            .client
            .clone()
            .server_metadata(proto::ServerMetadataRequest {})
            .await
            .map_err(status_error)?
            .into_inner();
        Ok((r.name, r.version))
    }

    async fn max_batch_size(&self, model: &str) -> Result<i64, ClientError> {
        Ok(self.model_config_proto(model, "").await?.max_batch_size as i64)
    }

    async fn model_version_ready(&self, model: &str, version: &str) -> Result<bool, ClientError> {
        let r = self
            .client
            .clone()
            .model_ready(proto::ModelReadyRequest {
                name: model.into(),
                version: version.into(),
            })
            .await
            .map_err(status_error)?;
        Ok(r.into_inner().ready)
    }

    async fn model_metadata(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        let m = self.model_metadata_proto(model, version).await?;
        let tensors = |list: Vec<proto::model_metadata_response::TensorMetadata>| {
            list.into_iter()
                .map(|t| TensorMetadata {
                    name: t.name,
                    datatype: t.datatype,
                    shape: t.shape,
                })
                .collect()
        };
        Ok(ModelMetadata {
            name: m.name,
            versions: m.versions,
            platform: m.platform,
            inputs: tensors(m.inputs),
            outputs: tensors(m.outputs),
        })
    }

    async fn model_config(&self, model: &str, version: &str) -> Result<ModelConfig, ClientError> {
        let c = self.model_config_proto(model, version).await?;
        let data_type = |t: i32| {
            proto::DataType::try_from(t)
                .map(|d| d.as_str_name().to_string())
                .unwrap_or_else(|_| format!("data type {t}"))
        };
        Ok(ModelConfig {
            name: c.name,
            max_batch_size: c.max_batch_size as i64,
            inputs: c
                .input
                .into_iter()
                .map(|i| ConfigTensor {
                    data_type: data_type(i.data_type),
                    name: i.name,
                    dims: i.dims,
                    reshape: i.reshape.map(|r| r.shape),
                    optional: i.optional,
                    is_shape_tensor: i.is_shape_tensor,
                })
                .collect(),
            outputs: c
                .output
                .into_iter()
                .map(|o| ConfigTensor {
                    data_type: data_type(o.data_type),
                    name: o.name,
                    dims: o.dims,
                    reshape: o.reshape.map(|r| r.shape),
                    optional: false,
                    is_shape_tensor: o.is_shape_tensor,
                })
                .collect(),
            decoupled: c.model_transaction_policy.is_some_and(|p| p.decoupled),
            sequence_batching: match &c.scheduling_choice {
                Some(proto::model_config::SchedulingChoice::SequenceBatching(s)) => {
                    Some(SequenceBatching::from_proto(s))
                }
                _ => None,
            },
        })
    }

    fn prepare(&self, request: &InferRequest) -> Result<Prepared, ClientError> {
        Ok(Prepared::Grpc(grpc_frame::frame(&Self::to_proto(request))))
    }

    async fn infer_prepared(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
    ) -> Result<InferResponse, ClientError> {
        match prepared {
            Prepared::Grpc(frame) => self.infer_frame(frame.clone(), timeout).await,
            Prepared::Http { .. } => Err(ClientError::WrongProtocol),
        }
    }

    async fn infer_traced(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
        traceparent: &str,
    ) -> Result<InferResponse, ClientError> {
        let Prepared::Grpc(frame) = prepared else {
            return Err(ClientError::WrongProtocol);
        };
        // The lean connection's call, as the load's own, with the kernel's receive time of
        // its answer. Triton 2.51 reads the context as a C string (`GrpcServerCarrier::Get`),
        // valid only where a NUL follows it in gRPC's buffer: ~9% of contexts are lost so,
        // through tonic as through this (worker/tests/store.rs).
        let metadata = [(TRACEPARENT, traceparent)];
        let call = self
            .connection
            .unary_with(MODEL_INFER, &metadata, frame.clone());
        Self::answer(call, timeout).await
    }

    fn answer_reader(&self) -> Option<Box<dyn super::AnswerReader>> {
        Some(Box::new(self.connection.answer_reader()))
    }

    fn send_now(&self, prepared: &Prepared, timeout: Option<Duration>) -> Option<SentCall> {
        let Prepared::Grpc(frame) = prepared else {
            return None;
        };
        let call = self.connection.try_start_unary(MODEL_INFER, frame)?;
        Some(Box::pin(Self::answer(call, timeout)))
    }

    async fn sequence_session(&self) -> Result<Box<dyn SequenceSession>, ClientError> {
        Ok(Box::new(GrpcSequenceSession {
            client: self.client.clone(),
            tx: None,
            responses: None,
        }))
    }

    async fn decoupled_session(&self) -> Result<Box<dyn DecoupledSession>, ClientError> {
        Ok(Box::new(GrpcDecoupledSession {
            client: self.client.clone(),
            tx: None,
            responses: None,
            sent: 0,
            broken: false,
        }))
    }
}

/// One `ModelStreamInfer` call; requests go out one at a time and each waits for its response,
/// so responses are checked in order. The call is opened with the first request already queued:
/// tonic returns from a streaming call only once the server sends its response headers, which
/// Triton does after it has read a request.
struct GrpcSequenceSession {
    client: GrpcInferenceServiceClient<H2Connection>,
    tx: Option<tokio::sync::mpsc::Sender<ModelInferRequest>>,
    responses: Option<tonic::Streaming<ModelStreamInferResponse>>,
}

impl GrpcSequenceSession {
    async fn exchange(&mut self, request: &InferRequest) -> Result<InferResponse, ClientError> {
        let message = GrpcClient::to_proto(request);
        match &self.tx {
            Some(tx) => tx
                .send(message)
                .await
                .map_err(|_| ClientError::Transport("the stream was closed".into()))?,
            None => {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                tx.send(message).await.expect("the receiver is alive");
                let response = self
                    .client
                    .model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx))
                    .await
                    .map_err(status_error)?;
                self.tx = Some(tx);
                self.responses = Some(response.into_inner());
            }
        }
        let responses = self.responses.as_mut().expect("opened above");
        match responses.message().await {
            Ok(Some(r)) if !r.error_message.is_empty() => Err(ClientError::Server {
                code: "stream".into(),
                message: r.error_message,
            }),
            Ok(Some(r)) => GrpcClient::from_proto(r.infer_response.ok_or_else(|| {
                ClientError::Protocol("stream response without infer_response".into())
            })?),
            Ok(None) => Err(ClientError::Transport("the server ended the stream".into())),
            Err(status) => Err(status_error(status)),
        }
    }
}

#[async_trait::async_trait]
impl SequenceSession for GrpcSequenceSession {
    /// Half-closes the request stream and reads the stream to its end, so the call finishes
    /// with a status instead of a client RST_STREAM (servers rate-limit resets).
    async fn close(mut self: Box<Self>) {
        self.tx = None;
        if let Some(mut responses) = self.responses.take() {
            let drain = async { while let Ok(Some(_)) = responses.message().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        }
    }

    async fn infer(&mut self, request: &InferRequest) -> Result<InferResponse, ClientError> {
        match request.timeout {
            Some(t) => tokio::time::timeout(t, self.exchange(request))
                .await
                .map_err(|_| ClientError::DeadlineExceeded(format!("no response within {t:?}")))?,
            None => self.exchange(request).await,
        }
    }
}

/// One `ModelStreamInfer` call for a decoupled model's requests, one at a time (see
/// [`DecoupledSession`]). Every request asks for an explicit final response and carries its own
/// id, which each of its responses must echo.
struct GrpcDecoupledSession {
    client: GrpcInferenceServiceClient<H2Connection>,
    tx: Option<tokio::sync::mpsc::Sender<ModelInferRequest>>,
    responses: Option<tonic::Streaming<ModelStreamInferResponse>>,
    /// Requests sent so far: the next one's id.
    sent: u64,
    /// A request's stream ended without its final response: later responses could belong to it.
    broken: bool,
}

/// Whether a streamed response is its request's last (`triton_final_response: true`).
pub fn is_final_response(response: &proto::ModelInferResponse) -> bool {
    matches!(
        response.parameters.get(FINAL_RESPONSE),
        Some(InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(true))
        })
    )
}

impl GrpcDecoupledSession {
    /// Sends a request: on the open stream, or opening it with the request already queued
    /// (tonic returns from a streaming call once Triton, having read a request, sends headers).
    async fn send(
        &mut self,
        message: ModelInferRequest,
        silence: Duration,
    ) -> Result<bool, ClientError> {
        if let Some(tx) = &self.tx {
            tx.send(message)
                .await
                .map_err(|_| ClientError::Transport("the stream was closed".into()))?;
            return Ok(true);
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(message).await.expect("the receiver is alive");
        let open = self
            .client
            .model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx));
        match tokio::time::timeout(silence, open).await {
            Err(_) => Ok(false),
            Ok(response) => {
                self.responses = Some(response.map_err(status_error)?.into_inner());
                self.tx = Some(tx);
                Ok(true)
            }
        }
    }

    /// Reads one request's responses until its final one, the stream's end, an error, or
    /// `silence` without a response.
    async fn read(
        &mut self,
        id: &str,
        silence: Duration,
        responses: &mut Vec<StreamResponse>,
    ) -> StreamEnd {
        let stream = self.responses.as_mut().expect("opened by send");
        loop {
            let message = match tokio::time::timeout(silence, stream.message()).await {
                Err(_) => return StreamEnd::Silent(silence),
                Ok(Err(status)) => return StreamEnd::Error(status_error(status)),
                Ok(Ok(None)) => return StreamEnd::Closed,
                Ok(Ok(Some(m))) => m,
            };
            let at = std::time::Instant::now();
            if !message.error_message.is_empty() {
                return StreamEnd::Error(ClientError::Server {
                    code: "stream".into(),
                    message: message.error_message,
                });
            }
            let Some(response) = message.infer_response else {
                return StreamEnd::Error(ClientError::Protocol(
                    "stream response without infer_response".into(),
                ));
            };
            if response.id != id {
                // What the stray response held, to tell a server's race (an empty final
                // response whose request was already released) from a response of another
                // request.
                return StreamEnd::Error(ClientError::Protocol(format!(
                    "a response with id {:?} (model {:?}, {} output(s), final: {}) on a stream \
                     waiting for request {id:?}",
                    response.id,
                    response.model_name,
                    response.outputs.len(),
                    is_final_response(&response),
                )));
            }
            let is_final = is_final_response(&response);
            match GrpcClient::from_proto(response) {
                Ok(response) => responses.push(StreamResponse {
                    at,
                    response,
                    is_final,
                }),
                Err(e) => return StreamEnd::Error(e),
            }
            if is_final {
                return StreamEnd::Final;
            }
        }
    }
}

#[async_trait::async_trait]
impl DecoupledSession for GrpcDecoupledSession {
    async fn infer(
        &mut self,
        request: &InferRequest,
        silence: Duration,
    ) -> Result<StreamOutcome, ClientError> {
        if self.broken {
            return Err(ClientError::Protocol(
                "the stream broke on an earlier request".into(),
            ));
        }
        let mut message = GrpcClient::to_proto(request);
        self.sent += 1;
        message.id = self.sent.to_string();
        message.parameters.insert(
            ENABLE_EMPTY_FINAL_RESPONSE.into(),
            param(ParameterChoice::BoolParam(true)),
        );
        let id = message.id.clone();
        let sent = std::time::Instant::now();
        let mut responses = Vec::new();
        let end = if self.send(message, silence).await? {
            self.read(&id, silence, &mut responses).await
        } else {
            StreamEnd::Silent(silence)
        };
        self.broken = end != StreamEnd::Final;
        Ok(StreamOutcome {
            sent,
            responses,
            end,
        })
    }

    /// As a sequence session's: half-close, then read to the end, so the call ends with a
    /// status instead of a client RST_STREAM.
    async fn close(mut self: Box<Self>) {
        self.tx = None;
        if let Some(mut responses) = self.responses.take() {
            let drain = async { while let Ok(Some(_)) = responses.message().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::SequenceFlags;

    fn sequence_id(flags: SequenceFlags) -> Option<ParameterChoice> {
        let mut r = InferRequest::new("m", vec![Tensor::from_i32("X", vec![1], &[1])]);
        r.sequence = Some(flags);
        let p = GrpcClient::to_proto(&r).parameters;
        let get = |k: &str| p.get(k).and_then(|v| v.parameter_choice.clone());
        assert_eq!(
            get("sequence_start"),
            Some(ParameterChoice::BoolParam(flags.start))
        );
        assert_eq!(
            get("sequence_end"),
            Some(ParameterChoice::BoolParam(flags.end))
        );
        get("sequence_id")
    }

    #[test]
    fn sequence_ids_go_as_int64_or_string_params() {
        let flags = SequenceFlags {
            id: 7,
            start: true,
            end: false,
            string_id: false,
        };
        assert_eq!(sequence_id(flags), Some(ParameterChoice::Int64Param(7)));
        let string = SequenceFlags {
            id: 1 << 40,
            end: true,
            string_id: true,
            ..flags
        };
        assert_eq!(
            sequence_id(string),
            Some(ParameterChoice::StringParam("1099511627776".into()))
        );
    }
}
