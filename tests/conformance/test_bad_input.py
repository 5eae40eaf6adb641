"""Bad input: every out-of-range field, malformed JSON, unknown operations and resources, and
the size limits. Each is a 400 ClientException whose message names the problem."""

import json

import pytest

from support import expect_client_error, raw_request, submit_args, training_payload, unique

RETRY_PATTERN = "Received status from SageMaker: InternalServerError*"


def submit_cases():
    # (case name, fields merged into a valid SubmitServiceJob request, keywords the message names)
    return [
        ("priority above 9999", {"schedulingPriority": 10000}, ["schedulingPriority"]),
        ("negative priority", {"schedulingPriority": -1}, ["schedulingPriority"]),
        ("zero attempts", {"retryStrategy": {"attempts": 0}}, ["attempts"]),
        ("eleven attempts", {"retryStrategy": {"attempts": 11}}, ["attempts"]),
        (
            "six evaluateOnExit rules",
            {"retryStrategy": {"attempts": 2, "evaluateOnExit": [{"action": "EXIT", "onStatusReason": "*"}] * 6}},
            ["evaluateOnExit"],
        ),
        (
            "a 513-character pattern",
            {"retryStrategy": {"attempts": 2, "evaluateOnExit": [{"action": "RETRY", "onStatusReason": "x" * 513}]}},
            ["onStatusReason", "512"],
        ),
        ("51 tags", {"tags": {f"k{i}": "v" for i in range(51)}}, ["tags", "50"]),
        ("a job name with a space", {"jobName": "bad name"}, ["jobName"]),
        ("a 129-character job name", {"jobName": "j" * 129}, ["jobName", "128"]),
        ("a 65-character client token", {"clientToken": "t" * 65}, ["clientToken"]),
        ("a payload that is not JSON", {"serviceRequestPayload": "{not json"}, ["serviceRequestPayload"]),
        (
            "a payload without ResourceConfig",
            {"serviceRequestPayload": json.dumps({"TrainingJobName": "t", "RoleArn": "r", "OutputDataConfig": {"S3OutputPath": "s3://b"}})},
            ["ResourceConfig"],
        ),
        (
            "a payload member SageMaker does not have",
            {"serviceRequestPayload": training_payload(ModelAccessConfig={"AcceptEula": True})},
            ["serviceRequestPayload.ModelAccessConfig", "not a member"],
        ),
        (
            "a hyperparameter that is not a string",
            {"serviceRequestPayload": training_payload(HyperParameters={"epochs": 3})},
            ["serviceRequestPayload.HyperParameters.epochs", "string"],
        ),
        (
            "a payload over 10 KiB",
            {"serviceRequestPayload": training_payload(Environment={"PAD": "p" * (11 * 1024)})},
            ["serviceRequestPayload", "10 KiB", "10240"],
        ),
    ]


@pytest.mark.parametrize("case, fields, keywords", submit_cases(), ids=[c[0] for c in submit_cases()])
def test_submit_rejects(batch, shared_queue, case, fields, keywords):
    args = submit_args(shared_queue["jobQueueName"], unique("bad"))
    args.update(fields)
    expect_client_error(batch.submit_service_job, *keywords, **args)


def test_submit_to_an_unknown_queue_names_the_queue(batch):
    missing = unique("no-such-queue")
    expect_client_error(batch.submit_service_job, missing, **submit_args(missing, unique("job")))


def test_update_service_job_priority_range(batch, shared_queue):
    job = batch.submit_service_job(**submit_args(shared_queue["jobQueueName"], unique("job")))
    expect_client_error(batch.update_service_job, "schedulingPriority", jobId=job["jobId"], schedulingPriority=10000)
    expect_client_error(batch.update_service_job, "schedulingPriority", jobId=job["jobId"], schedulingPriority=-1)


def test_queue_priority_above_1000(batch, resources):
    env = resources.environment()
    expect_client_error(
        batch.create_job_queue,
        "priority",
        jobQueueName=unique("q"),
        priority=1001,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": env["serviceEnvironmentArn"]}],
    )


@pytest.mark.parametrize("seconds", [599, 86401])
def test_state_time_limit_out_of_range(batch, resources, seconds):
    env = resources.environment()
    expect_client_error(
        batch.create_job_queue,
        "maxTimeSeconds",
        jobQueueName=unique("q"),
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": env["serviceEnvironmentArn"]}],
        jobStateTimeLimitActions=[
            {"reason": "r", "state": "RUNNABLE", "maxTimeSeconds": seconds, "action": "TERMINATE"}
        ],
    )


