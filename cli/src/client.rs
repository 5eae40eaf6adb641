//! A small blocking client for Trainyard's HTTP API (AWS Batch's `restJson1` protocol: every
//! operation is `POST /v1/<operation>` with a JSON body).
//!
//! Errors are shaped for people: an API error carries Batch's own message, and a connection
//! error says how to start a server.
//!
//! Requests are signed with SigV4 for `execute-api` (what a deployed stack's API Gateway checks)
//! whenever credentials are found ([`Signer`]); without any they go unsigned to a loopback
//! endpoint (local mode without `--credentials` reads no signature) and are not sent at all to
//! any other.

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

/// How long one call may take in total. Local calls take milliseconds; a minute covers a
/// deployment behind a cold Lambda without letting a dead server hang the command forever.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How many pages a listing follows before giving up. With 100 items a page this is far more
/// than Batch's limits allow in one queue, so hitting it means the server is looping.
pub const MAX_PAGES: usize = 10_000;

/// How many times a call refused for its caller's rate limit is sent again.
pub const THROTTLE_RETRIES: u32 = 5;

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The server answered with an error (`ClientException`, `ServerException`, …).
    Api {
        /// The error type (`x-amzn-ErrorType` or `__type`).
        kind: String,
        /// HTTP status.
        status: u16,
        /// Batch's message.
        message: String,
    },
    /// Nothing answered at the endpoint.
    Unreachable {
        /// The endpoint tried.
        endpoint: String,
        /// What the transport said.
        detail: String,
    },
    /// The server answered with something that is not the API's JSON.
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Api {
                kind,
                status,
                message,
            } => write!(f, "{kind} (HTTP {status}): {message}"),
            Self::Unreachable { endpoint, detail } => write!(
                f,
                "cannot reach Trainyard at {endpoint} ({detail}).\n\
                 Start a local server with `trainyard up`, or point this command at a running \
                 one with --endpoint URL or TRAINYARD_ENDPOINT."
            ),
            Self::Protocol(message) => write!(f, "unexpected response: {message}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// Signs requests for one endpoint with the caller's keys.
pub struct Signer {
    keys: crate::sigv4::Keys,
    region: String,
}

impl Signer {
    /// The signer for `endpoint`: `Ok(None)` means send unsigned (no credentials, loopback);
    /// an error, that nothing should be sent.
    pub fn for_endpoint(endpoint: &str) -> Result<Option<Signer>, String> {
        let keys = crate::sigv4::Keys::from_environment().map_err(|e| format!("{e:#}"))?;
        let Some(keys) = keys else {
            if is_loopback(endpoint) {
                return Ok(None);
            }
            return Err(format!(
                "no AWS credentials to sign requests to {endpoint} with (a deployed stack checks \
                 SigV4 signatures): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                 AWS_PROFILE for a profile in ~/.aws/credentials; for SSO or a role, run \
                 `eval \"$(aws configure export-credentials --format env)\"` first"
            ));
        };
        Ok(Some(Signer {
            keys,
            region: region_for(endpoint),
        }))
    }

    /// The headers that sign `method url` with `headers` and `body`.
    pub fn headers(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String> {
        let request = crate::sigv4::Outgoing {
            method,
            url,
            headers,
            body,
        };
        crate::sigv4::sign_request(
            &self.keys,
            &self.region,
            crate::sigv4::EXECUTE_API,
            &request,
            std::time::SystemTime::now(),
        )
        .map_err(|e| format!("{e:#}"))
    }
}

/// Whether `endpoint`'s host is this machine.
fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The region to sign for: `AWS_REGION`, `AWS_DEFAULT_REGION`, the region in an API Gateway
/// host name (`….execute-api.eu-west-1.amazonaws.com`), else `us-east-1`.
fn region_for(endpoint: &str) -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .or_else(|| {
            let after = endpoint.split(".execute-api.").nth(1)?;
            after.split('.').next().map(str::to_owned)
        })
        .unwrap_or_else(|| "us-east-1".into())
}

/// A client for one endpoint.
pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
    signer: Result<Option<Signer>, String>,
}

impl Client {
    /// A client for `endpoint` (`http://host:port`, with or without a trailing slash).
    pub fn new(endpoint: &str) -> Self {
        let agent = ureq::Agent::config_builder()
            // API errors are answers to show, not transport failures.
            .http_status_as_error(false)
            .timeout_global(Some(CALL_TIMEOUT))
            .build()
            .new_agent();
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        Self {
            agent,
            signer: Signer::for_endpoint(&endpoint),
            endpoint,
        }
    }

    /// Calls `operation` (for example `submitservicejob`) with a JSON body.
    pub fn call(&self, operation: &str, body: &Value) -> Result<Value, ClientError> {
        self.call_under("/v1", operation, body)
    }

    /// Calls one of Trainyard's own operations (`POST /trainyard/v1/{operation}`).
    pub fn call_trainyard(&self, operation: &str, body: &Value) -> Result<Value, ClientError> {
        self.call_under("/trainyard/v1", operation, body)
    }

