"""Service jobs: submit (with and without clientToken), describe by id and by ARN, the
SUBMITTED → RUNNABLE move, re-prioritising and terminating."""

import re

import pytest

from support import (
    arn_pattern,
    expect_client_error,
    raw_request,
    submit_args,
    training_payload,
    unique,
    wait_for_status,
)

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_submit_returns_id_arn_and_name_and_the_job_starts_submitted_then_becomes_runnable(batch, shared_queue):
    name = unique("job")
    resp = batch.submit_service_job(**submit_args(shared_queue["jobQueueName"], name))
    assert resp["jobName"] == name
    assert UUID.match(resp["jobId"]), resp["jobId"]
    assert arn_pattern("service-job", resp["jobId"]).match(resp["jobArn"])

    job = batch.describe_service_job(jobId=resp["jobId"])
    assert job["status"] == "SUBMITTED", "a new job stays SUBMITTED until accepted into its queue"
    runnable = wait_for_status(batch, resp["jobId"], "RUNNABLE", timeout_s=10)
    assert runnable["jobQueue"] == shared_queue["jobQueueArn"], "jobQueue is always the ARN"


def test_describe_by_arn_equals_describe_by_id(batch, shared_queue):
    resp = batch.submit_service_job(**submit_args(shared_queue["jobQueueArn"], unique("job")))
    wait_for_status(batch, resp["jobId"], "RUNNABLE")
    by_id = batch.describe_service_job(jobId=resp["jobId"])
    by_arn = batch.describe_service_job(jobId=resp["jobArn"])
    by_id.pop("ResponseMetadata")
    by_arn.pop("ResponseMetadata")
    assert by_id == by_arn


def test_describe_echoes_the_request(batch, shared_queue):
    payload = training_payload(name="echo", count=2)
    args = submit_args(
        shared_queue["jobQueueName"],
        unique("job"),
        serviceRequestPayload=payload,
        schedulingPriority=321,
        retryStrategy={"attempts": 3, "evaluateOnExit": [{"action": "RETRY", "onStatusReason": "Received status from SageMaker: InternalServerError*"}]},
        timeoutConfig={"attemptDurationSeconds": 7200},
        tags={"team": "vision"},
    )
    resp = batch.submit_service_job(**args)
    job = batch.describe_service_job(jobId=resp["jobId"])
    assert job["jobId"] == resp["jobId"]
    assert job["jobArn"] == resp["jobArn"]
    assert job["jobName"] == args["jobName"]
    assert job["serviceJobType"] == "SAGEMAKER_TRAINING"
    assert job["serviceRequestPayload"] == payload
    assert job["schedulingPriority"] == 321
    assert job["retryStrategy"]["attempts"] == 3
    assert job["retryStrategy"]["evaluateOnExit"] == args["retryStrategy"]["evaluateOnExit"]
    assert job["timeoutConfig"] == {"attemptDurationSeconds": 7200}
    assert job["tags"] == {"team": "vision"}
    assert job["isTerminated"] is False
    assert isinstance(job["createdAt"], int) and job["createdAt"] > 1_600_000_000_000, "epoch milliseconds"


def test_same_client_token_and_request_return_the_same_job(batch, shared_queue):
    args = submit_args(shared_queue["jobQueueName"], unique("job"), clientToken=unique("token"))
    first = batch.submit_service_job(**args)
    second = batch.submit_service_job(**args)
    assert second["jobId"] == first["jobId"]
    assert second["jobArn"] == first["jobArn"]


def test_different_client_tokens_make_different_jobs(batch, shared_queue):
    args = submit_args(shared_queue["jobQueueName"], unique("job"))
    a = batch.submit_service_job(**args, clientToken=unique("token"))
    b = batch.submit_service_job(**args, clientToken=unique("token"))
    assert a["jobId"] != b["jobId"]


def test_boto3_generates_a_token_per_call_so_repeats_make_new_jobs(batch, shared_queue):
    args = submit_args(shared_queue["jobQueueName"], unique("job"))
    ids = {batch.submit_service_job(**args)["jobId"] for _ in range(3)}
    assert len(ids) == 3


def test_submit_without_any_client_token_is_accepted(shared_queue):
    """boto3 always fills clientToken; a raw client need not."""
    body = submit_args(shared_queue["jobQueueName"], unique("job"))
    import json

    resp = raw_request("/v1/submitservicejob", json.dumps(body).encode())
    assert resp.status == 200, resp.body
    assert UUID.match(resp.json()["jobId"])


@pytest.mark.parametrize("by", ["id", "arn"])
def test_update_service_job_changes_priority(batch, shared_queue, by):
    resp = batch.submit_service_job(**submit_args(shared_queue["jobQueueName"], unique("job"), schedulingPriority=1))
    ref = resp["jobId"] if by == "id" else resp["jobArn"]
    updated = batch.update_service_job(jobId=ref, schedulingPriority=9999)
    assert updated["jobId"] == resp["jobId"]
    assert updated["jobArn"] == resp["jobArn"]
    assert updated["jobName"] == resp["jobName"]
    assert batch.describe_service_job(jobId=ref)["schedulingPriority"] == 9999


@pytest.mark.parametrize("by", ["id", "arn"])
def test_terminate_fails_the_job_with_the_reason(batch, shared_queue, by):
    resp = batch.submit_service_job(**submit_args(shared_queue["jobQueueName"], unique("job")))
    wait_for_status(batch, resp["jobId"], "RUNNABLE")
    ref = resp["jobId"] if by == "id" else resp["jobArn"]
    out = batch.terminate_service_job(jobId=ref, reason="no longer needed")
    out.pop("ResponseMetadata")
    assert out == {}
    job = batch.describe_service_job(jobId=ref)
    assert job["status"] == "FAILED"
    assert job["isTerminated"] is True
    assert job["statusReason"] == "no longer needed"
    assert job.get("stoppedAt", 0) >= job["createdAt"]


