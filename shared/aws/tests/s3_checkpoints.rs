//! Checkpoints observed in S3 (moto): only completion markers count, under the job's own prefix;
//! the two newest give the checkpoint and its interval; a missing bucket is an error the cycle
//! reports and plans past. The SageMaker backend observes through it once given it.
#![cfg(feature = "moto-tests")]
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use trainyard_app::ports::{BackendError, TrainingBackend};
use trainyard_aws::checkpoints::{DEFAULT_MARKER, S3Checkpoints};
use trainyard_aws::sagemaker::SageMakerBackend;

async fn s3() -> Client {
    common::require_endpoint(&["AWS_ENDPOINT_URL_S3"]);
    let config = common::sdk_config().await;
    // moto serves buckets by path, not by host name.
    Client::from_conf(
        aws_sdk_s3::config::Builder::from(&config)
            .force_path_style(true)
            .build(),
    )
}

async fn put(s3: &Client, bucket: &str, key: &str) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
}

/// When S3 says `key` landed, in epoch ms.
async fn landed(s3: &Client, bucket: &str, key: &str) -> i64 {
    let head = s3
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    head.last_modified().unwrap().to_millis().unwrap()
}

#[tokio::test]
async fn the_newest_completion_marker_under_the_prefix_is_the_checkpoint() {
    let s3 = s3().await;
    let bucket = "trainyard-checkpoints";
    s3.create_bucket().bucket(bucket).send().await.unwrap();
    let checkpoints = S3Checkpoints::new(s3.clone(), DEFAULT_MARKER);
    let uri = format!("s3://{bucket}/ck/job-a/");

    // Files but no marker: a checkpoint being written, not one to count.
    put(&s3, bucket, "ck/job-a/step-100/model.pt").await;
    assert_eq!(checkpoints.latest(&uri).await.unwrap(), None);

    put(&s3, bucket, "ck/job-a/step-100/_SUCCESS").await;
    let first = landed(&s3, bucket, "ck/job-a/step-100/_SUCCESS").await;
    let seen = checkpoints.latest(&uri).await.unwrap().unwrap();
    assert_eq!((seen.at_ms, seen.interval_ms), (first, None));

    // S3's LastModified counts whole seconds here: wait past one before the next marker.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    put(&s3, bucket, "ck/job-a/step-200/model.pt").await;
    put(&s3, bucket, "ck/job-a/step-200/_SUCCESS").await;
    // Newer objects that are not markers, under this prefix and beside it, change nothing.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    put(&s3, bucket, "ck/job-a/step-300/model.pt").await;
    put(&s3, bucket, "ck/job-a/step-300/model_SUCCESS").await;
    put(&s3, bucket, "ck/job-b/step-1/_SUCCESS").await;
    let second = landed(&s3, bucket, "ck/job-a/step-200/_SUCCESS").await;
    assert!(second > first, "{second} > {first}");
    let seen = checkpoints.latest(&uri).await.unwrap().unwrap();
    assert_eq!(
        (seen.at_ms, seen.interval_ms),
        (second, Some(second - first))
    );

    // Through the backend, as the scheduler asks; one without checkpoints sees none.
    let sagemaker = aws_sdk_sagemaker::Client::new(&common::sdk_config().await);
    let backend = SageMakerBackend::new(sagemaker.clone()).with_checkpoints(checkpoints.clone());
    assert_eq!(backend.latest_checkpoint(&uri).await.unwrap(), Some(seen));
    let blind = SageMakerBackend::new(sagemaker);
    assert_eq!(blind.latest_checkpoint(&uri).await.unwrap(), None);

    // Another marker name, as TRAINYARD_CHECKPOINT_MARKER sets it.
    let custom = S3Checkpoints::new(s3.clone(), "model_SUCCESS");
    let only = custom.latest(&uri).await.unwrap().unwrap();
    assert_eq!(
        only.at_ms,
        landed(&s3, bucket, "ck/job-a/step-300/model_SUCCESS").await
    );
}

#[tokio::test]
async fn a_bucket_that_is_not_there_is_an_error_not_a_missing_checkpoint() {
    let s3 = s3().await;
    let checkpoints = S3Checkpoints::new(s3, DEFAULT_MARKER);
    let err = checkpoints
        .latest("s3://trainyard-no-such-bucket/ck/")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Rejected { code, .. } if code == "NoSuchBucket"),
        "{err:?}"
    );
    let err = checkpoints.latest("not-a-uri").await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Rejected { code, .. } if code == "InvalidCheckpointUri"),
        "{err:?}"
    );
}
