//! Checkpoints observed in S3: the newest complete checkpoint under a training request's
//! `CheckpointConfig.S3Uri`, for the planner's cost of a preemption
//! ([`TrainingBackend::latest_checkpoint`](trainyard_app::ports::TrainingBackend::latest_checkpoint)).
//!
//! SageMaker copies a job's checkpoint directory to that URI while the job runs, file by file, so
//! a new object proves nothing about a whole checkpoint. A checkpoint counts once an object named
//! by the *marker* lands (by default `_SUCCESS`: a key equal to it or ending in `/_SUCCESS`),
//! which a training script writes after the files of a checkpoint; the marker's `LastModified`
//! is when the checkpoint landed. The two newest markers give its interval. What a job claims
//! about its checkpoints is never read.
//!
//! One `ListObjectsV2` listing of the prefix, up to [`MAX_KEYS_LISTED`] keys (a checkpoint
//! directory that holds more is judged on its first keys in key order, and a warning says so).
//! The role needs `s3:ListBucket` on the bucket (the stack's `CheckpointBucketArns`); without
//! it, S3's refusal is returned and the job counts as publishing no checkpoint.

use aws_sdk_s3::Client;
use trainyard_app::ports::{BackendError, ObservedCheckpoint};

use crate::sagemaker::{Call, classify, failure};

/// The marker a complete checkpoint ends with unless configured otherwise.
pub const DEFAULT_MARKER: &str = "_SUCCESS";

/// The most keys one observation lists: ten pages of 1,000.
pub const MAX_KEYS_LISTED: usize = 10_000;

/// Reads checkpoints from S3.
#[derive(Debug, Clone)]
pub struct S3Checkpoints {
    client: Client,
    marker: String,
}

impl S3Checkpoints {
    /// Checkpoints listed with `client`, complete when an object named `marker` lands.
    pub fn new(client: Client, marker: impl Into<String>) -> Self {
        Self {
            client,
            marker: marker.into(),
        }
    }

    /// The newest complete checkpoint under `s3_uri`, if any.
    pub async fn latest(&self, s3_uri: &str) -> Result<Option<ObservedCheckpoint>, BackendError> {
        let (bucket, prefix) = parse_s3_uri(s3_uri).ok_or_else(|| BackendError::Rejected {
            code: "InvalidCheckpointUri".into(),
            message: format!("{s3_uri} is not an s3://bucket/prefix URI"),
        })?;
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut markers = Newest::default();
        let mut listed = 0;
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify(Call::ListCheckpoints, failure(&e)))?;
            for object in page.contents() {
                listed += 1;
                let Some(key) = object.key() else { continue };
                if !is_marker(key, &self.marker) {
                    continue;
                }
                if let Some(at_ms) = object.last_modified().and_then(|t| t.to_millis().ok()) {
                    markers.see(at_ms);
                }
            }
            if listed >= MAX_KEYS_LISTED {
                tracing::warn!(
                    %s3_uri,
                    listed,
                    "checkpoint prefix holds more keys than are listed; judged on the first"
                );
                break;
            }
        }
        Ok(markers.checkpoint())
    }
}

/// `s3://bucket/prefix` → (bucket, prefix); the prefix may be empty.
pub fn parse_s3_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix("s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    (!bucket.is_empty()).then_some((bucket, prefix))
}

/// Whether `key` is a completion marker: its last path segment is `marker`.
fn is_marker(key: &str, marker: &str) -> bool {
    key.rsplit('/').next() == Some(marker)
}

/// The two newest times seen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Newest {
    first: Option<i64>,
    second: Option<i64>,
}

impl Newest {
    /// A marker that landed at `at_ms`; one at the same time as the newest is the same landing.
    fn see(&mut self, at_ms: i64) {
        match self.first {
            Some(first) if at_ms == first => {}
            Some(first) if at_ms < first => {
                if self.second.is_none_or(|second| at_ms > second) {
                    self.second = Some(at_ms);
                }
            }
            _ => {
                self.second = self.first;
                self.first = Some(at_ms);
            }
        }
    }

    fn checkpoint(self) -> Option<ObservedCheckpoint> {
        let at_ms = self.first?;
        Some(ObservedCheckpoint {
            at_ms,
            interval_ms: self.second.map(|s| at_ms - s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_split_into_bucket_and_prefix() {
        assert_eq!(parse_s3_uri("s3://b/p/q/"), Some(("b", "p/q/")));
        assert_eq!(parse_s3_uri("s3://b"), Some(("b", "")));
        assert_eq!(parse_s3_uri("s3:///p"), None);
        assert_eq!(parse_s3_uri("https://b/p"), None);
    }

    #[test]
    fn a_marker_is_a_whole_last_segment() {
        assert!(is_marker("ck/step-10/_SUCCESS", "_SUCCESS"));
        assert!(is_marker("_SUCCESS", "_SUCCESS"));
        assert!(!is_marker("ck/step-10/model_SUCCESS", "_SUCCESS"));
        assert!(!is_marker("ck/_SUCCESS/model.pt", "_SUCCESS"));
    }

    #[test]
    fn the_two_newest_times_give_the_checkpoint_and_its_interval() {
        let mut newest = Newest::default();
        assert_eq!(newest.checkpoint(), None);
        for at in [30, 10, 50, 40, 50] {
            newest.see(at);
        }
        assert_eq!(
            newest.checkpoint(),
            Some(ObservedCheckpoint {
                at_ms: 50,
                interval_ms: Some(10)
            })
        );
        let mut one = Newest::default();
        one.see(7);
        assert_eq!(
            one.checkpoint(),
            Some(ObservedCheckpoint {
                at_ms: 7,
                interval_ms: None
            })
        );
    }
}
