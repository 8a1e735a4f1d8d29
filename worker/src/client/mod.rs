//! One client interface over Triton's two protocols, so every scenario runs unchanged over gRPC
//! (tonic) or HTTP/REST.

pub mod grpc;
pub mod grpc_frame;
pub mod h2_connection;
pub mod http;
pub mod http1_direct;
pub mod receive_stamp;
pub mod unary_h2;

use crate::metadata::{ModelConfig, ModelMetadata};
use crate::tensor::Tensor;
use std::time::Duration;
use stress_common::signature::ErrorKind;

pub use stress_common::contract::Protocol;

/// Sequence-batcher flags of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceFlags {
    pub id: u64,
    pub start: bool,
    pub end: bool,
    /// Send the id as its decimal string: a model whose CORRID control is TYPE_STRING takes
    /// only string ids. The worker's ids stay the numbers of its block either way.
    pub string_id: bool,
}

#[derive(Debug, Clone)]
pub struct RequestedOutput {
    pub name: String,
    /// Ask for Triton's classification extension: the top `n` classes as "score:index:label".
    pub class_count: Option<u32>,
    /// The declared datatype, when known: HTTP JSON asks for FP16 and BF16 outputs in binary,
    /// which Triton cannot write as JSON.
    pub datatype: Option<crate::tensor::DataType>,
}

#[derive(Debug, Clone)]
pub struct InferRequest {
    pub model: String,
    /// The model version to ask for; empty: the server's choice (its version policy).
    pub version: String,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<RequestedOutput>,
    pub sequence: Option<SequenceFlags>,
    /// Custom integer parameters that reach the model (e.g. `delay_ms`).
    pub int_parameters: Vec<(String, i64)>,
    /// Client-side deadline (see `grpc::GrpcClient::infer_frame` for why it is not sent).
    pub timeout: Option<Duration>,
}

impl InferRequest {
    pub fn new(model: &str, inputs: Vec<Tensor>) -> Self {
        Self {
            model: model.into(),
            version: String::new(),
            inputs,
            outputs: Vec::new(),
            sequence: None,
            int_parameters: Vec::new(),
            timeout: None,
        }
    }
}

/// Reads a connection's answers on another thread than the runtime's, so that an arriving
/// answer does not wake the runtime (`scenarios/pacer.rs` says when).
pub trait AnswerReader: Send {
    /// Whether arriving answers wait in the socket for [`AnswerReader::read_now`] (`on`) or
    /// are read by the client's own task as they come (the default). False when they cannot
    /// wait.
    fn defer(&mut self, on: bool) -> bool;
    /// Reads and handles every answer that has arrived, each with its kernel receive time;
    /// the wakers of the calls answered go to `wakers`, for the caller to wake.
    fn read_now(&mut self, wakers: &mut Vec<std::task::Waker>) -> AnswersRead;
    /// Calls still waiting for their answer on the connection the next call would go on.
    fn unanswered(&self) -> usize;
}

/// What one [`AnswerReader::read_now`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnswersRead {
    /// Answers given an uncertain receive time: a little late, the kernel having merged
    /// their segment with a later answer's while they waited.
    pub uncertain: u64,
    /// Calls still waiting for their answer after the read, on the connection the next call
    /// would go on.
    pub unanswered: usize,
}

#[derive(Debug, Clone, Default)]
pub struct InferResponse {
    /// The version that answered, as the server says (empty when it does not say).
    pub model_version: String,
    pub outputs: Vec<Tensor>,
    /// When the answer reached this host: the kernel's receive time, where the client has it
    /// (`None`: the caller times the answer when it gets it).
    pub received_at: Option<std::time::Instant>,
    /// Just before the request was handed to the kernel, where the client knows (the lean
    /// gRPC call's; `None`: the caller's time before the call is the send).
    pub sent_at: Option<std::time::Instant>,
}

impl InferResponse {
    /// Its latency from `since` (a send): to its kernel receive time where the client has one,
    /// else to now.
    pub fn latency_since(&self, since: std::time::Instant) -> std::time::Duration {
        self.received_at
            .map_or_else(|| since.elapsed(), |at| at.saturating_duration_since(since))
    }

    pub fn output(&self, name: &str) -> Result<&Tensor, MissingOutput> {
        self.outputs
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| MissingOutput {
                name: name.into(),
                outputs: self.outputs.iter().map(|t| t.name.clone()).collect(),
            })
    }
}

