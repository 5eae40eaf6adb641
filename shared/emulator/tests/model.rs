//! The emulator's lifecycle, outcomes, quotas and events, driven over virtual time.

// Tests may panic on what they did not expect.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use trainyard_emulator::model::{
    CAPACITY_ERROR, CheckpointProgress, Config, Emulator, SageMakerError, TimeFormat,
};

const T0: i64 = 1_800_000_000_000;

fn request(name: &str, hyper: Value) -> Value {
    json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        "HyperParameters": hyper,
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out/"},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Tags": [{"Key": "team", "Value": "vision"}]
    })
}

fn status(e: &Emulator, name: &str) -> (String, String) {
    let d = e
        .describe_training_job(name, TimeFormat::EpochSeconds)
        .unwrap();
    (
        d["TrainingJobStatus"].as_str().unwrap().into(),
        d["SecondaryStatus"].as_str().unwrap().into(),
    )
}

/// Advances in 50 ms steps until `until`, collecting (status, secondary) of every event.
fn run(e: &mut Emulator, from: i64, until: i64) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let mut t = from;
    while t <= until {
        e.advance(t);
        for ev in e.take_events(t) {
            seen.push((
                ev.status().as_str().into(),
                ev.secondary_status().as_str().into(),
            ));
        }
        t += 50;
    }
    seen
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.into(), b.into())
}

#[test]
fn a_job_walks_through_every_secondary_status_to_completed() {
    let mut e = Emulator::new(Config::default());
    let arn = e
        .create_training_job(
            request("Resnet-50", json!({"emulator_duration_s": "1"})),
            T0,
        )
        .unwrap();
    assert_eq!(
        arn,
        "arn:aws:sagemaker:us-east-1:000000000000:training-job/resnet-50"
    );
    let seen = run(&mut e, T0, T0 + 3_000);
    assert_eq!(
        seen,
        [
            pair("InProgress", "Starting"),
            pair("InProgress", "Downloading"),
            pair("InProgress", "Training"),
            pair("InProgress", "Uploading"),
            pair("Completed", "Completed")
        ]
    );
    let d = e
        .describe_training_job("Resnet-50", TimeFormat::EpochMillis)
        .unwrap();
    assert_eq!(d["TrainingStartTime"], json!(T0 + 400));
    assert_eq!(d["TrainingEndTime"], json!(T0 + 1_500));
    assert_eq!(
        d["ModelArtifacts"]["S3ModelArtifacts"],
        "s3://bucket/out/Resnet-50/output/model.tar.gz"
    );
    assert_eq!(d["BillableTimeInSeconds"], json!(2), "1 s on 2 instances");
    assert_eq!(d["SecondaryStatusTransitions"].as_array().unwrap().len(), 5);
    assert!(
        d.get("Tags").is_none(),
        "tags are listed by ListTags, not described"
    );
    assert_eq!(e.next_deadline(), None, "nothing left to happen");
}

#[test]
fn outcomes_come_from_hyperparameters() {
    let cases = [
        (
            "Failed:AlgorithmError: loss is NaN",
            "Failed",
            "Failed",
            Some("AlgorithmError: loss is NaN"),
        ),
        ("CapacityError", "Failed", "Failed", Some(CAPACITY_ERROR)),
        ("Completed", "Completed", "Completed", None),
    ];
    for (outcome, status_want, secondary_want, reason) in cases {
        let mut e = Emulator::new(Config::default());
        e.create_training_job(
            request(
                "job",
                json!({"emulator_duration_s": "1", "emulator_outcome": outcome}),
            ),
            T0,
        )
        .unwrap();
        run(&mut e, T0, T0 + 3_000);
        assert_eq!(
            status(&e, "job"),
            pair(status_want, secondary_want),
            "{outcome}"
        );
        let d = e
            .describe_training_job("job", TimeFormat::EpochSeconds)
            .unwrap();
        assert_eq!(d["FailureReason"].as_str(), reason, "{outcome}");
    }
}

