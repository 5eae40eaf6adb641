"""Job queues: FIFO, fair share and quota share; create, describe, update and delete by name and
by ARN."""

import pytest

from support import arn_pattern, expect_client_error, unique, wait_for_queue_valid, wait_until


def describe_one(batch, ref):
    queues = batch.describe_job_queues(jobQueues=[ref])["jobQueues"]
    return [q for q in queues if q.get("status") != "DELETED"]


def test_fifo_queue_round_trips(batch, resources):
    env = resources.environment()
    created = resources.queue(env["serviceEnvironmentArn"], priority=250, tags={"tier": "gold"})
    name = created["jobQueueName"]
    assert arn_pattern("job-queue", name).match(created["jobQueueArn"])
    queue = wait_for_queue_valid(batch, name)
    assert queue["jobQueueArn"] == created["jobQueueArn"]
    assert queue["priority"] == 250
    assert queue["state"] == "ENABLED"
    assert queue["jobQueueType"] == "SAGEMAKER_TRAINING"
    assert queue["serviceEnvironmentOrder"] == [{"order": 1, "serviceEnvironment": env["serviceEnvironmentArn"]}]
    assert "schedulingPolicyArn" not in queue
    assert queue["tags"] == {"tier": "gold"}


def test_environment_may_be_given_by_name_and_is_returned_as_arn(batch, resources):
    env = resources.environment()
    created = resources.queue(env["serviceEnvironmentName"])
    (queue,) = describe_one(batch, created["jobQueueName"])
    assert queue["serviceEnvironmentOrder"][0]["serviceEnvironment"] == env["serviceEnvironmentArn"]


def test_fair_share_queue_carries_its_policy(batch, resources):
    created = resources.fairshare_queue(shareDecaySeconds=0)
    (queue,) = describe_one(batch, created["jobQueueArn"])
    assert arn_pattern("scheduling-policy", queue["schedulingPolicyArn"].rsplit("/", 1)[1]).match(
        queue["schedulingPolicyArn"]
    )


def test_quota_share_queue_carries_its_policy(batch, resources):
    created = resources.quota_queue()
    (queue,) = describe_one(batch, created["jobQueueArn"])
    (described,) = batch.describe_scheduling_policies(arns=[queue["schedulingPolicyArn"]])["schedulingPolicies"]
    assert "quotaSharePolicy" in described


def test_sdk_shape_with_empty_compute_environment_order_is_accepted(batch, resources):
    """The SageMaker SDK examples send computeEnvironmentOrder=[] next to serviceEnvironmentOrder."""
    env = resources.environment()
    name = unique("q")
    created = batch.create_job_queue(
        jobQueueName=name,
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        computeEnvironmentOrder=[],
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": env["serviceEnvironmentName"]}],
    )
    resources.add_cleanup(lambda: resources._delete_queue(created["jobQueueArn"]))
    assert created["jobQueueName"] == name
    wait_for_queue_valid(batch, name)


@pytest.mark.parametrize("by", ["name", "arn"])
def test_update_priority_state_and_time_limit_actions(batch, resources, by):
    created = resources.queue(priority=5)
    ref = created["jobQueueName"] if by == "name" else created["jobQueueArn"]
    action = {"reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "state": "RUNNABLE", "maxTimeSeconds": 600, "action": "TERMINATE"}
    resp = batch.update_job_queue(jobQueue=ref, priority=777, state="DISABLED", jobStateTimeLimitActions=[action])
    assert resp["jobQueueName"] == created["jobQueueName"]
    assert resp["jobQueueArn"] == created["jobQueueArn"]
    (queue,) = describe_one(batch, ref)
    assert queue["priority"] == 777
    assert queue["state"] == "DISABLED"
    assert queue["jobStateTimeLimitActions"] == [action]


@pytest.mark.parametrize("by", ["name", "arn"])
def test_delete_after_disabling_removes_it(batch, resources, by):
    env = resources.environment()
    name = unique("q")
    created = batch.create_job_queue(
        jobQueueName=name,
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": env["serviceEnvironmentArn"]}],
    )
    ref = name if by == "name" else created["jobQueueArn"]
    batch.update_job_queue(jobQueue=ref, state="DISABLED")
    batch.delete_job_queue(jobQueue=ref)

    def gone():
        return describe_one(batch, name) == []

    wait_until(gone, f"queue {name} to be deleted")


def test_describe_without_names_pages_through_all_queues(batch, resources):
    created = resources.queue()
    names = set()
    for page in batch.get_paginator("describe_job_queues").paginate(PaginationConfig={"PageSize": 2}):
        assert len(page["jobQueues"]) <= 2
        names.update(q["jobQueueName"] for q in page["jobQueues"])
    assert {"production", "research", "sweeps", created["jobQueueName"]} <= names


def test_duplicate_name_is_object_already_exists(batch, resources):
    created = resources.queue()
    (queue,) = describe_one(batch, created["jobQueueName"])
    message = expect_client_error(
        batch.create_job_queue,
        jobQueueName=created["jobQueueName"],
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=queue["serviceEnvironmentOrder"],
    )
    assert message == "Object already exists"


def test_unknown_environment_is_named_in_the_error(batch):
    missing = unique("missing-se")
    expect_client_error(
        batch.create_job_queue,
        missing,
        jobQueueName=unique("q"),
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": missing}],
    )


def test_more_than_one_environment_per_queue_is_refused(batch, resources):
    a = resources.environment()
    b = resources.environment()
    expect_client_error(
        batch.create_job_queue,
        "serviceEnvironmentOrder",
        "service environment",
        jobQueueName=unique("q"),
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=[
            {"order": 1, "serviceEnvironment": a["serviceEnvironmentArn"]},
            {"order": 2, "serviceEnvironment": b["serviceEnvironmentArn"]},
        ],
    )


def test_aging_tags_are_checked_when_a_queue_is_created_or_tagged(batch, resources):
    env = resources.environment()["serviceEnvironmentArn"]
    expect_client_error(
        resources.queue, "trainyard:aging-per-hour", environment_arn=env, tags={"trainyard:aging-per-hour": "fast"}
    )
    expect_client_error(
        resources.queue, "needs", environment_arn=env, tags={"trainyard:aging-max-priority": "899"}
    )
    queue = resources.queue(
        env, tags={"trainyard:aging-per-hour": "2", "trainyard:aging-max-priority": "899"}
    )
    arn = queue["jobQueueArn"]
    expect_client_error(
        batch.tag_resource, "1000", resourceArn=arn, tags={"trainyard:aging-max-priority": "2000"}
    )
    batch.tag_resource(resourceArn=arn, tags={"trainyard:aging-per-hour": "10"})
    tags = batch.list_tags_for_resource(resourceArn=arn)["tags"]
    assert tags["trainyard:aging-per-hour"] == "10"
    assert tags["trainyard:aging-max-priority"] == "899"
