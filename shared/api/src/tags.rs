//! (Being written.)

use serde_json::Value;
use trainyard_app::{EventSink, Service, Store};

use crate::error::ApiError;

/// `TagResource`: `POST /v1/tags/{resourceArn}`.
pub async fn tag_resource<S: Store, E: EventSink>(
    _service: &Service<S, E>,
    _resource_arn: &str,
    _body: &[u8],
) -> Result<Value, ApiError> {
    Err(ApiError::client("not yet"))
}

/// `UntagResource`: `DELETE /v1/tags/{resourceArn}?tagKeys=…` (raw query string).
pub async fn untag_resource<S: Store, E: EventSink>(
    _service: &Service<S, E>,
    _resource_arn: &str,
    _query: &str,
) -> Result<Value, ApiError> {
    Err(ApiError::client("not yet"))
}

/// `ListTagsForResource`: `GET /v1/tags/{resourceArn}`.
pub async fn list_tags_for_resource<S: Store, E: EventSink>(
    _service: &Service<S, E>,
    _resource_arn: &str,
) -> Result<Value, ApiError> {
    Err(ApiError::client("not yet"))
}
