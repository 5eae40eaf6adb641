//! Batch's two errors. `ClientException` (400) for anything the caller can fix, with a message
//! that names the field or resource; `ServerException` (500) only for Trainyard's own failures.
//! And the ones AWS gives every service: `AccessDeniedException` (403), when the access policies
//! refuse the caller (boto3 raises it as a `ClientError` with that code, the AWS CLI prints it),
//! and `ThrottlingException` (429), when the caller is over its rate limit (botocore retries it).
//!
//! botocore reads the code from the `x-amzn-ErrorType` header and the message from the body's
//! `message`, so `e.response["Error"]["Message"]` and `e.response["message"]` both work.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use trainyard_app::AppError;

/// An error response in Batch's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// 400 (`ClientException`), 403 (`AccessDeniedException`), 429 (`ThrottlingException`) or
    /// 500 (`ServerException`).
    pub status: StatusCode,
    /// Shown to the caller.
    pub message: String,
}

impl ApiError {
    /// A `ClientException`.
    pub fn client(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// A `ServerException`.
    pub fn server(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }

    /// An `AccessDeniedException`.
    pub fn access_denied(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
        }
    }

    /// A `ThrottlingException` (HTTP 429): the caller is over its rate limit.
    pub fn throttled(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: message.into(),
        }
    }

    /// `ClientException`, `AccessDeniedException`, `ThrottlingException` or `ServerException`.
    pub fn error_type(&self) -> &'static str {
        if self.status.is_server_error() {
            "ServerException"
        } else if self.status == StatusCode::FORBIDDEN {
            "AccessDeniedException"
        } else if self.status == StatusCode::TOO_MANY_REQUESTS {
            "ThrottlingException"
        } else {
            "ClientException"
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error_type(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        if err.is_client_error() {
            Self::client(err.to_string())
        } else {
            // The detail goes to the log, not to the caller.
            tracing::error!(error = %err, source = ?std::error::Error::source(&err), "request failed");
            Self::server("Trainyard could not complete the request; please retry")
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error_type = self.error_type();
        let body = serde_json::json!({ "__type": error_type, "message": self.message });
        let mut response = (self.status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert("x-amzn-ErrorType", HeaderValue::from_static(error_type));
        response
    }
}
