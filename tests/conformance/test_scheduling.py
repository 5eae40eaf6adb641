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


def test_a_job_with_instance_preferences_gives_back_the_preferences_not_launched(batch, resources):
    """`ResourceConfig.InstancePreferences` (newer than many SDKs) is carried to the emulated
    SageMaker unchanged. Dispatched, the job holds every preference (3 instances of the
    environment's 3 here); once SageMaker says which it launched (the first: 1 instance), the
    others go back, so a 2-instance job starts beside it."""
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
    payload["HyperParameters"] = {"emulator_duration_s": "8"}
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
    # Dispatched while the preferring job ran: it held the first preference only (1 + 2 <= 3;
    # holding both, 3 + 2 > 3, it would have waited for the end).
    assert after["scheduledAt"] < done["stoppedAt"], (after, done)
