//! The checks at the edge, before any operation: what a web page in someone's browser can make
//! that browser send, refused.
//!
//! - A body must come as `application/json`, which every Batch client sends (botocore for boto3
//!   and the AWS CLI, hence the SageMaker SDK; the Rust SDK; `trainyard`). A browser sends only
//!   `text/plain`, form encodings and `multipart/form-data` across origins without asking first
//!   (CORS "simple" requests), and this API answers no CORS preflight, so a page cannot make a
//!   browser send JSON here.
//! - A request a browser marks as coming from another site (`Sec-Fetch-Site: cross-site` or
//!   `same-site`), or whose `Origin` names a host other than the one it was sent to, is refused
//!   whatever its type.
//!
//! Local mode adds a check of `Host` against the addresses it listens on (DNS rebinding), since
//! only it knows them.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Middleware: refuses what [`refusal`] refuses, before the router sees the request.
pub async fn guard(request: Request, next: Next) -> Response {
    match refusal(request.headers()) {
        Some(error) => {
            tracing::info!(message = %error.message, "request refused at the edge");
            error.into_response()
        }
        None => next.run(request).await,
    }
}

/// Why a request with these headers is refused, if it is.
pub fn refusal(headers: &HeaderMap) -> Option<ApiError> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && matches!(site, "cross-site" | "same-site")
    {
        return Some(ApiError::access_denied(format!(
            "Requests from another site's pages are refused (Sec-Fetch-Site: {site})"
        )));
    }
    if let Some(origin) = text(header::ORIGIN) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if text(header::HOST).is_none_or(|host| !host.eq_ignore_ascii_case(origin_host)) {
            return Some(ApiError::access_denied(format!(
                "Requests from pages of {origin} are refused: the API serves no other origin"
            )));
        }
    }
    let has_body = text(header::CONTENT_LENGTH).is_some_and(|n| n.trim() != "0")
        || headers.contains_key(header::TRANSFER_ENCODING);
    match text(header::CONTENT_TYPE) {
        Some(ty) if is_json(ty) => None,
        None if !has_body => None,
        Some(ty) => Some(unsupported(ty)),
        None => Some(unsupported("(none)")),
    }
}

/// `application/json`, with or without parameters (`; charset=utf-8`), in any letter case.
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

fn unsupported(content_type: &str) -> ApiError {
    ApiError {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        message: format!(
            "Content-Type {content_type} is not accepted: send the request body as application/json"
        ),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    /// Header names and values.
    type Pairs<'a> = &'a [(&'static str, &'a str)];

    fn headers(pairs: Pairs<'_>) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                *name,
                HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("?")),
            );
        }
        map
    }

    #[test]
    fn what_batch_clients_send_passes_and_what_pages_can_send_does_not() {
        let json = ("content-type", "application/json");
        let length = ("content-length", "2");
        let host = ("host", "127.0.0.1:8080");
        let cases: [(Pairs<'_>, Option<u16>); 12] = [
            // botocore, the Rust SDK, trainyard.
            (&[json, length, host], None),
            (
                &[
                    ("content-type", "application/json; charset=utf-8"),
                    length,
                    host,
                ],
                None,
            ),
            // GET and DELETE of tags, and operations without input: no body, no type.
            (&[host], None),
            (&[("content-length", "0"), host], None),
            // A page's "simple" requests.
            (&[("content-type", "text/plain"), length, host], Some(415)),
            (
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    length,
                    host,
                ],
                Some(415),
            ),
            (
                &[
                    ("content-type", "multipart/form-data; boundary=x"),
                    length,
                    host,
                ],
                Some(415),
            ),
            (&[length, host], Some(415)),
            // Marked cross-site by the browser, whatever the type.
            (
                &[json, length, host, ("sec-fetch-site", "cross-site")],
                Some(403),
            ),
            (
                &[json, length, host, ("sec-fetch-site", "same-site")],
                Some(403),
            ),
            (
                &[json, length, host, ("sec-fetch-site", "same-origin")],
                None,
            ),
            // An Origin that is not the host the request went to.
            (
                &[json, length, host, ("origin", "https://evil.example")],
                Some(403),
            ),
        ];
        for (pairs, expected) in cases {
            let got = refusal(&headers(pairs)).map(|e| e.status.as_u16());
            assert_eq!(got, expected, "{pairs:?}");
        }
        let same_origin = headers(&[json, length, host, ("origin", "http://127.0.0.1:8080")]);
        assert!(refusal(&same_origin).is_none());
    }
}
