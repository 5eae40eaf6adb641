//! (Being written.)

use serde_json::Value;
use trainyard_app::{EventSink, Service, Store};

use crate::error::ApiError;

/// Handles `op` if it belongs to this module.
pub async fn handle<S: Store, E: EventSink>(
    _service: &Service<S, E>,
    _op: &str,
    _body: &[u8],
) -> Option<Result<Value, ApiError>> {
    None
}