    /// One call, sent again after a pause while the server says the caller is over its rate
    /// limit (`ThrottlingException`, HTTP 429), as the AWS SDKs do: up to
    /// [`THROTTLE_RETRIES`] times, waiting 0.1 s, 0.2 s, 0.4 s, … (with jitter) in between.
    fn call_under(
        &self,
        prefix: &str,
        operation: &str,
        body: &Value,
    ) -> Result<Value, ClientError> {
        let mut attempt = 0;
        loop {
            match self.send(prefix, operation, body) {
                Err(ClientError::Api { status: 429, .. }) if attempt < THROTTLE_RETRIES => {
                    let base_ms = 100_u64 << attempt;
                    let jitter_ms =
                        u64::from(std::process::id()).wrapping_mul(2_654_435_761) % base_ms.max(1);
                    std::thread::sleep(std::time::Duration::from_millis(base_ms + jitter_ms));
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    fn send(&self, prefix: &str, operation: &str, body: &Value) -> Result<Value, ClientError> {
        let url = format!("{}{prefix}/{operation}", self.endpoint);
        let body = body.to_string().into_bytes();
        let content_type = ("content-type", "application/json");
        let signature = match &self.signer {
            Ok(Some(signer)) => signer
                .headers("POST", &url, &[content_type], &body)
                .map_err(ClientError::Protocol)?,
            Ok(None) => Vec::new(),
            Err(why) => return Err(ClientError::Protocol(why.clone())),
        };
        let mut request = self.agent.post(&url).header(content_type.0, content_type.1);
        for (name, value) in &signature {
            request = request.header(name, value);
        }
        let response = request.send(&body[..]);
        let mut response = match response {
            Ok(response) => response,
            Err(error) => return Err(self.transport_error(&error)),
        };
        let status = response.status().as_u16();
        let kind_header = response
            .headers()
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Protocol(format!("reading the response body: {e}")))?;
        let parsed: Option<Value> = if text.trim().is_empty() {
            Some(json!({}))
        } else {
            serde_json::from_str(&text).ok()
        };
        if (200..300).contains(&status) {
            return parsed.ok_or_else(|| {
                ClientError::Protocol(format!("{operation} returned a body that is not JSON"))
            });
        }
        Err(api_error(status, kind_header, parsed.as_ref(), &text))
    }

    /// Calls a paginated operation until `nextToken` runs out, collecting `items_key` arrays.
    pub fn call_all(
        &self,
        operation: &str,
        body: &Value,
        items_key: &str,
    ) -> Result<Vec<Value>, ClientError> {
        let mut items = Vec::new();
        let mut request = body.clone();
        for _ in 0..MAX_PAGES {
            let page = self.call(operation, &request)?;
            if let Some(list) = page.get(items_key).and_then(Value::as_array) {
                items.extend(list.iter().cloned());
            }
            match page.get("nextToken").and_then(Value::as_str) {
                Some(token) if !token.is_empty() => {
                    request["nextToken"] = Value::String(token.to_owned());
                }
                _ => return Ok(items),
            }
        }
        Err(ClientError::Protocol(format!(
            "{operation} still returned a nextToken after {MAX_PAGES} pages"
        )))
    }

    fn transport_error(&self, error: &ureq::Error) -> ClientError {
        let unreachable = match error {
            ureq::Error::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::NotConnected
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::TimedOut
            ),
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Timeout(_) => {
                true
            }
            _ => false,
        };
        if unreachable {
            ClientError::Unreachable {
                endpoint: self.endpoint.clone(),
                detail: error.to_string(),
            }
        } else {
            ClientError::Protocol(format!("calling {}: {error}", self.endpoint))
        }
    }
}

/// Decodes Batch's error response: the type from `x-amzn-ErrorType` or `__type` (the part after
/// `#` and before `:`, as botocore reads it), the message from `message` or `Message`.
fn api_error(
    status: u16,
    kind_header: Option<String>,
    body: Option<&Value>,
    text: &str,
) -> ClientError {
    let field = |name: &str| body.and_then(|b| b.get(name)).and_then(Value::as_str);
    let kind = kind_header
        .as_deref()
        .or_else(|| field("__type"))
        .map(|k| {
            let k = k.rsplit('#').next().unwrap_or(k);
            k.split(':').next().unwrap_or(k).to_owned()
        })
        .unwrap_or_else(|| {
            if status >= 500 {
                "ServerException".into()
            } else {
                "ClientException".into()
            }
        });
    let message = field("message")
        .or_else(|| field("Message"))
        .map_or_else(|| text.trim().to_owned(), str::to_owned);
    ClientError::Api {
        kind,
        status,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_read_the_type_and_message_the_way_botocore_does() {
        let cases = [
            (
                "header wins",
                400,
                Some("ClientException"),
                r#"{"__type":"Other","message":"bad queue"}"#,
                "ClientException",
                "bad queue",
            ),
            (
                "namespaced __type",
                400,
                None,
                r#"{"__type":"com.amazonaws.batch#ClientException:http://x","Message":"m"}"#,
                "ClientException",
                "m",
            ),
            (
                "no type, server status",
                503,
                None,
                "overloaded",
                "ServerException",
                "overloaded",
            ),
        ];
        for (name, status, header, text, kind, message) in cases {
            let body: Option<Value> = serde_json::from_str(text).ok();
            let error = api_error(status, header.map(str::to_owned), body.as_ref(), text);
            match error {
                ClientError::Api {
                    kind: k,
                    message: m,
                    ..
                } => {
                    assert_eq!(k, kind, "{name}");
                    assert_eq!(m, message, "{name}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_refused_connection_says_how_to_start_a_server() {
        // Bind then drop a listener to find a port where nothing listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let client = Client::new(&format!("http://127.0.0.1:{port}/"));
        let error = client
            .call("describejobqueues", &json!({}))
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unreachable { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("trainyard up"), "{error}");
    }
}