@pytest.mark.parametrize(
    "case, policy, keyword",
    [
        ("decay over a week", {"shareDecaySeconds": 604801}, "shareDecaySeconds"),
        ("negative decay", {"shareDecaySeconds": -1}, "shareDecaySeconds"),
        ("reservation of 100", {"computeReservation": 100}, "computeReservation"),
        ("weight zero", {"shareDistribution": [{"shareIdentifier": "a", "weightFactor": 0.0}]}, "weightFactor"),
        ("weight 1000", {"shareDistribution": [{"shareIdentifier": "a", "weightFactor": 1000.0}]}, "weightFactor"),
    ],
)
def test_fair_share_policy_ranges(batch, case, policy, keyword):
    expect_client_error(batch.create_scheduling_policy, keyword, name=unique("fs"), fairsharePolicy=policy)


def six_limits(unit_of):
    return [{"maxCapacity": 1, "capacityUnit": unit_of(i)} for i in range(6)]


def test_six_capacity_limits_on_an_environment(batch):
    expect_client_error(
        batch.create_service_environment,
        "capacityLimits",
        serviceEnvironmentName=unique("se"),
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=six_limits(lambda i: f"ml.m5.{['large', 'xlarge', '2xlarge', '4xlarge', '12xlarge', '24xlarge'][i]}"),
    )


def test_six_capacity_limits_on_a_quota_share(batch, resources):
    queue = resources.quota_queue()
    expect_client_error(
        batch.create_quota_share,
        "capacityLimits",
        quotaShareName=unique("share"),
        jobQueue=queue["jobQueueArn"],
        capacityLimits=six_limits(lambda i: f"ml.m5.{['large', 'xlarge', '2xlarge', '4xlarge', '12xlarge', '24xlarge'][i]}"),
        resourceSharingConfiguration={"strategy": "RESERVE"},
        preemptionConfiguration={"inSharePreemption": "DISABLED"},
    )


def test_51_tags_on_an_environment(batch):
    expect_client_error(
        batch.create_service_environment,
        "tags",
        "50",
        serviceEnvironmentName=unique("se"),
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}],
        tags={f"k{i}": "v" for i in range(51)},
    )


def test_max_results_above_100(batch, shared_queue):
    expect_client_error(batch.list_service_jobs, "maxResults", jobQueue=shared_queue["jobQueueName"], maxResults=101)


def assert_client_exception(resp, *keywords):
    assert resp.status == 400, (resp.status, resp.body)
    assert resp.headers.get("x-amzn-errortype", "").startswith("ClientException"), resp.headers
    body = resp.json()
    message = body.get("message") or body.get("Message") or ""
    assert any(k.lower() in message.lower() for k in keywords), f"{message!r} names none of {keywords}"
    return message


def test_malformed_json_body(shared_queue):
    resp = raw_request("/v1/submitservicejob", b'{"jobName": "x", "jobQueue": ')
    assert_client_exception(resp, "json")


def test_wrong_json_type_names_the_field(shared_queue):
    body = submit_args(shared_queue["jobQueueName"], unique("job"))
    body["schedulingPriority"] = "high"
    resp = raw_request("/v1/submitservicejob", json.dumps(body).encode())
    assert_client_exception(resp, "schedulingPriority")


def test_missing_required_member_names_it():
    resp = raw_request("/v1/submitservicejob", json.dumps({"jobName": "x"}).encode())
    assert_client_exception(resp, "jobQueue", "serviceRequestPayload", "serviceJobType")


def test_unknown_operation():
    resp = raw_request("/v1/frobnicatejobs", b"{}")
    assert_client_exception(resp, "frobnicatejobs")


def test_request_over_30_kib(shared_queue):
    body = submit_args(shared_queue["jobQueueName"], unique("job"))
    body["padding"] = "p" * (31 * 1024)
    resp = raw_request("/v1/submitservicejob", json.dumps(body).encode())
    assert_client_exception(resp, "30 KiB", "30720", "too large", "larger")


def test_request_over_30_kib_through_boto3(batch, shared_queue):
    """50 maximal tags plus a 10 KiB payload: every field within its own limit, the whole
    request over 30 KiB."""
    tags = {f"{i:02d}" + "k" * 126: "v" * 256 for i in range(50)}
    payload = training_payload(Environment={"PAD": '"' * 4800})  # quotes double when JSON-escaped
    assert len(payload.encode()) <= 10 * 1024
    args = submit_args(shared_queue["jobQueueName"], unique("job"), tags=tags, serviceRequestPayload=payload)
    assert len(json.dumps(args).encode()) > 30 * 1024
    expect_client_error(batch.submit_service_job, "30 KiB", "30720", "too large", "larger", **args)
