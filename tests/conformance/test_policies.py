"""Scheduling policies: fair share and quota share, created, described, listed, updated and
deleted by ARN."""

from support import arn_pattern, expect_client_error, unique


def test_fair_share_policy_round_trips(batch, resources):
    policy = {
        "shareDecaySeconds": 3600,
        "computeReservation": 10,
        "shareDistribution": [
            {"shareIdentifier": "vision", "weightFactor": 0.5},
            {"shareIdentifier": "nlp*", "weightFactor": 2.0},
        ],
    }
    created = resources.fairshare_policy(**policy)
    assert arn_pattern("scheduling-policy", created["name"]).match(created["arn"])
    (described,) = batch.describe_scheduling_policies(arns=[created["arn"]])["schedulingPolicies"]
    assert described["name"] == created["name"]
    assert described["arn"] == created["arn"]
    got = described["fairsharePolicy"]
    assert got["shareDecaySeconds"] == 3600
    assert got["computeReservation"] == 10
    assert sorted((s["shareIdentifier"], s["weightFactor"]) for s in got["shareDistribution"]) == [
        ("nlp*", 2.0),
        ("vision", 0.5),
    ]
    assert "quotaSharePolicy" not in described


def test_quota_share_policy_round_trips(batch, resources):
    created = resources.quota_policy()
    (described,) = batch.describe_scheduling_policies(arns=[created["arn"]])["schedulingPolicies"]
    assert described["quotaSharePolicy"] == {"idleResourceAssignmentStrategy": "FIFO"}
    assert "fairsharePolicy" not in described


def test_list_includes_new_policies_as_arns(batch, resources):
    a = resources.fairshare_policy(shareDecaySeconds=0)
    b = resources.quota_policy()
    arns = set()
    for page in batch.get_paginator("list_scheduling_policies").paginate():
        for item in page["schedulingPolicies"]:
            assert set(item) == {"arn"}, "ListSchedulingPolicies returns only ARNs"
            arns.add(item["arn"])
    assert {a["arn"], b["arn"]} <= arns


def test_update_fair_share_policy(batch, resources):
    created = resources.fairshare_policy(shareDecaySeconds=600)
    batch.update_scheduling_policy(
        arn=created["arn"],
        fairsharePolicy={"shareDecaySeconds": 1200, "shareDistribution": [{"shareIdentifier": "a", "weightFactor": 1.5}]},
    )
    (described,) = batch.describe_scheduling_policies(arns=[created["arn"]])["schedulingPolicies"]
    assert described["fairsharePolicy"]["shareDecaySeconds"] == 1200
    assert described["fairsharePolicy"]["shareDistribution"] == [{"shareIdentifier": "a", "weightFactor": 1.5}]


def test_policy_type_cannot_change(batch, resources):
    created = resources.fairshare_policy(shareDecaySeconds=600)
    expect_client_error(
        batch.update_scheduling_policy,
        "quota-share",
        "quotaSharePolicy",
        "cannot",
        arn=created["arn"],
        quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"},
    )


def test_delete_removes_policy(batch):
    created = batch.create_scheduling_policy(name=unique("fs"), fairsharePolicy={"shareDecaySeconds": 0})
    batch.delete_scheduling_policy(arn=created["arn"])
    remaining = batch.describe_scheduling_policies(arns=[created["arn"]])["schedulingPolicies"]
    assert remaining == []


def test_duplicate_name_is_object_already_exists(batch, resources):
    created = resources.fairshare_policy(shareDecaySeconds=0)
    message = expect_client_error(
        batch.create_scheduling_policy, name=created["name"], fairsharePolicy={"shareDecaySeconds": 0}
    )
    assert message == "Object already exists"


def test_both_policy_kinds_at_once_are_refused(batch):
    expect_client_error(
        batch.create_scheduling_policy,
        "fairsharePolicy",
        "quotaSharePolicy",
        name=unique("both"),
        fairsharePolicy={"shareDecaySeconds": 0},
        quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"},
    )
