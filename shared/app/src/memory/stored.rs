//! A stored JSON value with its decoded copy, as the memory store keeps configuration and
//! documents: JSON, as a real store keeps them, and decoded once per type.

use std::any::Any;
use std::sync::Arc;

use crate::ports::{DocumentValue, StoreError};

/// A decoded copy of a stored JSON value, of whatever type it was last read or written as.
pub(super) type Decoded = Option<Arc<dyn Any + Send + Sync>>;

/// A stored value's JSON.
pub(super) enum Json {
    /// Encoded.
    Value(serde_json::Value),
    /// A document a commit wrote: encoded only when read as another type than its own.
    Later(DocumentValue),
}

/// A stored JSON value, its version, and its decoded copy.
pub(super) struct Stored {
    pub(super) version: u64,
    pub(super) doc: Json,
    pub(super) decoded: Decoded,
}

impl Stored {
    /// The value as `T`: the cached copy if it has that type, else decoded (and cached).
    pub(super) fn get<T: serde::de::DeserializeOwned + Clone + Send + Sync + 'static>(
        &mut self,
        key: &str,
    ) -> Result<T, StoreError> {
        if let Some(value) = self.decoded.as_ref().and_then(|d| d.downcast_ref::<T>()) {
            return Ok(value.clone());
        }
        let encoded;
        let doc = match &self.doc {
            Json::Value(doc) => doc,
            Json::Later(doc) => {
                encoded = doc.to_json().map_err(|e| corrupt(key.to_owned(), e))?;
                &encoded
            }
        };
        let value = T::deserialize(doc).map_err(|e| corrupt(key.to_owned(), e))?;
        self.decoded = Some(Arc::new(value.clone()));
        Ok(value)
    }
}

pub(super) fn corrupt(key: String, e: serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        key,
        message: e.to_string(),
    }
}
