//! The one HTTP client of the workspace (reqwest): a GET with a time limit, for health probes
//! and `/metrics` scrapes of tritonserver and of workers, and a JSON POST (Triton's repository
//! index).

use std::sync::OnceLock;
use std::time::Duration;

/// A URL component (a path segment, a query value) with everything but RFC 3986's unreserved
/// characters percent-encoded.
pub fn percent_encode(s: &str) -> String {
    const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// A response: its status and its body as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    pub fn is_ok(&self) -> bool {
        self.status == 200
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Nothing came back in time: a hung server accepts the connection and never answers.
    #[error("{url} did not answer within {timeout:?}")]
    TimedOut { url: String, timeout: Duration },
    /// Refused, reset, not HTTP, ... (`cause` is the innermost error, e.g. "Connection refused").
    #[error("{url}: {cause}")]
    Failed { url: String, cause: String },
}

/// One client for the process. It keeps no idle connection: the servers it asks come and go
/// (a pooled connection to a killed server would fail the next probe), and a connection held
/// by one tokio runtime must not be reused from another.
fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            // Loopback and pod addresses are reached directly, whatever HTTP_PROXY says.
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .expect("an HTTP client without TLS or proxies builds")
    })
}

/// Whether a TCP connection to `address` (`host:port`) opens within `within`. For a server
/// on this machine or the cluster's pod network, where a live listener completes the
/// handshake in the kernel at once however busy the process: a dead pod's address (its
/// sandbox gone) drops packets, and a full HTTP timeout would be spent finding that out.
pub async fn reachable(address: &str, within: Duration) -> bool {
    tokio::time::timeout(within, tokio::net::TcpStream::connect(address))
        .await
        .is_ok_and(|connected| connected.is_ok())
}

/// `GET url`, status and body, all within `timeout` (connecting, the headers and the body).
pub async fn get(url: &str, timeout: Duration) -> Result<Response, HttpError> {
    exchange(client().get(url), url, timeout).await
}

/// `POST url` with `body` as JSON, status and body, all within `timeout` (e.g. Triton's
/// `/v2/repository/index`).
pub async fn post_json(
    url: &str,
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<Response, HttpError> {
    exchange(client().post(url).json(body), url, timeout).await
}

async fn exchange(
    request: reqwest::RequestBuilder,
    url: &str,
    timeout: Duration,
) -> Result<Response, HttpError> {
    let exchange = async {
        let response = request.send().await?;
        let status = response.status().as_u16();
        let body = response.text().await?;
        Ok::<_, reqwest::Error>(Response { status, body })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(HttpError::TimedOut {
            url: url.to_string(),
            timeout,
        }),
        Ok(Err(e)) => Err(HttpError::Failed {
            url: url.to_string(),
            cause: innermost(&e),
        }),
        Ok(Ok(response)) => Ok(response),
    }
}

/// The innermost error of a chain: reqwest's own message only names the URL.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut e = e;
    while let Some(source) = e.source() {
        e = source;
    }
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn a_url_component_keeps_only_unreserved_characters() {
        assert_eq!(percent_encode(r#"a{b="c d"}"#), "a%7Bb%3D%22c%20d%22%7D");
        assert_eq!(percent_encode("run-1_a.b~c"), "run-1_a.b~c");
        assert_eq!(percent_encode("é/?"), "%C3%A9%2F%3F");
    }

    /// A server on 127.0.0.1 that answers every connection with `response` (None: reads the
    /// request and never answers, as a hung server does).
    async fn serve(response: Option<&'static str>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                match response {
                    Some(r) => {
                        let _ = stream.write_all(r.as_bytes()).await;
                    }
                    None => held.push(stream),
                }
            }
        });
        address
    }

    #[tokio::test]
    async fn a_get_returns_the_status_and_the_body() {
        let ok = serve(Some(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        ))
        .await;
        let r = get(&format!("http://{ok}/metrics"), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((r.status, r.body.as_str(), r.is_ok()), (200, "hello", true));

        let unavailable = serve(Some(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
        ))
        .await;
        let r = get(&format!("http://{unavailable}/"), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((r.status, r.is_ok()), (503, false));
    }

    #[tokio::test]
    async fn a_post_sends_its_json_body() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !String::from_utf8_lossy(&request).ends_with("{\"ready\":true}") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the body never came");
                request.extend_from_slice(&buf[..n]);
            }
            let reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]";
            stream.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8(request).unwrap()
        });
        let r = post_json(
            &format!("http://{address}/v2/repository/index"),
            &serde_json::json!({"ready": true}),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "[]"));
        let request = server.await.unwrap().to_lowercase();
        assert!(
            request.starts_with("post /v2/repository/index http/1.1"),
            "{request}"
        );
        assert!(
            request.contains("content-type: application/json"),
            "{request}"
        );
    }

    #[tokio::test]
    async fn a_hung_server_costs_the_timeout_and_no_more() {
        let hung = serve(None).await;
        let url = format!("http://{hung}/v2/health/live");
        let started = std::time::Instant::now();
        let e = get(&url, Duration::from_millis(300)).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(e, HttpError::TimedOut { .. }), "{e}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert_eq!(e.to_string(), format!("{url} did not answer within 300ms"));
    }

    #[tokio::test]
    async fn a_refused_connection_says_so() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = get(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, HttpError::Failed { .. }), "{e}");
        assert!(e.to_string().contains("Connection refused"), "{e}");
    }
}
