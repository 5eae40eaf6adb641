//! The use-case error, classified once so that the API edge maps it without guessing:
//! everything but [`AppError::Internal`] is the client's to fix (`ClientException`).

use crate::ports::StoreError;

/// What a use-case can fail with.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The request is malformed or breaks a rule; the message names the field and the rule.
    #[error("{0}")]
    Invalid(String),
    /// A referenced job or resource does not exist; the message names it.
    #[error("{0}")]
    NotFound(String),
    /// A create found the name taken. The message is Batch's own, which SDKs match on.
    #[error("Object already exists")]
    AlreadyExists,
    /// The request conflicts with the resource's current state (e.g. deleting an ENABLED
    /// environment); the message says what to do first.
    #[error("{0}")]
    Conflict(String),
    /// Trainyard failed; the client may retry.
    #[error("internal error: {0}")]
    Internal(#[from] StoreError),
}

impl AppError {
    /// Whether the client caused this error (Batch's `ClientException`) rather than the server.
    pub fn is_client_error(&self) -> bool {
        !matches!(self, Self::Internal(_))
    }
}