/// A response without an output asked for, and the outputs it has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("response has no output {name} (outputs: {outputs:?})")]
pub struct MissingOutput {
    pub name: String,
    pub outputs: Vec<String>,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ClientError {
    /// The client's deadline passed (gRPC DEADLINE_EXCEEDED, or an HTTP client timeout).
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// The server answered with an error.
    #[error("server error ({code}): {message}")]
    Server { code: String, message: String },
    /// The server could not be reached or the connection broke.
    #[error("transport error: {0}")]
    Transport(String),
    /// The server's answer did not follow the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The caller passed a prepared request of the other protocol.
    #[error("a request prepared for another protocol")]
    WrongProtocol,
}

impl ClientError {
    /// What kind of failure it is, typed: a failure record carries it, so its signature does
    /// not have to read it back from the words.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::DeadlineExceeded(_) => ErrorKind::Timeout,
            ClientError::Server { code, .. } => ErrorKind::of_status(code),
            ClientError::Transport(_) => ErrorKind::Transport,
            ClientError::Protocol(_) => ErrorKind::Protocol,
            ClientError::WrongProtocol => ErrorKind::Harness,
        }
    }
}

pub(crate) use stress_common::with_causes;

/// A request already sent ([`TritonClient::send_now`]): its response to come.
pub type SentCall =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<InferResponse, ClientError>> + Send>>;

/// A client for one Triton server.
#[async_trait::async_trait]
pub trait TritonClient: Send + Sync {
    /// The address this client talks to, as given on the command line.
    fn address(&self) -> &str;
    fn protocol(&self) -> Protocol;
    async fn server_live(&self) -> Result<bool, ClientError>;
    async fn server_ready(&self) -> Result<bool, ClientError>;
    async fn model_ready(&self, model: &str) -> Result<bool, ClientError>;
    /// The server's name and version.
    async fn server_metadata(&self) -> Result<(String, String), ClientError>;
    /// The model's `max_batch_size` (0: the model does not batch).
    async fn max_batch_size(&self, model: &str) -> Result<i64, ClientError>;
    /// Whether a version of a model is ready (empty version: the server's choice).
    async fn model_version_ready(&self, model: &str, version: &str) -> Result<bool, ClientError>;
    /// The model's metadata (ModelMetadata / `GET /v2/models/NAME[/versions/V]`).
    async fn model_metadata(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError>;
    /// What the worker reads of the model's config (ModelConfig / `.../config`).
    async fn model_config(&self, model: &str, version: &str) -> Result<ModelConfig, ClientError>;
    /// Converts a request once into its wire form, to be sent many times.
    fn prepare(&self, request: &InferRequest) -> Result<Prepared, ClientError>;
    /// Sends a prepared request; no tensor data is copied.
    async fn infer_prepared(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
    ) -> Result<InferResponse, ClientError>;
    /// Sends a prepared request with a W3C trace context: `traceparent` as gRPC metadata or
    /// an HTTP header. It goes the clients' ordinary way (tonic, reqwest), since their fast
    /// paths send fixed frames and headers; a traced request is a small share of the load.
    /// The deadline is `infer_prepared`'s: kept on the client.
    async fn infer_traced(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
        traceparent: &str,
    ) -> Result<InferResponse, ClientError>;
    /// Sends a prepared request now, from any thread, without waiting: the returned future is
    /// its response (the deadline runs from now). `None` when this client cannot (HTTP, no
    /// connection made yet, the server's stream limit reached): use `infer_prepared`.
    fn send_now(&self, _prepared: &Prepared, _timeout: Option<Duration>) -> Option<SentCall> {
        None
    }
    /// The answers of [`TritonClient::send_now`]'s calls, read by the caller's thread (an open
    /// loop's pacer) instead of waking the runtime for each; `None` when this client cannot.
    fn answer_reader(&self) -> Option<Box<dyn AnswerReader>> {
        None
    }
    async fn infer(&self, request: &InferRequest) -> Result<InferResponse, ClientError> {
        let prepared = self.prepare(request)?;
        self.infer_prepared(&prepared, request.timeout).await
    }
    /// A session for a sequence's requests: one bidirectional stream over gRPC (as Triton's
    /// own stress test does), consecutive requests over HTTP.
    async fn sequence_session(&self) -> Result<Box<dyn SequenceSession>, ClientError>;
    /// A session for a decoupled model's requests: one ModelStreamInfer stream (gRPC only;
    /// Triton's HTTP endpoint answers one response per request).
    async fn decoupled_session(&self) -> Result<Box<dyn DecoupledSession>, ClientError> {
        Err(ClientError::Protocol(format!(
            "decoupled models need gRPC streaming; {} has no such call",
            self.protocol().as_str()
        )))
    }
}

#[async_trait::async_trait]
pub trait SequenceSession: Send {
    /// Sends one request of the sequence and waits for its response.
    async fn infer(&mut self, request: &InferRequest) -> Result<InferResponse, ClientError>;
    /// Ends the session cleanly (after the last request, or after an error).
    async fn close(self: Box<Self>) {}
}

/// Requests to a decoupled model, one at a time on one stream: each request's responses are read
/// until the one carrying the final flag before the next request goes out, so no response needs
/// demultiplexing (each is still checked to carry its request's id).
#[async_trait::async_trait]
pub trait DecoupledSession: Send {
    /// Sends `request` and reads its responses until the final one, waiting at most `silence`
    /// for each. Errors only when the request could not be sent; how the stream ended, and what
    /// came before, is in the outcome.
    async fn infer(
        &mut self,
        request: &InferRequest,
        silence: Duration,
    ) -> Result<StreamOutcome, ClientError>;
    /// Ends the session cleanly: half-closes the stream and reads it to its end.
    async fn close(self: Box<Self>);
}

/// One response of a decoupled model's stream.
#[derive(Debug, Clone)]
pub struct StreamResponse {
    pub at: std::time::Instant,
    pub response: InferResponse,
    /// It carried `triton_final_response: true`.
    pub is_final: bool,
}

impl StreamResponse {
    /// Whether it carries data: every response but an empty final one (Triton's answer to a
    /// final flag sent without a response, as `triton_enable_empty_final_response` asks).
    pub fn has_data(&self) -> bool {
        !(self.is_final && self.response.outputs.is_empty())
    }
}

/// How a decoupled request's response stream ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEnd {
    /// The final response came (the last of `responses`).
    Final,
    /// The server ended the stream before the final response.
    Closed,
    /// Nothing came for this long (the silence limit).
    Silent(Duration),
    /// An error instead of a response: the stream's `error_message`, a transport error, a
    /// response for another request.
    Error(ClientError),
}

