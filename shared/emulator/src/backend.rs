//! The SageMaker emulator as a [`TrainingBackend`], the one adapter every host over the emulator
//! uses: local mode dispatches to the same in-process model whose HTTP face `trainyard emulator`
//! serves, so a job goes all the way to SUCCEEDED without an AWS account; the simulator replays
//! a whole trace through it on its virtual clock, the fault harness wraps it in seeded faults,
//! and the tests that drive the scheduling loop (the app's and the functions') run it on their
//! manual clock ([`EmulatedSageMaker::on_clock`]). The model indexes its jobs by next deadline,
//! so advancing time costs what is due, not what exists: a replay of 100,000 jobs stays fast.
//!
//! Every call goes through [`SharedEmulator::with`], which advances the model to the wall clock
//! first, and pokes the driver after a create or stop (either may move the model's next
//! deadline earlier, and the driver must not oversleep it).
//!
//! `--emulator-time-scale` is applied in two places: [`scaled_config`] scales the model's phase
//! timings, and [`EmulatedSageMaker`] scales each request's `emulator_duration_s` before the model
//! sees it, so that "every emulator duration" really means every one.

use std::sync::Arc;

use serde_json::Value;
use trainyard_app::ports::{
    BackendError, Clock, ObservedCheckpoint, TrainingBackend, TrainingJobState,
};

use crate::model::{Config, Emulator, SageMakerError};
use crate::shared::SharedEmulator;

/// The emulator's view of SageMaker, shared with its HTTP face and driver.
#[derive(Debug, Clone)]
pub struct EmulatedSageMaker {
    shared: SharedEmulator,
    time_scale: f64,
}

impl EmulatedSageMaker {
    /// A backend over `shared`; `time_scale` multiplies each job's `emulator_duration_s` (the
    /// model's own timings are scaled by [`scaled_config`]). Non-finite or negative scales are
    /// treated as 1.
    pub fn new(shared: SharedEmulator, time_scale: f64) -> Self {
        Self {
            shared,
            time_scale: sane_scale(time_scale),
        }
    }

    /// A backend over a fresh model with `config` that reads "now" from `clock` (a test's
    /// manual clock: training jobs move through their phases as it is advanced).
    pub fn on_clock(config: Config, clock: Arc<dyn Clock>) -> Self {
        let now = Arc::new(move || clock.now_ms());
        Self::new(SharedEmulator::new(Emulator::new(config), now), 1.0)
    }

    /// The shared emulator (for the HTTP face and the driver).
    pub fn shared(&self) -> &SharedEmulator {
        &self.shared
    }
}

fn sane_scale(scale: f64) -> f64 {
    if scale.is_finite() && scale >= 0.0 {
        scale
    } else {
        1.0
    }
}

/// `config` with every duration multiplied by `scale` (rounded to whole milliseconds).
pub fn scaled_config(config: Config, scale: f64) -> Config {
    let scale = sane_scale(scale);
    let times = |ms: i64| ((ms as f64) * scale).round() as i64;
    Config {
        provisioning_ms: times(config.provisioning_ms),
        download_ms: times(config.download_ms),
        default_training_ms: times(config.default_training_ms),
        upload_ms: times(config.upload_ms),
        stop_grace_ms: times(config.stop_grace_ms),
        max_event_delay_ms: times(config.max_event_delay_ms),
        ..config
    }
}

/// The request with `HyperParameters.emulator_duration_s` and
/// `emulator_checkpoint_interval_s` multiplied by `scale`. A value that is not a number is left
/// alone for the model to reject with its own message.
fn scale_duration(mut request: Value, scale: f64) -> Value {
    #[allow(clippy::float_cmp)] // exactly 1 is the common case and means "leave it".
    if scale == 1.0 {
        return request;
    }
    for name in ["emulator_duration_s", "emulator_checkpoint_interval_s"] {
        let duration = request
            .get_mut("HyperParameters")
            .and_then(|h| h.get_mut(name));
        if let Some(value) = duration
            && let Some(secs) = value.as_str().and_then(|s| s.parse::<f64>().ok())
        {
            *value = Value::String(format!("{}", secs * scale));
        }
    }
    request
}

/// Maps the model's errors to the backend's, by their SageMaker codes as the cloud adapter does.
pub fn classify(error: SageMakerError) -> BackendError {
    BackendError::from_sagemaker(error.code(), error.to_string())
}

