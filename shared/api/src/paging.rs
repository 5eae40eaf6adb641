//! `nextToken`s. Tokens are opaque to clients; ours carry the position to continue after, so a
//! page is stable under inserts. A token Trainyard did not issue is a `ClientException`.

use crate::error::ApiError;
use trainyard_app::ports::JobCursor;
use trainyard_domain::limits::MAX_RESULTS;

/// `maxResults`, checked against 1–100; absent means 100.
pub fn page_size(max_results: Option<i64>) -> Result<usize, ApiError> {
    match max_results {
        None => Ok(*MAX_RESULTS.end() as usize),
        Some(n) if MAX_RESULTS.contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::client(format!(
            "maxResults must be between {} and {}, got {n}",
            MAX_RESULTS.start(),
            MAX_RESULTS.end()
        ))),
    }
}

/// A list response: `{key: items}` plus `nextToken` only when another page follows (clients
/// such as the SageMaker SDK loop while a token is present).
pub fn list_response(
    key: &str,
    items: serde_json::Value,
    next: Option<String>,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    out.insert(key.to_owned(), items);
    if let Some(token) = next {
        out.insert("nextToken".to_owned(), serde_json::Value::String(token));
    }
    serde_json::Value::Object(out)
}

/// A token for "continue after this key" (used for name-ordered listings).
pub fn key_token(last_key: &str) -> String {
    format!("k1.{}", hex(last_key.as_bytes()))
}

/// Reads a [`key_token`].
pub fn parse_key_token(token: &str) -> Result<String, ApiError> {
    token
        .strip_prefix("k1.")
        .and_then(unhex)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(invalid_token)
}

/// A token for a job listing position.
pub fn job_token(cursor: &JobCursor) -> String {
    format!("j1.{}.{}", cursor.created_at, hex(cursor.job_id.as_bytes()))
}

/// Reads a [`job_token`].
pub fn parse_job_token(token: &str) -> Result<JobCursor, ApiError> {
    let rest = token.strip_prefix("j1.").ok_or_else(invalid_token)?;
    let (created, id) = rest.split_once('.').ok_or_else(invalid_token)?;
    let created_at = created.parse().map_err(|_| invalid_token())?;
    let job_id = unhex(id)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(invalid_token)?;
    Ok(JobCursor { created_at, job_id })
}

fn invalid_token() -> ApiError {
    ApiError::client("nextToken is not valid: pass the nextToken of a previous response unchanged")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// One page of `items` (already ordered by name) after the `nextToken` position, and the token
/// for the next page, present only when more items follow.
pub fn page_by_name<T>(
    items: Vec<T>,
    name: impl Fn(&T) -> &str,
    max_results: Option<i64>,
    next_token: Option<&str>,
) -> Result<(Vec<T>, Option<String>), ApiError> {
    let size = page_size(max_results)?;
    // Some clients send an empty string for "no token"; it means the first page.
    let after = match next_token {
        Some(token) if !token.is_empty() => Some(parse_key_token(token)?),
        _ => None,
    };
    let mut page: Vec<T> = items
        .into_iter()
        .filter(|item| after.as_deref().is_none_or(|a| name(item) > a))
        .collect();
    let next = if page.len() > size {
        page.truncate(size);
        page.last().map(|item| key_token(name(item)))
    } else {
        None
    };
    Ok((page, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_foreign_tokens_are_refused() {
        assert_eq!(parse_key_token(&key_token("queue-a")).unwrap(), "queue-a");
        let cursor = JobCursor {
            created_at: 1_700_000_000_000,
            job_id: "a-b".into(),
        };
        assert_eq!(parse_job_token(&job_token(&cursor)).unwrap(), cursor);
        for bad in ["", "k1.zz", "j1.12", "j1.x.61", "something"] {
            assert!(parse_key_token(bad).is_err() || bad.starts_with("k1.") && bad.len() > 5);
            assert!(parse_job_token(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn page_size_is_1_to_100() {
        assert_eq!(page_size(None).unwrap(), 100);
        assert_eq!(page_size(Some(1)).unwrap(), 1);
        assert!(
            page_size(Some(0))
                .unwrap_err()
                .message
                .contains("between 1 and 100")
        );
        assert!(page_size(Some(101)).is_err());
    }
}
