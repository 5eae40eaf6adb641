//! Decoding request bodies. Messages name the member at fault (`retryStrategy.attempts: invalid
//! type …`) using the path serde was at when it failed.

use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Decodes a JSON request body into `T`. An empty body is read as `{}` (botocore sends `{}` for
/// operations without input, some clients send nothing).
pub fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::client(format!("Malformed JSON in request body: {inner}"))
        } else if path == "." {
            ApiError::client(format!("Invalid request body: {inner}"))
        } else {
            ApiError::client(format!("Invalid value for {path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::client(format!("Malformed JSON in request body: {e}")))?;
    Ok(value)
}

/// Encodes a response body. Serialising our own wire types cannot fail in practice; if it ever
/// does, it is Trainyard's fault (a `ServerException`), logged with the cause.
pub fn to_value<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(value).map_err(|e| {
        tracing::error!(error = %e, "response encoding failed");
        ApiError::server("Trainyard could not encode the response; please retry")
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Req {
        job_name: String,
        retry_strategy: Option<Retry>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Retry {
        attempts: i64,
    }

    #[test]
    fn messages_name_the_member_at_fault() {
        let cases = [
            (
                r#"{"jobName": "a", "retryStrategy": {"attempts": "x"}}"#,
                "retryStrategy.attempts",
            ),
            (r#"{"jobName": 5}"#, "jobName"),
            (
                r#"{"retryStrategy": {"attempts": 1}}"#,
                "missing field `jobName`",
            ),
            (r#"{"jobName": "a""#, "Malformed JSON"),
            (r#"{"jobName": "a"} trailing"#, "Malformed JSON"),
        ];
        for (body, needle) in cases {
            let err = json::<Req>(body.as_bytes()).unwrap_err();
            assert!(err.message.contains(needle), "{body}: {}", err.message);
            assert_eq!(err.error_type(), "ClientException");
        }
    }

    #[test]
    fn an_empty_body_is_an_empty_object() {
        #[derive(serde::Deserialize)]
        struct Empty {}
        assert!(json::<Empty>(b"").is_ok());
        assert!(json::<Empty>(b"  ").is_ok());
    }
}
