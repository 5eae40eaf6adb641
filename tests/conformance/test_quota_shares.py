"""Quota shares: create, describe, list, update and delete (by ARN, as the API requires)."""

from support import arn_pattern, expect_client_error, unique


def test_quota_share_round_trips(batch, resources):
    queue = resources.quota_queue()
    arn = queue["quotaShareArn"]
    name = queue["quotaShareName"]
    assert arn_pattern("job-queue", f"{queue['jobQueueName']}/quota-share/{name}").match(arn)
    share = batch.describe_quota_share(quotaShareArn=arn)
    assert share["quotaShareName"] == name
    assert share["quotaShareArn"] == arn
    assert share["jobQueueArn"] == queue["jobQueueArn"]
    assert share["capacityLimits"] == [{"maxCapacity": 2, "capacityUnit": "ml.m5.large"}]
    assert share["resourceSharingConfiguration"] == {"strategy": "LEND_AND_BORROW", "borrowLimit": 100}
    assert share["preemptionConfiguration"] == {"inSharePreemption": "DISABLED"}
    assert share["state"] == "ENABLED"


def test_list_by_queue_name_and_arn(batch, resources):
    queue = resources.quota_queue()
    second = resources.quota_share(queue["jobQueueArn"])
    for ref in (queue["jobQueueName"], queue["jobQueueArn"]):
        names = set()
        for page in batch.get_paginator("list_quota_shares").paginate(jobQueue=ref):
            names.update(s["quotaShareName"] for s in page["quotaShares"])
        assert names == {queue["quotaShareName"], second["quotaShareName"]}


def test_update_changes_limits_strategy_and_preemption(batch, resources):
    queue = resources.quota_queue()
    arn = queue["quotaShareArn"]
    resp = batch.update_quota_share(
        quotaShareArn=arn,
        capacityLimits=[{"maxCapacity": 3, "capacityUnit": "ml.m5.large"}],
        resourceSharingConfiguration={"strategy": "RESERVE"},
        preemptionConfiguration={"inSharePreemption": "ENABLED"},
    )
    assert resp["quotaShareArn"] == arn
    share = batch.describe_quota_share(quotaShareArn=arn)
    assert share["capacityLimits"] == [{"maxCapacity": 3, "capacityUnit": "ml.m5.large"}]
    assert share["resourceSharingConfiguration"]["strategy"] == "RESERVE"
    assert share["preemptionConfiguration"] == {"inSharePreemption": "ENABLED"}


def test_delete_requires_disabling_first(batch, resources):
    queue = resources.quota_queue()
    share = resources.quota_share(queue["jobQueueArn"])
    expect_client_error(batch.delete_quota_share, "DISABLED", "disable", quotaShareArn=share["quotaShareArn"])


def test_duplicate_name_already_exists(batch, resources):
    queue = resources.quota_queue()
    message = expect_client_error(
        batch.create_quota_share,
        quotaShareName=queue["quotaShareName"],
        jobQueue=queue["jobQueueArn"],
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": "ml.m5.large"}],
        resourceSharingConfiguration={"strategy": "RESERVE"},
        preemptionConfiguration={"inSharePreemption": "DISABLED"},
    )
    assert "already exists" in message


def test_describe_unknown_share_is_a_client_error(batch, resources):
    queue = resources.quota_queue()
    missing = queue["quotaShareArn"].rsplit("/", 1)[0] + "/" + unique("missing")
    expect_client_error(batch.describe_quota_share, missing.rsplit("/", 1)[1], quotaShareArn=missing)


def test_quota_share_on_a_fifo_queue_is_refused(batch, resources):
    queue = resources.queue()
    expect_client_error(
        batch.create_quota_share,
        "quota",
        quotaShareName=unique("share"),
        jobQueue=queue["jobQueueArn"],
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": "ml.m5.large"}],
        resourceSharingConfiguration={"strategy": "RESERVE"},
        preemptionConfiguration={"inSharePreemption": "DISABLED"},
    )
