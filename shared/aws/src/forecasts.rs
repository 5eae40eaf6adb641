//! What the scheduler's forecaster learnt (runtimes per job family, arrivals per line, the
//! calibration: [`Learned`]), kept in S3 so that a new Lambda instance estimates start times
//! from where the last one left off instead of from nothing.
//!
//! One object, `s3://BUCKET/forecaster/learned.json` (the stack's decisions bucket, outside the
//! `decisions/` prefix its lifecycle rule expires). Instances that run at once each write what
//! they learnt; the last write wins, and every version is a whole, valid state.
//!
//! The scheduler's role needs `s3:GetObject` and `s3:PutObject` on `BUCKET/forecaster/*`, and
//! `s3:ListBucket` on the bucket: without it S3 answers a key that does not exist yet with
//! `AccessDenied`, not `NoSuchKey`.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use trainyard_app::ports::StoreError;
use trainyard_forecast::Learned;

use crate::decisions::unavailable;

/// The object's key.
pub const KEY: &str = "forecaster/learned.json";

/// Keeps a forecaster's [`Learned`] state in one S3 object.
#[derive(Debug, Clone)]
pub struct S3ForecastMemory {
    s3: Client,
    bucket: String,
}

impl S3ForecastMemory {
    /// The state kept in `bucket` with `s3`.
    pub fn new(s3: Client, bucket: impl Into<String>) -> Self {
        Self {
            s3,
            bucket: bucket.into(),
        }
    }

    /// What was kept, or `None` before anything was.
    pub async fn load(&self) -> Result<Option<Learned>, StoreError> {
        let what = format!("reading s3://{}/{KEY}", self.bucket);
        let output = match self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(KEY)
            .send()
            .await
        {
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
                key: KEY.to_owned(),
                message: e.to_string(),
            })
    }

    /// Keeps `learned`, replacing what was kept.
    pub async fn save(&self, learned: &Learned) -> Result<(), StoreError> {
        let body = serde_json::to_vec(learned).map_err(|e| StoreError::Corrupt {
            key: KEY.to_owned(),
            message: format!("cannot encode: {e}"),
        })?;
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(KEY)
            .content_type("application/json")
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| unavailable(&format!("writing s3://{}/{KEY}", self.bucket), e))?;
        Ok(())
    }
}
