//! The AWS Batch service-job API, wire-exact, as one axum router shared by the Lambda function
//! and local mode.
//!
//! Batch's protocol is `restJson1`: every operation is `POST /v1/<lowercase operation>` with a
//! JSON body in camelCase, times are epoch milliseconds, absent optionals are omitted, and errors
//! are `ClientException` (400) or `ServerException` (500) with an `x-amzn-ErrorType` header and a
//! `{"__type", "message"}` body. Tag operations use `/v1/tags/{resourceArn}`.
//!
//! # Layout
//!
//! - [`router`](mod@router): routes, body limits, dispatch by operation name.
//! - [`edge`]: what a browser page could send, refused before any operation.
//! - [`access`]: the caller, the stored access policies, and the check every operation passes.
//! - [`audit`]: the audit trail of calls that asked to change something.
//! - [`error`]: [`ApiError`] and its mapping to Batch's error responses.
//! - [`extract`]: decoding request bodies with messages that name the offending field.
//! - [`validate`]: range, name and tag checks shared by the operations.
//! - [`jobs`]: service-job operations and `GetJobQueueSnapshot`.
//! - [`environments`], [`queues`], [`policies`], [`quota_shares`], [`tags`]: configuration
//!   resources and tagging.
//! - [`throttle`]: per-caller rate limits.
//! - [`paging`]: `nextToken` encoding for paginated operations.

pub mod access;
pub mod audit;
pub mod edge;
pub mod environments;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod paging;
pub mod policies;
pub mod queues;
pub mod quota_shares;
pub mod router;
pub mod tags;
pub mod throttle;
pub mod validate;

pub use access::{Caller, Gate};
pub use error::ApiError;
pub use router::{router, router_with_gate};
