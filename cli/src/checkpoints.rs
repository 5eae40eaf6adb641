//! `trainyard emulator --copy-checkpoints-to-s3`: the emulated training jobs' checkpoints
//! copied to S3, as SageMaker uploads a job's checkpoint directory to its
//! `CheckpointConfig.S3Uri` while it trains, so that a scheduler that reads checkpoints from S3
//! (the Lambda functions: `shared/aws/src/checkpoints.rs`) sees what the emulator's jobs save.
//!
//! Each checkpoint becomes two objects under its URI: `checkpoint-<progress ms>/state.json`
//! (what it holds), then `checkpoint-<progress ms>/_SUCCESS`, the completion marker a training
//! script writes after a checkpoint's files. S3 stamps each object with its own `LastModified`,
//! so a checkpoint lands when it is copied: within [`POLL`] of the model's save (the copier
//! also wakes at the next save it knows of), plus the upload. A copy that fails (S3
//! unreachable, a refusal) is tried again at the next wake, so nothing is lost but time; a
//! checkpoint overtaken by a newer one before it could be copied is skipped, as only the
//! newest two markers are ever read.
//!
//! Only S3-compatible endpoints over plain HTTP are reached (`AWS_ENDPOINT_URL_S3`, else
//! `AWS_ENDPOINT_URL`), addressed by path (`endpoint/bucket/key`) and signed with the
//! environment's keys: the emulator is for machines without AWS.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use tokio::sync::watch;
use trainyard_emulator::model::Checkpoint;
use trainyard_emulator::shared::SharedEmulator;

use crate::sigv4::{Keys, Outgoing, S3, sign_request};

/// The copier's longest sleep: how late a checkpoint may land in S3 after the model saved it
/// when the copier did not know it was coming (a job that just started training).
pub const POLL: Duration = Duration::from_millis(250);

/// The completion marker's name (the stack's default `CheckpointMarker`).
pub const MARKER: &str = "_SUCCESS";

/// Longest wait for one upload.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Where checkpoints are copied to, and as whom.
pub struct S3Copies {
    endpoint: String,
    region: String,
    keys: Keys,
    agent: ureq::Agent,
}

impl std::fmt::Debug for S3Copies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Copies")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl S3Copies {
    /// Copies to the endpoint the environment names, signed for `region` with the
    /// environment's keys; an error says what is missing.
    pub fn from_environment(region: &str) -> anyhow::Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let endpoint = var("AWS_ENDPOINT_URL_S3")
            .or_else(|| var("AWS_ENDPOINT_URL"))
            .context(
                "--copy-checkpoints-to-s3 needs an S3-compatible endpoint: set AWS_ENDPOINT_URL_S3 \
                 (for example moto's http://127.0.0.1:PORT)",
            )?;
        let keys = Keys::from_environment()?.context(
            "--copy-checkpoints-to-s3 signs its uploads: set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (any keys the endpoint accepts)",
        )?;
        Self::new(&endpoint, region, keys)
    }

    /// Copies to `endpoint` (`http://host:port`), signed for `region` with `keys`.
    pub fn new(endpoint: &str, region: &str, keys: Keys) -> anyhow::Result<Self> {
        if !endpoint.starts_with("http://") {
            bail!(
                "the emulator copies checkpoints only to an S3-compatible endpoint over plain \
                 HTTP (http://host:port), not {endpoint:?}"
            );
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(UPLOAD_TIMEOUT))
            .build()
            .new_agent();
        Ok(Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            region: region.to_owned(),
            keys,
            agent,
        })
    }

    /// Copies what the model saved since the last call: each URI's newest checkpoint that is
    /// not yet in `copied` (URI → when the copied one landed). Returns how many were copied;
    /// failures are logged and left for the next call.
    pub fn copy_new(&self, shared: &SharedEmulator, copied: &mut BTreeMap<String, i64>) -> usize {
        let due: Vec<(String, Checkpoint)> = shared.with(|emulator, now_ms| {
            emulator
                .latest_checkpoints(now_ms)
                .into_iter()
                .filter(|(uri, checkpoint)| copied.get(*uri) != Some(&checkpoint.at_ms))
                .map(|(uri, checkpoint)| (uri.to_owned(), checkpoint))
                .collect()
        });
        let mut done = 0;
        for (uri, checkpoint) in due {
            match self.copy(&uri, &checkpoint) {
                Ok(()) => {
                    tracing::info!(
                        %uri,
                        progress_ms = checkpoint.progress_ms,
                        "checkpoint copied to S3"
                    );
                    copied.insert(uri, checkpoint.at_ms);
                    done += 1;
                }
                Err(error) => tracing::warn!(
                    %uri,
                    error = format!("{error:#}"),
                    "checkpoint not copied to S3; trying again"
                ),
            }
        }
        done
    }

    /// One checkpoint's objects: its state, then its marker.
    fn copy(&self, uri: &str, checkpoint: &Checkpoint) -> anyhow::Result<()> {
        let (bucket, prefix) = split_uri(uri)?;
        let directory = format!("{prefix}checkpoint-{}", checkpoint.progress_ms);
        let state = serde_json::json!({
            "progressMs": checkpoint.progress_ms,
            "savedAtMs": checkpoint.at_ms,
        })
        .to_string();
        self.put(bucket, &format!("{directory}/state.json"), state.as_bytes())?;
        self.put(bucket, &format!("{directory}/{MARKER}"), b"")
    }

    fn put(&self, bucket: &str, key: &str, body: &[u8]) -> anyhow::Result<()> {
        let url = format!("{}/{bucket}/{}", self.endpoint, encode_key(key));
        let request = Outgoing {
            method: "PUT",
            url: &url,
            headers: &[],
            body,
        };
        let signed = sign_request(&self.keys, &self.region, S3, &request, SystemTime::now())?;
        let mut put = self.agent.put(&url);
        for (name, value) in &signed {
            put = put.header(name, value);
        }
        let mut response = put
            .send(body)
            .with_context(|| format!("PUT {url}: no answer"))?;
        let status = response.status().as_u16();
        if status != 200 {
            let text = response.body_mut().read_to_string().unwrap_or_default();
            bail!("PUT {url}: {status} {text}");
        }
        Ok(())
    }
}

