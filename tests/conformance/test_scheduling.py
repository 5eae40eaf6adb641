"""The scheduling loop as boto3 sees it: a submitted job runs on `trainyard up`'s emulated
SageMaker and reaches SUCCEEDED, and the description carries what Batch reports for a run
(timestamps, attempts, the training job's ARN)."""

from __future__ import annotations

import json

import support


def test_a_submitted_job_runs_on_the_emulated_sagemaker_and_succeeds(batch, resources):
    env = resources.environment([{"maxCapacity": 2, "capacityUnit": "NUM_INSTANCES"}])
    queue = resources.queue(env["serviceEnvironmentArn"])
    payload = json.loads(support.training_payload(name="sched"))
    payload["HyperParameters"] = {"emulator_duration_s": "0.2"}
    job = batch.submit_service_job(
        **support.submit_args(
            queue["jobQueueArn"],
            support.unique("sched"),
            serviceRequestPayload=json.dumps(payload),
        )
    )
    done = support.wait_for_status(batch, job["jobId"], "SUCCEEDED", timeout_s=30.0)
    latest = done["latestAttempt"]
    assert latest["serviceResourceId"]["name"] == "TrainingJobArn"
    assert ":training-job/" in latest["serviceResourceId"]["value"]
    assert done["createdAt"] <= done["scheduledAt"] <= done["startedAt"] <= done["stoppedAt"]
    assert len(done["attempts"]) == 1
    attempt = done["attempts"][0]
    assert attempt["serviceResourceId"] == latest["serviceResourceId"]
    assert attempt["startedAt"] <= attempt["stoppedAt"]
    assert done["isTerminated"] is False


def test_a_job_with_instance_preferences_holds_each_preferred_type_and_succeeds(batch, resources):
    """`ResourceConfig.InstancePreferences` (newer than many SDKs) is carried to the emulated
    SageMaker unchanged; while it runs, the job holds the most any preference asks for (2 of the
    environment's 3 instances here), so a 2-instance job waits behind it."""
    env = resources.environment([{"maxCapacity": 3, "capacityUnit": "NUM_INSTANCES"}])
    queue = resources.queue(env["serviceEnvironmentArn"])
    payload = json.loads(support.training_payload(name="prefs"))
    payload["ResourceConfig"] = {
        "InstanceCount": 1,
        "VolumeSizeInGB": 30,
        "InstancePreferences": [
            {"InstanceType": "ml.m5.large"},
            {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2},
        ],
    }
    payload["HyperParameters"] = {"emulator_duration_s": "3"}
    preferring = batch.submit_service_job(
        **support.submit_args(
            queue["jobQueueArn"], support.unique("prefs"), serviceRequestPayload=json.dumps(payload)
        )
    )
    support.wait_for_status(batch, preferring["jobId"], "RUNNING", timeout_s=30.0)
    two = batch.submit_service_job(
        **support.submit_args(
            queue["jobQueueArn"],
            support.unique("two"),
            serviceRequestPayload=support.training_payload(name="two", count=2),
        )
    )
    done = support.wait_for_status(batch, preferring["jobId"], "SUCCEEDED", timeout_s=30.0)
    assert ":training-job/" in done["latestAttempt"]["serviceResourceId"]["value"]
    after = support.wait_for_status(batch, two["jobId"], "SUCCEEDED", timeout_s=40.0)
    # Started after the preferring job ended, not beside it: 2 + 2 > 3 (holding only the first
    # preference, 1 + 2, would have let it start at once).
    assert after["startedAt"] >= done["stoppedAt"], (after, done)