def test_terminating_a_submitted_job_works_too(batch, shared_queue):
    resp = batch.submit_service_job(**submit_args(shared_queue["jobQueueName"], unique("job")))
    batch.terminate_service_job(jobId=resp["jobId"], reason="changed my mind")
    job = batch.describe_service_job(jobId=resp["jobId"])
    assert (job["status"], job["isTerminated"], job["statusReason"]) == ("FAILED", True, "changed my mind")


def test_a_terminated_job_stays_failed_and_keeps_its_first_reason(batch, shared_queue):
    resp = batch.submit_service_job(**submit_args(shared_queue["jobQueueName"], unique("job")))
    batch.terminate_service_job(jobId=resp["jobId"], reason="first")
    try:
        batch.terminate_service_job(jobId=resp["jobId"], reason="second")
    except batch.exceptions.ClientException:
        pass  # refusing a second terminate is also fine
    job = batch.describe_service_job(jobId=resp["jobId"])
    assert (job["status"], job["statusReason"]) == ("FAILED", "first")


def test_unknown_job_id_is_a_client_error_naming_it(batch):
    missing = "00000000-0000-4000-8000-000000000000"
    expect_client_error(batch.describe_service_job, missing, jobId=missing)
    expect_client_error(batch.terminate_service_job, missing, jobId=missing, reason="x")
    expect_client_error(batch.update_service_job, missing, jobId=missing, schedulingPriority=1)


def test_sagemaker_sdk_call_shapes(batch, shared_queue):
    """Exactly what sagemaker.aws_batch sends (reference §3.3): default retry strategy and
    timeout, training tags moved to Batch tags, and the job ARN as jobId afterwards."""
    retry = {
        "attempts": 1,
        "evaluateOnExit": [
            {
                "action": "RETRY",
                "onStatusReason": "Received status from SageMaker:InternalServerError: We encountered an internal error. Please try again.",
            },
            {"action": "EXIT", "onStatusReason": "*"},
        ],
    }
    name = unique("sdk")
    resp = batch.submit_service_job(
        jobName=name,
        jobQueue=shared_queue["jobQueueName"],
        retryStrategy=retry,
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=training_payload(name="sdk-job"),
        timeoutConfig={"attemptDurationSeconds": 86400},
        schedulingPriority=5,
        tags={"project": "sdk"},
    )
    assert resp["jobArn"] and resp["jobName"] == name, "the SDK requires jobArn and jobName"
    arn = resp["jobArn"]
    job = batch.describe_service_job(jobId=arn)
    assert job["retryStrategy"]["attempts"] == 1
    assert job["retryStrategy"]["evaluateOnExit"] == retry["evaluateOnExit"]
    assert job["timeoutConfig"] == {"attemptDurationSeconds": 86400}
    # TrainingQueue.list_jobs(job_name) sends the queue name and a JOB_NAME filter.
    listed = batch.list_service_jobs(jobQueue=shared_queue["jobQueueName"], filters=[{"name": "JOB_NAME", "values": [name]}])
    assert [j["jobArn"] for j in listed["jobSummaryList"]] == [arn]
    assert "nextToken" not in listed, "the SDK recurses while nextToken is truthy"
    batch.update_service_job(jobId=arn, schedulingPriority=50)
    batch.terminate_service_job(jobId=arn, reason="Default terminate reason")
    job = batch.describe_service_job(jobId=arn)
    assert job["status"] == "FAILED" and job["statusReason"] == "Default terminate reason"


def test_endpoint_from_aws_endpoint_url_batch(endpoint, shared_queue, monkeypatch):
    """The SDK builds boto3.client("batch") with no endpoint_url; AWS_ENDPOINT_URL_BATCH redirects it."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL_BATCH", endpoint)
    client = boto3.client("batch", region_name="us-east-1")
    resp = client.submit_service_job(**submit_args(shared_queue["jobQueueName"], unique("env")))
    assert client.describe_service_job(jobId=resp["jobArn"])["jobId"] == resp["jobId"]


def test_share_identifier_is_required_on_fair_share_queues_and_refused_elsewhere(batch, resources, shared_queue):
    fair = resources.fairshare_queue(shareDecaySeconds=0)
    expect_client_error(batch.submit_service_job, "shareIdentifier", **submit_args(fair["jobQueueName"], unique("job")))
    ok = batch.submit_service_job(**submit_args(fair["jobQueueName"], unique("job"), shareIdentifier="vision"))
    assert batch.describe_service_job(jobId=ok["jobId"])["shareIdentifier"] == "vision"
    expect_client_error(
        batch.submit_service_job,
        "shareIdentifier",
        **submit_args(shared_queue["jobQueueName"], unique("job"), shareIdentifier="vision"),
    )


def test_quota_share_name_is_required_on_quota_queues(batch, resources):
    queue = resources.quota_queue()
    expect_client_error(batch.submit_service_job, "quotaShareName", **submit_args(queue["jobQueueName"], unique("job")))
    ok = batch.submit_service_job(
        **submit_args(queue["jobQueueName"], unique("job"), quotaShareName=queue["quotaShareName"])
    )
    assert batch.describe_service_job(jobId=ok["jobId"])["quotaShareName"] == queue["quotaShareName"]
    expect_client_error(
        batch.submit_service_job,
        "quotaShareName",
        "quota share",
        **submit_args(queue["jobQueueName"], unique("job"), quotaShareName=unique("nope")),
    )
