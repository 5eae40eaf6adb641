"""Service environments: create, describe, update and delete, by name and by ARN."""

import pytest

from support import arn_pattern, expect_client_error, retry_briefly, unique


def describe_one(batch, ref):
    envs = batch.describe_service_environments(serviceEnvironments=[ref])["serviceEnvironments"]
    return [e for e in envs if e.get("status") != "DELETED"]


def test_create_returns_name_and_arn_and_describe_echoes_everything(batch, resources):
    limits = [{"maxCapacity": 12, "capacityUnit": "NUM_INSTANCES"}]
    created = resources.environment(limits, tags={"team": "vision"})
    name = created["serviceEnvironmentName"]
    assert arn_pattern("service-environment", name).match(created["serviceEnvironmentArn"])

    (env,) = describe_one(batch, name)
    assert env["serviceEnvironmentName"] == name
    assert env["serviceEnvironmentArn"] == created["serviceEnvironmentArn"]
    assert env["serviceEnvironmentType"] == "SAGEMAKER_TRAINING"
    assert env["state"] == "ENABLED", "state defaults to ENABLED"
    assert env["status"] in ("CREATING", "VALID")
    assert env["capacityLimits"] == limits
    assert env["tags"] == {"team": "vision"}


def test_describe_by_arn_finds_the_same_environment(batch, resources):
    created = resources.environment()
    by_arn = describe_one(batch, created["serviceEnvironmentArn"])
    by_name = describe_one(batch, created["serviceEnvironmentName"])
    assert by_arn == by_name and len(by_arn) == 1


def test_describe_without_names_lists_every_environment_including_the_demo_one(batch, resources):
    created = resources.environment()
    names = set()
    for page in batch.get_paginator("describe_service_environments").paginate():
        names.update(e["serviceEnvironmentName"] for e in page["serviceEnvironments"])
    assert {"local", created["serviceEnvironmentName"]} <= names


def test_describe_unknown_names_returns_nothing(batch):
    assert describe_one(batch, unique("missing")) == []


@pytest.mark.parametrize("by", ["name", "arn"])
def test_update_changes_state_and_capacity(batch, resources, by):
    created = resources.environment()
    ref = created["serviceEnvironmentName"] if by == "name" else created["serviceEnvironmentArn"]
    new_limits = [{"maxCapacity": 3, "capacityUnit": "NUM_INSTANCES"}]
    resp = batch.update_service_environment(serviceEnvironment=ref, state="DISABLED", capacityLimits=new_limits)
    assert resp["serviceEnvironmentName"] == created["serviceEnvironmentName"]
    assert resp["serviceEnvironmentArn"] == created["serviceEnvironmentArn"]
    (env,) = describe_one(batch, ref)
    assert env["state"] == "DISABLED"
    assert env["capacityLimits"] == new_limits


@pytest.mark.parametrize("by", ["name", "arn"])
def test_delete_after_disabling_removes_it(batch, by):
    name = unique("se")
    created = batch.create_service_environment(
        serviceEnvironmentName=name,
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}],
    )
    ref = name if by == "name" else created["serviceEnvironmentArn"]
    batch.update_service_environment(serviceEnvironment=ref, state="DISABLED")
    retry_briefly(lambda: batch.delete_service_environment(serviceEnvironment=ref))
    assert describe_one(batch, name) == []


def test_deleting_an_enabled_environment_is_refused(batch, resources):
    created = resources.environment()
    expect_client_error(
        batch.delete_service_environment,
        "DISABLED",
        "disable",
        serviceEnvironment=created["serviceEnvironmentArn"],
    )


def test_duplicate_name_is_object_already_exists(batch, resources):
    created = resources.environment()
    message = expect_client_error(
        batch.create_service_environment,
        serviceEnvironmentName=created["serviceEnvironmentName"],
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}],
    )
    assert message == "Object already exists"


def test_updating_an_unknown_environment_names_it(batch):
    name = unique("missing")
    expect_client_error(batch.update_service_environment, name, serviceEnvironment=name, state="DISABLED")
