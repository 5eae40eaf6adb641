//! JSON documents in S3, the one read and the one write both S3 adapters make (decision records,
//! the forecaster's state), with S3's failures as the store's errors.

use aws_sdk_s3::Client;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use trainyard_app::ports::StoreError;

/// The object at `key`, parsed; `None` when there is none (`NoSuchKey`).
pub(crate) async fn get<T: DeserializeOwned>(
    s3: &Client,
    bucket: &str,
    key: &str,
) -> Result<Option<T>, StoreError> {
    let what = format!("reading s3://{bucket}/{key}");
    let output = match s3.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => output,
        Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => return Ok(None),
        Err(e) => return Err(unavailable(&what, e)),
    };
    let bytes = output
        .body
        .collect()
        .await
        .map_err(|e| StoreError::Unavailable {
            message: format!("{what}: {e}"),
            source: Some(Box::new(e)),
        })?
        .into_bytes();
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            key: key.to_owned(),
            message: e.to_string(),
        })
}

/// Writes `value` as JSON at `key`, replacing what was there; the object's size in bytes.
pub(crate) async fn put<T: Serialize>(
    s3: &Client,
    bucket: &str,
    key: &str,
    value: &T,
) -> Result<u64, StoreError> {
    let body = serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        message: format!("cannot encode: {e}"),
    })?;
    let bytes = body.len() as u64;
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .content_type("application/json")
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(|e| unavailable(&format!("writing s3://{bucket}/{key}"), e))?;
    Ok(bytes)
}

/// A failed S3 call as the store's error: S3's code and message where it answered, the whole
/// error where it did not.
fn unavailable<E>(what: &str, error: SdkError<E>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let why = match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => aws_sdk_s3::error::DisplayErrorContext(&error).to_string(),
    };
    StoreError::Unavailable {
        message: format!("{what}: {why}"),
        source: Some(Box::new(error)),
    }
}
