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
use trainyard_app::ports::{ForecastMemory, MemoryFuture, StoreError};
use trainyard_forecast::Learned;

use crate::s3_json;

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
        s3_json::get(&self.s3, &self.bucket, KEY).await
    }

    /// Keeps `learned`, replacing what was kept.
    pub async fn save(&self, learned: &Learned) -> Result<(), StoreError> {
        s3_json::put(&self.s3, &self.bucket, KEY, learned).await?;
        Ok(())
    }
}

impl ForecastMemory for S3ForecastMemory {
    fn load(&self) -> MemoryFuture<'_, Option<Learned>> {
        Box::pin(Self::load(self))
    }

    fn save<'a>(&'a self, learned: &'a Learned) -> MemoryFuture<'a, ()> {
        Box::pin(Self::save(self, learned))
    }
}