#[test]
fn capacity_errors_fail_before_training_starts() {
    let mut e = Emulator::new(Config::default());
    e.create_training_job(
        request("job", json!({"emulator_outcome": "CapacityError"})),
        T0,
    )
    .unwrap();
    let seen = run(&mut e, T0, T0 + 1_000);
    assert_eq!(
        seen,
        [pair("InProgress", "Starting"), pair("Failed", "Failed")]
    );
    let d = e
        .describe_training_job("job", TimeFormat::EpochSeconds)
        .unwrap();
    assert!(d.get("TrainingStartTime").is_none());
}

#[test]
fn stop_moves_through_stopping_to_stopped() {
    let mut e = Emulator::new(Config::default());
    e.create_training_job(request("job", json!({})), T0)
        .unwrap();
    run(&mut e, T0, T0 + 1_000);
    assert_eq!(status(&e, "job"), pair("InProgress", "Training"));
    e.stop_training_job("job", T0 + 1_000).unwrap();
    assert_eq!(status(&e, "job"), pair("Stopping", "Stopping"));
    e.stop_training_job("job", T0 + 1_100).unwrap();
    run(&mut e, T0 + 1_100, T0 + 2_000);
    assert_eq!(status(&e, "job"), pair("Stopped", "Stopped"));
    let err = e.stop_training_job("job", T0 + 2_000).unwrap_err();
    assert_eq!(err.code(), "ValidationException");
}

#[test]
fn max_runtime_stops_a_job_that_trains_too_long() {
    let mut e = Emulator::new(Config::default());
    let mut req = request("job", json!({"emulator_duration_s": "10"}));
    req["StoppingCondition"]["MaxRuntimeInSeconds"] = json!(2);
    e.create_training_job(req, T0).unwrap();
    run(&mut e, T0, T0 + 5_000);
    assert_eq!(status(&e, "job"), pair("Stopped", "MaxRuntimeExceeded"));
}

#[test]
fn duplicate_names_and_quotas_are_refused_like_sagemaker() {
    let config = Config {
        account_quotas: [("ml.p4d.24xlarge".to_owned(), 3)].into(),
        ..Config::default()
    };
    let mut e = Emulator::new(config);
    e.create_training_job(request("a", json!({"emulator_duration_s": "1"})), T0)
        .unwrap();
    let dup = e
        .create_training_job(request("A", json!({})), T0)
        .unwrap_err();
    assert!(
        matches!(dup, SageMakerError::ResourceInUse(ref m) if m.contains("already exists")),
        "{dup:?}"
    );
    let over = e
        .create_training_job(request("b", json!({})), T0)
        .unwrap_err();
    assert_eq!(over.code(), "ResourceLimitExceeded");
    assert!(
        over.to_string()
            .contains("current utilization of 2 Instances and a request delta of 2"),
        "{over}"
    );
    run(&mut e, T0, T0 + 3_000);
    assert!(
        e.create_training_job(request("b", json!({})), T0 + 3_000)
            .is_ok(),
        "capacity frees when a job ends"
    );
}

#[test]
fn instance_preferences_launch_the_first_type_within_quota_and_describe_it() {
    let config = Config {
        account_quotas: [("ml.p5.48xlarge".to_owned(), 2)].into(),
        ..Config::default()
    };
    let mut e = Emulator::new(config);
    let preferring = |name: &str| {
        let mut r = request(name, json!({}));
        r["ResourceConfig"] = json!({
            "InstanceCount": 2,
            "InstancePreferences": [
                {"InstanceType": "ml.p5.48xlarge"},
                {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4}
            ]
        });
        r
    };
    let selected = |e: &Emulator, name: &str| {
        let d = e
            .describe_training_job(name, TimeFormat::EpochSeconds)
            .unwrap();
        (
            d["ResourceConfig"]["SelectedInstanceType"].clone(),
            d["ResourceConfig"]["SelectedInstanceCount"].clone(),
            d["ResourceConfig"]["InstancePreferences"]
                .as_array()
                .map(Vec::len),
        )
    };
    e.create_training_job(preferring("first"), T0).unwrap();
    assert_eq!(
        selected(&e, "first"),
        (json!("ml.p5.48xlarge"), json!(2), Some(2))
    );
    // The p5 quota is used up: SageMaker falls back to the next preference.
    e.create_training_job(preferring("second"), T0).unwrap();
    assert_eq!(
        selected(&e, "second"),
        (json!("ml.p4d.24xlarge"), json!(4), Some(2))
    );
}