/// Every response to one request of a decoupled model, as it arrived.
#[derive(Debug, Clone)]
pub struct StreamOutcome {
    pub sent: std::time::Instant,
    pub responses: Vec<StreamResponse>,
    pub end: StreamEnd,
}

/// A request in its wire form.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// A framed, encoded `ModelInferRequest`.
    Grpc(bytes::Bytes),
    Http {
        /// `NAME` or `NAME/versions/V`, as the URL path names the model.
        model_path: String,
        body: bytes::Bytes,
        /// Length of the JSON header when the binary tensor extension is used.
        header_length: Option<usize>,
        /// The path and headers of every send of it on the direct pool, made once (None: a
        /// model name that is no URI path as it stands; reqwest's URL encoding sends it).
        head: Option<std::sync::Arc<http::DirectHead>>,
    },
}

/// Connects to a server over the given protocol. The connection is shared by all of a worker's
/// streams (one HTTP/2 connection for gRPC, one keep-alive pool for HTTP).
pub async fn connect(
    protocol: Protocol,
    address: &str,
    http_binary: bool,
) -> Result<std::sync::Arc<dyn TritonClient>, ClientError> {
    Ok(match protocol {
        Protocol::Grpc => std::sync::Arc::new(grpc::GrpcClient::connect(address).await?),
        Protocol::Http => {
            std::sync::Arc::new(http::HttpClient::new(address)?.with_binary(http_binary))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_error_has_its_kind_by_type() {
        let server = |code: &str| ClientError::Server {
            code: code.into(),
            message: "transport error in the model's words".into(),
        };
        assert_eq!(server("InvalidArgument").kind(), ErrorKind::Rejected);
        assert_eq!(server("Internal").kind(), ErrorKind::ServerError);
        assert_eq!(server("503").kind(), ErrorKind::Unavailable);
        assert_eq!(server("stream").kind(), ErrorKind::ServerError);
        assert_eq!(
            ClientError::DeadlineExceeded("1s".into()).kind(),
            ErrorKind::Timeout
        );
        assert_eq!(
            ClientError::Transport("reset".into()).kind(),
            ErrorKind::Transport
        );
        assert_eq!(
            ClientError::Protocol("no final".into()).kind(),
            ErrorKind::Protocol
        );
        assert_eq!(ClientError::WrongProtocol.kind(), ErrorKind::Harness);
        // Each agrees with the words a record of it carries, for records written before kinds
        // were typed.
        for e in [
            server("Internal"),
            server("InvalidArgument"),
            ClientError::DeadlineExceeded("1s".into()),
            ClientError::Transport("reset".into()),
            ClientError::Protocol("x".into()),
            ClientError::WrongProtocol,
        ] {
            assert_eq!(ErrorKind::of(&e.to_string()), e.kind(), "{e}");
        }
    }
}
