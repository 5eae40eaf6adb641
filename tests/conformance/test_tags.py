"""TagResource, UntagResource and ListTagsForResource on every taggable kind."""

import pytest

from support import expect_client_error, submit_args, unique


@pytest.fixture(params=["environment", "queue", "policy", "job"])
def arn(request, batch, resources):
    kind = request.param
    if kind == "environment":
        return resources.environment()["serviceEnvironmentArn"]
    if kind == "queue":
        return resources.queue()["jobQueueArn"]
    if kind == "policy":
        return resources.fairshare_policy(shareDecaySeconds=0)["arn"]
    queue = resources.queue()["jobQueueName"]
    return batch.submit_service_job(**submit_args(queue, unique("job")))["jobArn"]


def tags_of(batch, arn):
    return batch.list_tags_for_resource(resourceArn=arn)["tags"]


def test_tag_list_untag(batch, arn):
    batch.tag_resource(resourceArn=arn, tags={"team": "vision", "cost": "42"})
    assert tags_of(batch, arn) == {"team": "vision", "cost": "42"}
    batch.tag_resource(resourceArn=arn, tags={"team": "nlp"})
    assert tags_of(batch, arn) == {"team": "nlp", "cost": "42"}, "tagging merges and overwrites"
    batch.untag_resource(resourceArn=arn, tagKeys=["team", "absent"])
    assert tags_of(batch, arn) == {"cost": "42"}


def test_more_than_fifty_tags_in_total_are_refused(batch, arn):
    batch.tag_resource(resourceArn=arn, tags={f"k{i}": "v" for i in range(50)})
    expect_client_error(batch.tag_resource, "50", "tags", resourceArn=arn, tags={"one-more": "v"})


def test_unknown_resource_is_a_client_error(batch, endpoint):
    missing = "arn:aws:batch:us-east-1:123456789012:job-queue/" + unique("missing")
    expect_client_error(batch.list_tags_for_resource, "missing", resourceArn=missing)
