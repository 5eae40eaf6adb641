//! Tag operations on `/v1/tags/{resourceArn}` (reference §2.7, §P2.6): `TagResource` (POST,
//! body `{"tags": {…}}`), `UntagResource` (DELETE, `?tagKeys=a&tagKeys=b`) and
//! `ListTagsForResource` (GET). The router hands over the path's ARN already decoded and the
//! query string raw; decoding the query is done here.

use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::Tags;
use trainyard_domain::limits::{MAX_TAGS, TAG_KEY_LEN};

use crate::error::ApiError;
use crate::{extract, validate};

#[derive(Debug, Deserialize)]
struct TagRequest {
    tags: Option<Tags>,
}

/// `TagResource`: `POST /v1/tags/{resourceArn}`.
pub async fn tag_resource<S: Store, E: EventSink>(
    service: &Service<S, E>,
    resource_arn: &str,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: TagRequest = extract::json(body)?;
    let tags = validate::required("tags", req.tags)?;
    if tags.is_empty() {
        return Err(ApiError::client(
            "tags must have at least one tag; to remove tags use UntagResource",
        ));
    }
    validate::tags("tags", &tags)?;
    service.tag_resource(resource_arn, &tags).await?;
    Ok(json!({}))
}

/// `UntagResource`: `DELETE /v1/tags/{resourceArn}?tagKeys=…` (raw query string).
pub async fn untag_resource<S: Store, E: EventSink>(
    service: &Service<S, E>,
    resource_arn: &str,
    query: &str,
) -> Result<Value, ApiError> {
    let keys = tag_keys(query)?;
    service.untag_resource(resource_arn, &keys).await?;
    Ok(json!({}))
}

/// `ListTagsForResource`: `GET /v1/tags/{resourceArn}`.
pub async fn list_tags_for_resource<S: Store, E: EventSink>(
    service: &Service<S, E>,
    resource_arn: &str,
) -> Result<Value, ApiError> {
    let tags = service.list_tags_for_resource(resource_arn).await?;
    Ok(json!({ "tags": tags }))
}

/// The `tagKeys` of an untag query: 1–50 keys of 1–128 characters. Other parameters are
/// ignored, as unknown members are everywhere else.
fn tag_keys(query: &str) -> Result<Vec<String>, ApiError> {
    let mut keys = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode(name)? == "tagKeys" {
            let key = percent_decode(value)?;
            validate::length("tagKeys member", &key, TAG_KEY_LEN)?;
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(ApiError::client(
            "tagKeys is required: name the tags to remove as ?tagKeys=key1&tagKeys=key2",
        ));
    }
    if keys.len() > MAX_TAGS {
        return Err(ApiError::client(format!(
            "tagKeys may name at most {MAX_TAGS} keys, got {}",
            keys.len()
        )));
    }
    Ok(keys)
}

/// Decodes `%XX` escapes (and `+` as a space, as form encoding writes it) into UTF-8.
fn percent_decode(s: &str) -> Result<String, ApiError> {
    let bad = || ApiError::client(format!("the query string has a malformed escape in {s:?}"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untag_queries_decode_every_tag_key() {
        let cases: &[(&str, Result<&[&str], &str>)] = &[
            ("tagKeys=a&tagKeys=b", Ok(&["a", "b"])),
            (
                "tagKeys=team%2Fname&tagKeys=cost+center",
                Ok(&["team/name", "cost center"]),
            ),
            ("tagKeys=caf%C3%A9&other=x", Ok(&["café"])),
            ("", Err("tagKeys is required")),
            ("other=x", Err("tagKeys is required")),
            ("tagKeys=", Err("1–128")),
            ("tagKeys=%zz", Err("malformed escape")),
            ("tagKeys=%4", Err("malformed escape")),
            ("tagKeys=%FF", Err("malformed escape")),
        ];
        for (query, expected) in cases {
            match (tag_keys(query), expected) {
                (Ok(keys), Ok(want)) => assert_eq!(keys, *want, "{query}"),
                (Err(e), Err(needle)) => assert!(e.message.contains(needle), "{query}: {e}"),
                (got, want) => panic!("{query}: got {got:?}, want {want:?}"),
            }
        }
        let many: Vec<String> = (0..51).map(|i| format!("tagKeys=k{i}")).collect();
        assert!(
            tag_keys(&many.join("&"))
                .unwrap_err()
                .message
                .contains("at most 50")
        );
    }
}
