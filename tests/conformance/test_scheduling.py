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