#[test]
fn a_member_sagemakers_model_lacks_is_a_validation_error_naming_it() {
    let mut e = Emulator::new(Config::default());
    let mut r = request("a", json!({}));
    r["ResourceConfig"]["InstanceTypo"] = json!("ml.p5.48xlarge");
    let err = e.create_training_job(r, T0).unwrap_err();
    assert_eq!(err.code(), "ValidationException");
    assert!(
        err.to_string()
            .contains("ResourceConfig.InstanceTypo is not a member"),
        "{err}"
    );
}

#[test]
fn invalid_requests_are_validation_errors() {
    let mut e = Emulator::new(Config::default());
    let cases = [
        (json!({"TrainingJobName": "x"}), "RoleArn"),
        (request("bad_name", json!({})), "TrainingJobName"),
        (
            request("a", json!({"emulator_duration_s": "soon"})),
            "emulator_duration_s",
        ),
        (
            request("b", json!({"emulator_outcome": "Exploded"})),
            "emulator_outcome",
        ),
    ];
    for (req, needle) in cases {
        let err = e.create_training_job(req, T0).unwrap_err();
        assert_eq!(err.code(), "ValidationException");
        assert!(err.to_string().contains(needle), "{err}");
    }
    assert_eq!(
        e.describe_training_job("nope", TimeFormat::EpochSeconds)
            .unwrap_err()
            .code(),
        "ResourceNotFound"
    );
}

#[test]
fn the_same_seed_gives_the_same_history_and_rates_apply() {
    let config = Config {
        failure_rate: 0.3,
        capacity_error_rate: 0.2,
        duplicate_event_rate: 0.5,
        max_event_delay_ms: 400,
        seed: 42,
        ..Config::default()
    };
    let history = |config: &Config| {
        let mut e = Emulator::new(config.clone());
        for i in 0..200 {
            e.create_training_job(
                request(&format!("job-{i}"), json!({"emulator_duration_s": "1"})),
                T0 + i,
            )
            .unwrap();
        }
        let mut events = Vec::new();
        let mut t = T0;
        while t < T0 + 5_000 {
            e.advance(t);
            events.extend(
                e.take_events(t)
                    .into_iter()
                    .map(|ev| (ev.id(), ev.time_ms, ev.detail().to_string())),
            );
            t += 25;
        }
        let outcomes: Vec<String> = (0..200)
            .map(|i| status(&e, &format!("job-{i}")).0)
            .collect();
        (events, outcomes)
    };
    let (events, outcomes) = history(&config);
    assert_eq!(
        (events.clone(), outcomes.clone()),
        history(&config),
        "replays exactly"
    );
    let failed = outcomes.iter().filter(|s| *s == "Failed").count();
    assert!(
        (70..=130).contains(&failed),
        "about half of 200 fail: {failed}"
    );
    assert!(
        events.len() > 200 * 3,
        "duplicates add events: {}",
        events.len()
    );
    let out_of_order = events.windows(2).filter(|w| w[1].1 < w[0].1).count();
    assert!(out_of_order > 0, "delays reorder some events");
}

