//! One write of an atomic [`SchedulingStore::commit`](super::SchedulingStore::commit), and the
//! type-erased document it may carry.

use serde::Serialize;
use trainyard_domain::job::ServiceJob;

use super::{Document, StoreError};

/// One write of an atomic [`SchedulingStore::commit`](super::SchedulingStore::commit).
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Replace a job whose stored version is `expected_version`.
    Job {
        /// The new job (boxed: a job is far larger than a document write).
        job: Box<ServiceJob>,
        /// The version read.
        expected_version: u64,
    },
    /// Put a document whose stored version is `expected_version` (0: it must not exist yet).
    Document {
        /// [`Document::KIND`].
        kind: &'static str,
        /// [`Document::key`].
        key: String,
        /// The document.
        doc: DocumentValue,
        /// The version read, or 0 to create.
        expected_version: u64,
    },
    /// Delete a document whose stored version is `expected_version`.
    DeleteDocument {
        /// [`Document::KIND`].
        kind: &'static str,
        /// [`Document::key`].
        key: String,
        /// The version read.
        expected_version: u64,
    },
}

impl Write {
    /// Replaces `job` if it is still at `expected_version`.
    pub fn job(job: ServiceJob, expected_version: u64) -> Self {
        Self::Job {
            job: Box::new(job),
            expected_version,
        }
    }

    /// Puts `doc` if it is still at `expected_version` (0: create).
    ///
    /// The document is kept as its typed value and encoded by the stores that keep JSON when
    /// they write it (a value that cannot be encoded is refused there, as `Corrupt`); the
    /// memory store keeps the value itself. Never fails today; the `Result` leaves room for
    /// checks at construction.
    pub fn document<D: Document>(doc: &D, expected_version: u64) -> Result<Self, StoreError> {
        Ok(Self::document_value(doc.clone(), expected_version))
    }

    /// [`Write::document`] of a document the caller no longer needs (nothing is copied).
    pub fn document_value<D: Document>(doc: D, expected_version: u64) -> Self {
        Self::Document {
            kind: D::KIND,
            key: doc.key(),
            doc: DocumentValue(std::sync::Arc::new(doc)),
            expected_version,
        }
    }

    /// Deletes the document `key` of `D`'s kind if it is still at `expected_version`.
    pub fn delete_document<D: Document>(key: String, expected_version: u64) -> Self {
        Self::DeleteDocument {
            kind: D::KIND,
            key,
            expected_version,
        }
    }
}

/// The document of a [`Write::Document`]: a typed value, shared, serialized on demand.
///
/// A scheduling cycle writes one document per fair share; keeping the value rather than its JSON
/// spares the memory store (the simulator's) an encode and a decode per write.
#[derive(Clone)]
pub struct DocumentValue(std::sync::Arc<dyn ErasedDocument>);

/// A [`Document`] with its type erased.
trait ErasedDocument: Send + Sync {
    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error>;
    fn shared(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync>;
}

impl<D: Document> ErasedDocument for D {
    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    fn shared(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl DocumentValue {
    /// The document as JSON.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        self.0.to_json()
    }

    /// The typed value, for a store that keeps values (downcast it to the document's type).
    pub fn shared(&self) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone().shared()
    }
}

impl Serialize for DocumentValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl std::fmt::Debug for DocumentValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_json() {
            Ok(json) => write!(f, "{json}"),
            Err(e) => write!(f, "(a document that cannot be encoded: {e})"),
        }
    }
}

/// Two documents are equal when their JSON is.
impl PartialEq for DocumentValue {
    fn eq(&self, other: &Self) -> bool {
        match (self.to_json(), other.to_json()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}