impl TrainingBackend for EmulatedSageMaker {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        let request = scale_duration(request, self.time_scale);
        let created = self
            .shared
            .with(|emulator, now| emulator.create_training_job(request, now));
        self.shared.notify_changed();
        created.map_err(classify)
    }

    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        self.shared
            .with(|emulator, _| emulator.training_job_state(name))
            .map_err(classify)
    }

    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        let stopped = self
            .shared
            .with(|emulator, now| emulator.stop_training_job(name, now));
        self.shared.notify_changed();
        match stopped {
            // The model refuses to stop a finished job with a validation error; the port
            // promises that stopping a finished job is not an error.
            Err(SageMakerError::ValidationException(_)) => Ok(()),
            other => other.map_err(classify),
        }
    }

    /// The model's checkpoint bucket stands in for S3: what the job writing `s3_uri` saved.
    async fn latest_checkpoint(
        &self,
        s3_uri: &str,
    ) -> Result<Option<ObservedCheckpoint>, BackendError> {
        let newest = self
            .shared
            .with(|emulator, now| emulator.latest_checkpoint(s3_uri, now));
        Ok(newest.map(|c| ObservedCheckpoint {
            at_ms: c.at_ms,
            interval_ms: c.previous_at_ms.map(|p| c.at_ms - p),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use trainyard_app::ports::{ManualClock, TrainingStatus};

    use super::*;

    fn request(name: &str, hyper: Value) -> Value {
        json!({
            "TrainingJobName": name,
            "RoleArn": "arn:aws:iam::000000000000:role/R",
            "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
            "HyperParameters": hyper,
            "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        })
    }

    fn backend(config: Config) -> EmulatedSageMaker {
        EmulatedSageMaker::on_clock(config, Arc::new(ManualClock::new(1_800_000_000_000)))
    }

    #[test]
    fn scaling_multiplies_every_phase_and_leaves_the_rest() {
        let scaled = scaled_config(Config::default(), 2.0);
        let base = Config::default();
        assert_eq!(scaled.provisioning_ms, base.provisioning_ms * 2);
        assert_eq!(scaled.download_ms, base.download_ms * 2);
        assert_eq!(scaled.default_training_ms, base.default_training_ms * 2);
        assert_eq!(scaled.upload_ms, base.upload_ms * 2);
        assert_eq!(scaled.stop_grace_ms, base.stop_grace_ms * 2);
        assert_eq!(scaled.seed, base.seed);
        assert_eq!(scaled_config(Config::default(), f64::NAN), base, "NaN is 1");
    }

    #[test]
    fn a_job_duration_hyperparameter_is_scaled_and_junk_is_left_for_the_model() {
        let cases = [
            (json!({"emulator_duration_s": "10"}), 0.5, json!("5")),
            (json!({"emulator_duration_s": "3"}), 1.0, json!("3")),
            (json!({"emulator_duration_s": "abc"}), 2.0, json!("abc")),
        ];
        for (hyper, scale, expected) in cases {
            let scaled = scale_duration(request("j", hyper), scale);
            assert_eq!(
                scaled["HyperParameters"]["emulator_duration_s"], expected,
                "{scale}"
            );
        }
        let untouched = scale_duration(request("j", json!({})), 3.0);
        assert_eq!(untouched["HyperParameters"], json!({}));
    }

    #[tokio::test]
    async fn errors_map_to_the_backend_vocabulary_and_stopping_a_finished_job_is_ok() {
        let clock = Arc::new(ManualClock::new(1_800_000_000_000));
        let sagemaker = EmulatedSageMaker::on_clock(Config::default(), clock.clone());
        let arn = sagemaker
            .create_training_job(request("a-1", json!({"emulator_duration_s": "0"})))
            .await
            .unwrap();
        assert!(arn.ends_with("training-job/a-1"), "{arn}");
        assert!(matches!(
            sagemaker
                .create_training_job(request("a-1", json!({})))
                .await,
            Err(BackendError::AlreadyExists(_))
        ));
        assert!(matches!(
            sagemaker.describe_training_job("nope").await,
            Err(BackendError::NotFound(_))
        ));
        assert!(matches!(
            sagemaker
                .create_training_job(request("bad", json!({"emulator_outcome": "Maybe"})))
                .await,
            Err(BackendError::Rejected { .. })
        ));
        // Stop the job, let the grace pass on the manual clock, then stop it again.
        sagemaker.stop_training_job("a-1").await.unwrap();
        clock.advance(Config::default().stop_grace_ms);
        let state = sagemaker.describe_training_job("a-1").await.unwrap();
        assert_eq!(state.status, TrainingStatus::Stopped, "{state:?}");
        sagemaker.stop_training_job("a-1").await.unwrap();
    }

    #[tokio::test]
    async fn an_account_quota_is_a_capacity_error() {
        let mut config = Config::default();
        config.account_quotas.insert("ml.m5.large".into(), 1);
        let sagemaker = backend(config);
        sagemaker
            .create_training_job(request("q-1", json!({})))
            .await
            .unwrap();
        assert!(matches!(
            sagemaker
                .create_training_job(request("q-2", json!({})))
                .await,
            Err(BackendError::Capacity(_))
        ));
    }
}