#[test]
fn events_wrap_in_an_eventbridge_envelope() {
    let mut e = Emulator::new(Config::default());
    e.create_training_job(request("job", json!({})), T0)
        .unwrap();
    let ev = e
        .take_events(T0)
        .remove(0)
        .to_eventbridge("us-east-1", "000000000000");
    assert_eq!(ev["source"], "aws.sagemaker");
    assert_eq!(ev["detail-type"], "SageMaker Training Job State Change");
    assert_eq!(ev["resources"][0], ev["detail"]["TrainingJobArn"]);
    assert_eq!(ev["detail"]["CreationTime"], json!(T0));
}

#[test]
fn list_training_jobs_is_newest_first_and_filtered() {
    let mut e = Emulator::new(Config::default());
    for (i, name) in ["alpha-1", "beta-1", "alpha-2"].iter().enumerate() {
        e.create_training_job(
            request(name, json!({"emulator_duration_s": "1"})),
            T0 + i as i64,
        )
        .unwrap();
    }
    let names = |v: Vec<Value>| {
        v.iter()
            .map(|j| j["TrainingJobName"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(e.list_training_jobs(Some("ALPHA"), None, 10)),
        ["alpha-2", "alpha-1"]
    );
    assert_eq!(names(e.list_training_jobs(None, None, 1)), ["alpha-2"]);
    run(&mut e, T0, T0 + 3_000);
    assert_eq!(e.list_training_jobs(None, Some("Completed"), 10).len(), 3);
    let tags = e
        .list_tags("arn:aws:sagemaker:us-east-1:000000000000:training-job/beta-1")
        .unwrap();
    assert_eq!(tags, json!([{"Key": "team", "Value": "vision"}]));
}

#[test]
fn the_next_deadline_follows_creates_stops_and_forgets_and_one_advance_keeps_time_order() {
    let config = Config::default();
    let mut e = Emulator::new(config.clone());
    assert_eq!(e.next_deadline(), None);
    // "b" is created first but trains for 1 s; "a" trains for 3 s.
    e.create_training_job(request("b", json!({"emulator_duration_s": "1"})), T0)
        .unwrap();
    e.create_training_job(request("a", json!({"emulator_duration_s": "3"})), T0)
        .unwrap();
    // The two creation events are due now.
    assert_eq!(e.next_deadline(), Some(T0));
    assert_eq!(e.take_events(T0).len(), 2);
    assert_eq!(e.next_deadline(), Some(T0 + config.provisioning_ms));

    // One advance over both lifetimes: events in the order they happened, not job by job.
    let end = T0 + 10_000;
    e.advance(end);
    let events: Vec<(i64, String, String)> = e
        .take_events(end)
        .iter()
        .map(|ev| {
            (
                ev.time_ms,
                ev.training_job_name().to_owned(),
                ev.secondary_status().as_str().to_owned(),
            )
        })
        .collect();
    let mut in_time_order = events.clone();
    in_time_order.sort_by_key(|(at, name, _)| (*at, name.clone()));
    assert_eq!(events, in_time_order);
    assert_eq!(events.len(), 8, "{events:?}");
    assert_eq!(e.next_deadline(), None, "both ended");
    let state = e.training_job_state("A").unwrap();
    assert_eq!(state.secondary, "Completed");
    assert_eq!(
        state.arn,
        e.describe_training_job("a", TimeFormat::EpochMillis)
            .unwrap()["TrainingJobArn"]
    );

    // A stop moves the deadline to the end of the grace; forgetting the job removes it.
    e.create_training_job(request("c", json!({})), end).unwrap();
    e.take_events(end);
    e.advance(end + 1_000);
    e.take_events(end + 1_000);
    let training_ends = e.next_deadline().unwrap();
    e.stop_training_job("c", end + 1_000).unwrap();
    let grace_ends = end + 1_000 + config.stop_grace_ms;
    assert!(grace_ends < training_ends);
    e.take_events(end + 1_000);
    assert_eq!(e.next_deadline(), Some(grace_ends));
    assert!(e.forget_training_job("c"));
    assert_eq!(e.next_deadline(), None);
    assert!(e.training_job_state("c").is_err());
}

/// `request(..)` writing checkpoints to `uri`.
fn checkpointing(name: &str, uri: &str, hyper: Value) -> Value {
    let mut req = request(name, hyper);
    req["CheckpointConfig"] = json!({"S3Uri": uri});
    req
}

/// Creates `quiet` at `at_ms`: 10 s of training with a `CheckpointConfig` but no cadence, so
/// it publishes nothing.
fn create_quiet(e: &mut Emulator, at_ms: i64) {
    let hyper = json!({"emulator_duration_s": "10"});
    e.create_training_job(checkpointing("quiet", "s3://b/quiet", hyper), at_ms)
        .unwrap();
}

/// A job with a `CheckpointConfig` saves every `emulator_checkpoint_interval_s` of training;
/// stopped, it leaves its newest checkpoint, and the next job writing the same URI resumes from
/// it and trains only what is left.
#[test]
fn checkpoint_writers_save_on_a_cadence_and_the_next_attempt_resumes() {
    let mut e = Emulator::new(Config::default()); // training starts 400 ms after create
    let uri = "s3://bucket/checkpoints/job";
    let hyper = json!({"emulator_duration_s": "10", "emulator_checkpoint_interval_s": "2"});
    e.create_training_job(checkpointing("first", uri, hyper.clone()), T0)
        .unwrap();
    let trained = |ms: i64| T0 + 400 + ms;
    run(&mut e, T0, trained(1_900));
    assert_eq!(e.latest_checkpoint(uri, trained(1_900)), None, "none yet");
    run(&mut e, trained(1_900), trained(5_000));
    let newest = e.latest_checkpoint(uri, trained(5_000)).unwrap();
    assert_eq!(
        (newest.progress_ms, newest.at_ms, newest.previous_at_ms),
        (4_000, trained(4_000), Some(trained(2_000)))
    );
    e.stop_training_job("first", trained(5_000)).unwrap();
    assert_eq!(
        e.checkpoint_progress("first"),
        Some(CheckpointProgress {
            resumed_ms: 0,
            saved_ms: Some(4_000)
        })
    );
    // Stopping, it writes no more: the second after the stop counts for nothing.
    run(&mut e, trained(5_000), trained(7_000));
    assert_eq!(e.latest_checkpoint(uri, trained(7_000)), Some(newest));

    // The next attempt resumes at 4 s of 10: 6 s of training, checkpoints continuing.
    let at = trained(7_000);
    e.create_training_job(checkpointing("second", uri, hyper), at)
        .unwrap();
    run(&mut e, at, at + 400 + 5_950);
    assert_eq!(status(&e, "second"), pair("InProgress", "Training"));
    let resumed = e.latest_checkpoint(uri, at + 400 + 2_000).unwrap();
    assert_eq!(resumed.progress_ms, 6_000);
    run(&mut e, at + 400 + 5_950, at + 400 + 6_050);
    assert_eq!(status(&e, "second"), pair("InProgress", "Uploading"));
    let second = e.checkpoint_progress("second").unwrap();
    assert_eq!((second.resumed_ms, second.kept_ms()), (4_000, 6_000));
}

/// The whole bucket at an instant (what a copy to S3 shows): every URI's newest checkpoint,
/// stored or being written, and when the next periodic one lands, so a copier can wake then.
#[test]
fn the_bucket_lists_every_uri_and_tells_when_the_next_checkpoint_lands() {
    let mut e = Emulator::new(Config::default()); // training starts 400 ms after create
    let trained = |ms: i64| T0 + 400 + ms;
    let cadence =
        |s: &str| json!({"emulator_duration_s": "10", "emulator_checkpoint_interval_s": s});
    e.create_training_job(checkpointing("two", "s3://b/two", cadence("2")), T0)
        .unwrap();
    e.create_training_job(checkpointing("three", "s3://b/three", cadence("3")), T0)
        .unwrap();
    create_quiet(&mut e, T0);
    assert_eq!(e.next_checkpoint_at(T0), None, "nobody trains yet");
    run(&mut e, T0, trained(1_000));
    assert_eq!(e.next_checkpoint_at(trained(1_000)), Some(trained(2_000)));
    assert!(e.latest_checkpoints(trained(1_000)).is_empty());
    run(&mut e, trained(1_000), trained(3_500));
    let at = |c: &trainyard_emulator::model::Checkpoint| (c.progress_ms, c.at_ms);
    let listed: Vec<_> = e
        .latest_checkpoints(trained(3_500))
        .into_iter()
        .map(|(uri, c)| (uri.to_owned(), at(&c)))
        .collect();
    assert_eq!(
        listed,
        [
            ("s3://b/three".to_owned(), (3_000, trained(3_000))),
            ("s3://b/two".to_owned(), (2_000, trained(2_000))),
        ]
    );
    assert_eq!(e.next_checkpoint_at(trained(3_500)), Some(trained(4_000)));
    // Exactly at a landing, the next is a whole interval on; the end of training is the last.
    assert_eq!(e.next_checkpoint_at(trained(6_000)), Some(trained(8_000)));
    assert_eq!(e.next_checkpoint_at(trained(9_500)), Some(trained(10_000)));
    assert_eq!(e.next_checkpoint_at(trained(10_000)), None);
    // A stopped writer's checkpoint stays listed, from the bucket.
    e.stop_training_job("two", trained(3_500)).unwrap();
    run(&mut e, trained(3_500), trained(4_500));
    let two = e.latest_checkpoints(trained(4_500))["s3://b/two"];
    assert_eq!(at(&two), (2_000, trained(2_000)));
    assert_eq!(e.next_checkpoint_at(trained(4_500)), Some(trained(6_000)));
}

/// A writer that saves when told to stop keeps all its progress; a job with a
/// `CheckpointConfig` but no cadence publishes nothing; a cadence that is not a positive number
/// is refused.
#[test]
fn a_writer_may_save_on_stop_and_one_without_a_cadence_publishes_nothing() {
    let mut e = Emulator::new(Config::default());
    let hyper = json!({
        "emulator_duration_s": "10",
        "emulator_checkpoint_interval_s": "4",
        "emulator_checkpoint_on_stop": "true"
    });
    e.create_training_job(checkpointing("saver", "s3://b/saver", hyper), T0)
        .unwrap();
    run(&mut e, T0, T0 + 400 + 5_000);
    e.stop_training_job("saver", T0 + 400 + 5_000).unwrap();
    let saved = e
        .latest_checkpoint("s3://b/saver", T0 + 400 + 5_000)
        .unwrap();
    assert_eq!(
        (saved.progress_ms, saved.at_ms, saved.previous_at_ms),
        (5_000, T0 + 400 + 5_000, Some(T0 + 400 + 4_000))
    );

    create_quiet(&mut e, T0);
    run(&mut e, T0 + 400 + 5_000, T0 + 400 + 9_000);
    e.stop_training_job("quiet", T0 + 400 + 9_000).unwrap();
    assert_eq!(e.latest_checkpoint("s3://b/quiet", T0 + 400 + 9_000), None);
    assert_eq!(e.checkpoint_progress("quiet").map(|p| p.kept_ms()), Some(0));
    assert_eq!(e.checkpoint_progress("saver-unknown"), None);

    for bad in ["0", "-1", "often"] {
        let req = checkpointing(
            "bad",
            "s3://b/bad",
            json!({"emulator_checkpoint_interval_s": bad}),
        );
        let err = e.create_training_job(req, T0).unwrap_err();
        assert_eq!(err.code(), "ValidationException", "{bad}");
        assert!(
            err.to_string().contains("emulator_checkpoint_interval_s"),
            "{err}"
        );
    }
}