/// Copies the model's checkpoints until `stop` turns true, waking at the next save the model
/// knows of and at least every [`POLL`].
pub fn copy_until_stopped(shared: SharedEmulator, copies: S3Copies, stop: watch::Receiver<bool>) {
    let mut copied = BTreeMap::new();
    while !*stop.borrow() {
        copies.copy_new(&shared, &mut copied);
        let wait_ms = shared.with(|emulator, now_ms| {
            emulator
                .next_checkpoint_at(now_ms)
                .map(|at| at.saturating_sub(now_ms))
        });
        let poll_ms = i64::try_from(POLL.as_millis()).unwrap_or(i64::MAX);
        let wait_ms = wait_ms.map_or(poll_ms, |ms| ms.clamp(1, poll_ms));
        std::thread::sleep(Duration::from_millis(wait_ms.unsigned_abs()));
    }
}

/// `s3://bucket/prefix` → (bucket, prefix ending in `/` unless empty).
fn split_uri(uri: &str) -> anyhow::Result<(&str, String)> {
    let rest = uri
        .strip_prefix("s3://")
        .with_context(|| format!("{uri:?} is not an s3://bucket/prefix URI"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("{uri:?} names no bucket");
    }
    let prefix = match prefix {
        "" => String::new(),
        p if p.ends_with('/') => p.to_owned(),
        p => format!("{p}/"),
    };
    Ok((bucket, prefix))
}

/// `key` as a URL path: every byte percent-encoded but unreserved characters and `/`.
fn encode_key(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    use std::sync::{Arc, Mutex};

    use trainyard_emulator::model::{Config, Emulator};

    use super::*;

    #[test]
    fn uris_split_into_a_bucket_and_a_directory_prefix() {
        assert_eq!(split_uri("s3://b/p/q").unwrap(), ("b", "p/q/".to_owned()));
        assert_eq!(split_uri("s3://b/p/").unwrap(), ("b", "p/".to_owned()));
        assert_eq!(split_uri("s3://b").unwrap(), ("b", String::new()));
        assert!(split_uri("s3:///p").is_err());
        assert!(split_uri("https://b/p").is_err());
    }

    #[test]
    fn keys_keep_their_slashes_and_encode_the_rest() {
        assert_eq!(
            encode_key("runs/a b/checkpoint-1/_SUCCESS"),
            "runs/a%20b/checkpoint-1/_SUCCESS"
        );
        assert_eq!(encode_key("é+="), "%C3%A9%2B%3D");
    }

    /// What a stand-in S3 was sent: (path, signed for S3, payload hash sent) of each PUT.
    type Puts = Arc<Mutex<Vec<(String, bool, bool)>>>;

    /// A loopback server that records each PUT and answers 200, or 503 while `refusing`.
    fn stand_in_s3(runtime: &tokio::runtime::Runtime, refusing: Arc<AtomicBool>) -> (String, Puts) {
        let puts = Puts::default();
        let seen = puts.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (seen, refusing) = (seen.clone(), refusing.clone());
            async move {
                let header = |name: &str| {
                    request
                        .headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                if refusing.load(Ordering::SeqCst) {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                let signed = header("authorization").contains("/us-east-1/s3/aws4_request");
                let hashed = header("x-amz-content-sha256").len() == 64;
                let path = request.uri().path().to_owned();
                seen.lock().unwrap().push((path, signed, hashed));
                axum::http::StatusCode::OK
            }
        });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await });
        (format!("http://{address}"), puts)
    }

    #[test]
    fn each_new_checkpoint_is_copied_once_state_then_marker_and_a_refused_one_again() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let refusing = Arc::new(AtomicBool::new(false));
        let (endpoint, puts) = stand_in_s3(&runtime, refusing.clone());
        let copies = S3Copies::new(&endpoint, "us-east-1", Keys::new("AKID", "secret")).unwrap();
        let t0 = 1_800_000_000_000;
        let now = Arc::new(AtomicI64::new(t0));
        let clock = now.clone();
        let shared = SharedEmulator::new(
            Emulator::new(Config::default()), // training starts 400 ms after create
            Arc::new(move || clock.load(Ordering::SeqCst)),
        );
        let request = serde_json::json!({
            "TrainingJobName": "writer",
            "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
            "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
            "HyperParameters": {"emulator_duration_s": "10", "emulator_checkpoint_interval_s": "2"},
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out/"},
            "CheckpointConfig": {"S3Uri": "s3://ckpt/runs/writer"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
        shared
            .with(|emulator, now_ms| emulator.create_training_job(request, now_ms))
            .unwrap();
        let mut copied = BTreeMap::new();
        let at = |ms: i64| now.store(t0 + 400 + ms, Ordering::SeqCst);

        at(1_000);
        assert_eq!(
            copies.copy_new(&shared, &mut copied),
            0,
            "nothing saved yet"
        );
        at(2_500);
        assert_eq!(copies.copy_new(&shared, &mut copied), 1);
        assert_eq!(copies.copy_new(&shared, &mut copied), 0, "copied once");
        // Refused, the 4 s checkpoint waits; by the next try the 6 s one is newer and is the
        // one copied.
        at(4_500);
        refusing.store(true, Ordering::SeqCst);
        assert_eq!(copies.copy_new(&shared, &mut copied), 0);
        refusing.store(false, Ordering::SeqCst);
        at(6_500);
        assert_eq!(copies.copy_new(&shared, &mut copied), 1);

        let puts = puts.lock().unwrap().clone();
        let paths: Vec<&str> = puts.iter().map(|(path, _, _)| path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/ckpt/runs/writer/checkpoint-2000/state.json",
                "/ckpt/runs/writer/checkpoint-2000/_SUCCESS",
                "/ckpt/runs/writer/checkpoint-6000/state.json",
                "/ckpt/runs/writer/checkpoint-6000/_SUCCESS",
            ]
        );
        assert!(
            puts.iter().all(|(_, signed, hashed)| *signed && *hashed),
            "every PUT signed for S3 with its payload's hash: {puts:?}"
        );
    }

    #[test]
    fn only_plain_http_endpoints_are_taken() {
        let keys = || Keys::new("AKID", "secret");
        assert!(S3Copies::new("http://127.0.0.1:9", "us-east-1", keys()).is_ok());
        let refused = S3Copies::new("https://s3.amazonaws.com", "us-east-1", keys()).unwrap_err();
        assert!(refused.to_string().contains("plain HTTP"), "{refused}");
    }
}
