//! KServe v2 over HTTP/REST (reqwest, one keep-alive pool per server). Tensors go either as JSON
//! arrays or with Triton's binary tensor extension (`Inference-Header-Content-Length`: a JSON
//! header followed by the raw tensor bytes), chosen per client.

use super::{
    ClientError, InferRequest, InferResponse, Prepared, Protocol, SequenceSession, TritonClient,
};
use crate::tensor::{DataType, Tensor};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::time::Duration;

const HEADER_LENGTH: &str = "Inference-Header-Content-Length";

#[derive(Clone)]
pub struct HttpClient {
    address: String,
    base: String,
    http: reqwest::Client,
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
        Ok(Self {
            address: address.into(),
            base: format!("http://{address}"),
            http,
            binary: true,
        })
    }

    pub fn with_binary(mut self, binary: bool) -> Self {
        self.binary = binary;
        self
    }

    async fn get_ok(&self, path: &str) -> Result<bool, ClientError> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(transport)?;
        Ok(r.status().is_success())
    }

    /// The request as (JSON header, binary payload): the payload is empty in JSON mode.
    fn encode(&self, request: &InferRequest) -> Result<(Vec<u8>, Vec<Bytes>), ClientError> {
        let mut parameters = Map::new();
        if let Some(seq) = request.sequence {
            parameters.insert("sequence_id".into(), json!(seq.id));
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
                if self.binary {
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
                p.insert("binary_data".into(), json!(self.binary));
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
        let v: Value = serde_json::from_slice(&json_part)
            .map_err(|e| ClientError::Protocol(format!("response is not JSON: {e}")))?;
        let outputs = v["outputs"]
            .as_array()
            .ok_or_else(|| ClientError::Protocol(format!("response without outputs: {v}")))?;
        let mut tensors = Vec::with_capacity(outputs.len());
        for o in outputs {
            let name = o["name"].as_str().unwrap_or_default().to_string();
            let dt = o["datatype"].as_str().unwrap_or_default();
            let datatype = DataType::parse(dt).ok_or_else(|| {
                ClientError::Protocol(format!("output {name} has unsupported datatype {dt}"))
            })?;
            let shape: Vec<i64> = o["shape"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let data = if let Some(size) = o["parameters"]["binary_data_size"].as_u64() {
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
                json_to_tensor_data(&name, datatype, &o["data"])?
            };
            tensors.push(Tensor {
                name,
                datatype,
                shape,
                data,
            });
        }
        Ok(InferResponse { outputs: tensors })
    }
}

fn tensor_to_json(t: &Tensor) -> Result<Value, ClientError> {
    Ok(match t.datatype {
        DataType::Int32 => json!(t.to_i32().map_err(ClientError::Protocol)?),
        DataType::Uint64 => json!(
            t.data
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect::<Vec<_>>()
        ),
        DataType::Fp32 => json!(
            t.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect::<Vec<_>>()
        ),
        DataType::Bytes => json!(t.to_strings().map_err(ClientError::Protocol)?),
    })
}

fn json_to_tensor_data(name: &str, datatype: DataType, data: &Value) -> Result<Bytes, ClientError> {
    let values = data
        .as_array()
        .ok_or_else(|| ClientError::Protocol(format!("output {name} has no data array")))?;
    let bad = || ClientError::Protocol(format!("output {name}: data does not match {datatype:?}"));
    let mut out = Vec::new();
    match datatype {
        DataType::Int32 => {
            for v in values {
                out.extend_from_slice(&(v.as_i64().ok_or_else(bad)? as i32).to_le_bytes());
            }
        }
        DataType::Uint64 => {
            for v in values {
                out.extend_from_slice(&v.as_u64().ok_or_else(bad)?.to_le_bytes());
            }
        }
        DataType::Fp32 => {
            for v in values {
                out.extend_from_slice(&(v.as_f64().ok_or_else(bad)? as f32).to_le_bytes());
            }
        }
        DataType::Bytes => {
            let strings: Vec<String> = values
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
                .collect::<Result<_, _>>()?;
            return Ok(Tensor::from_strings(name, vec![], &strings).data);
        }
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
        let r = self
            .http
            .get(format!("{}/v2/models/{model}/config", self.base))
            .send()
            .await
            .map_err(transport)?;
        if !r.status().is_success() {
            return Err(ClientError::Server {
                code: r.status().as_u16().to_string(),
                message: format!("no config for model {model}"),
            });
        }
        let v: Value = r.json().await.map_err(transport)?;
        Ok(v["max_batch_size"].as_i64().unwrap_or(0))
    }

    fn prepare(&self, request: &InferRequest) -> Result<Prepared, ClientError> {
        let (header, payload) = self.encode(request)?;
        let header_length = (!payload.is_empty()).then_some(header.len());
        let mut body = header;
        for p in &payload {
            body.extend_from_slice(p);
        }
        Ok(Prepared::Http {
            model: request.model.clone(),
            body: Bytes::from(body),
            header_length,
        })
    }

    async fn infer_prepared(
        &self,
        prepared: &Prepared,
        timeout: Option<Duration>,
    ) -> Result<InferResponse, ClientError> {
        let Prepared::Http {
            model,
            body,
            header_length,
        } = prepared
        else {
            return Err(ClientError::WrongProtocol);
        };
        let mut builder = self
            .http
            .post(format!("{}/v2/models/{model}/infer", self.base));
        builder = match header_length {
            Some(n) => builder
                .header(HEADER_LENGTH, *n)
                .header("Content-Type", "application/octet-stream"),
            None => builder.header("Content-Type", "application/json"),
        };
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let response = builder.body(body.clone()).send().await.map_err(transport)?;
        let status = response.status();
        let header_length = response
            .headers()
            .get(HEADER_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let body = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let message = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            return Err(ClientError::Server {
                code: status.as_u16().to_string(),
                message,
            });
        }
        Self::decode(header_length, body)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
