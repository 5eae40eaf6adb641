"""Access policies in local mode, through the real clients with distinct credentials: the
`trainyard` CLI stores a Cedar policy set as the platform team, then boto3 and the AWS CLI, each
signing as a different principal (`up --credentials` maps every access key to one), are allowed
or refused as the policies say, refusals arrive as `AccessDeniedException` (HTTP 403), change
nothing, are counted in /metrics, and every change asked for is in the audit trail that
`trainyard audit` lists for those the policies let read it.

The suite's shared server checks no signatures, so this module starts its own."""

import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import support

ACCOUNT = "000000000000"
PLATFORM = f"arn:aws:sts::{ACCOUNT}:assumed-role/platform-admin/dana"
ALICE = f"arn:aws:sts::{ACCOUNT}:assumed-role/vision-researcher/alice"

KEYS = f"""[platform]
aws_access_key_id = AKIDPLATFORM
aws_secret_access_key = platform-secret
principal_arn = {PLATFORM}

[alice]
aws_access_key_id = AKIDALICE
aws_secret_access_key = alice-secret
principal_arn = {ALICE}

# Grouped by a tag, as IAM tags group roles on AWS.
[erin]
aws_access_key_id = AKIDERIN
aws_secret_access_key = erin-secret
principal_arn = arn:aws:sts::{ACCOUNT}:assumed-role/ml-engineer/erin
principal_tags = team=nlp, cost-center=42

# No principal_arn: the IAM user named after the profile.
[bob]
aws_access_key_id = AKIDBOB
aws_secret_access_key = bob-secret
"""
BOB = f"arn:aws:iam::{ACCOUNT}:user/bob"

# Reading is open; the platform team administers; team vision submits to research at priority
# up to 50; owners terminate their own jobs.
POLICIES = """
@id("everyone-reads")
permit(principal, action in Trainyard::Action::"Read", resource);

@id("platform-administers")
permit(principal, action in [Trainyard::Action::"Administer", Trainyard::Action::"ListAuditRecords"], resource)
when { principal.name like "platform-*" };

@id("vision-submits")
permit(principal, action == Trainyard::Action::"SubmitServiceJob", resource == Trainyard::Queue::"research")
when { principal.name like "vision-*" && context.schedulingPriority <= 50 };

@id("owners-terminate")
permit(principal, action == Trainyard::Action::"TerminateServiceJob", resource)
when { resource.owner == principal.arn };

@id("bob-lists-by-queue")
forbid(principal, action == Trainyard::Action::"ListServiceJobs", resource == Trainyard::Service::"trainyard")
when { principal.name == "bob" };
"""


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as tmp:
        keys = os.path.join(tmp, "keys")
        with open(keys, "w") as f:
            f.write(KEYS)
        policies = os.path.join(tmp, "policies.cedar")
        with open(policies, "w") as f:
            f.write(POLICIES)
        with support.trainyard_process(
            "up", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"),
            "--no-dispatch", "--credentials", keys, address=r"Listening on (http://\S+)",
        ) as url:
            yield {"url": url, "keys": keys, "policies": policies}


def cli(server, profile, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=server["keys"], AWS_PROFILE=profile,
               TRAINYARD_ENDPOINT=server["url"], NO_COLOR="1")
    return subprocess.run([support.TRAINYARD_BIN, *args], capture_output=True, text=True,
                          timeout=60, env=env, stdin=subprocess.DEVNULL)


def batch(server, key_id, secret):
    return boto3.client(
        "batch", endpoint_url=server["url"], region_name=support.REGION,
        aws_access_key_id=key_id, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def submit(client, name, queue="research", priority=10):
    return client.submit_service_job(
        jobName=name, jobQueue=queue, serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=support.training_payload(), schedulingPriority=priority,
    )


def assert_denied(call, action):
    with pytest.raises(ClientError) as refused:
        call()
    error = refused.value.response
    assert error["Error"]["Code"] == "AccessDeniedException"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert f"batch:{action}" in error["Error"]["Message"]


def test_policies_set_with_the_cli_decide_what_each_signed_client_may_do(server):
    alice = batch(server, "AKIDALICE", "alice-secret")
    bob = batch(server, "AKIDBOB", "bob-secret")

    # Before any policy, everyone may do everything; then the platform team sets them.
    who = cli(server, "alice", "whoami")
    assert (who.returncode, who.stdout.strip()) == (0, ALICE), who.stderr
    bobs_early = submit(bob, "before-the-policies")
    stored = cli(server, "platform", "access", "set", server["policies"])
    assert stored.returncode == 0, stored.stderr
    assert "stored 5 access policies" in stored.stdout
    shown = cli(server, "bob", "access", "show")
    assert shown.returncode == 0 and PLATFORM in shown.stdout and "vision-submits" in shown.stdout

    # boto3 as alice: research at priority <= 50 only.
    job = submit(alice, "mine", priority=50)
    assert_denied(lambda: submit(alice, "too-high", priority=51), "SubmitServiceJob")
    assert_denied(lambda: submit(alice, "elsewhere", queue="production"), "SubmitServiceJob")
    assert_denied(lambda: submit(bob, "bobs"), "SubmitServiceJob")
    described = cli(server, "bob", "describe", job["jobId"])
    assert described.returncode == 0 and "Owner:" in described.stdout and ALICE in described.stdout

    # Bob may not terminate alice's job; alice may.
    assert_denied(lambda: bob.terminate_service_job(jobId=job["jobId"], reason="no"),
                  "TerminateServiceJob")
    assert alice.describe_service_job(jobId=job["jobId"])["isTerminated"] is False
    alice.terminate_service_job(jobId=job["jobId"], reason="done")

    # `jobs --mine` lists what each caller submitted, by the owner the server recorded.
    for profile, expected in [("alice", [job["jobId"]]), ("bob", [bobs_early["jobId"]])]:
        mine = cli(server, profile, "jobs", "--mine", "--all", "--output", "json")
        assert mine.returncode == 0, mine.stderr
        assert [j["jobId"] for j in json.loads(mine.stdout)] == expected, profile

    # The AWS CLI as bob: not an administrator.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="AKIDBOB", AWS_SECRET_ACCESS_KEY="bob-secret",
               AWS_DEFAULT_REGION=support.REGION)
    run = subprocess.run(
        [sys.executable, "-m", "awscli", "batch", "update-job-queue", "--job-queue", "sweeps",
         "--priority", "999", "--endpoint-url", server["url"], "--output", "json"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    assert run.returncode != 0
    assert "AccessDeniedException" in run.stderr and BOB in run.stderr, run.stderr
    queues = {q["jobQueueName"]: q for q in alice.describe_job_queues()["jobQueues"]}
    assert queues["sweeps"]["priority"] != 999

    # Only the platform team changes the policies, and a bad set is refused by line.
    denied = cli(server, "alice", "access", "clear")
    assert denied.returncode != 0 and "AccessDeniedException" in denied.stderr, denied.stderr
    bad = os.path.join(os.path.dirname(server["policies"]), "bad.cedar")
    with open(bad, "w") as f:
        f.write(POLICIES + "\npermit(principal, action, resource) when { context.nope };\n")
    refused = cli(server, "platform", "access", "set", bad)
    bad_line = POLICIES.count("\n") + 2
    assert refused.returncode != 0 and f"line {bad_line}" in refused.stderr, refused.stderr

    # The event stream names every job: only those who may list every queue's jobs follow it.
    followed = cli(server, "alice", "events", "--limit", "0")
    assert followed.returncode == 0, followed.stderr
    refused = cli(server, "bob", "events", "--limit", "0")
    assert refused.returncode != 0 and "AccessDeniedException" in refused.stderr, refused.stderr

    # Refusals are counted by action.
    with urllib.request.urlopen(server["url"] + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'trainyard_access_denied_total{action="SubmitServiceJob"} 3' in metrics, metrics
    assert 'trainyard_access_denied_total{action="TerminateServiceJob"} 1' in metrics
    assert 'trainyard_access_denied_total{action="UpdateJobQueue"} 1' in metrics


def test_the_audit_trail_lists_every_change_asked_for_to_those_allowed_to_read_it(server):
    """Runs after the test above (pytest keeps a module's order): its calls are the trail."""
    refused = cli(server, "alice", "audit")
    assert refused.returncode != 0 and "AccessDeniedException" in refused.stderr, refused.stderr

    listed = cli(server, "platform", "audit", "--denied", "--since", "1h", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    denied = [(r["principal"], r["action"]) for r in json.loads(listed.stdout)]
    # Newest first: alice's clear, the AWS CLI's update as bob, bob's terminate and submit,
    # alice's two refused submits. Refused reads (alice's own `audit` just now) are not changes.
    assert denied == [
        (ALICE, "DeleteAccessPolicies"),
        (BOB, "UpdateJobQueue"),
        (BOB, "TerminateServiceJob"),
        (BOB, "SubmitServiceJob"),
        (ALICE, "SubmitServiceJob"),
        (ALICE, "SubmitServiceJob"),
    ], listed.stdout
    for record in json.loads(listed.stdout):
        assert record["allowed"] is False and record["outcome"] == "AccessDeniedException"
        assert record["decidedBy"] == "no policy permits it"

    alices = cli(server, "platform", "audit", "--principal", ALICE, "--action", "SubmitServiceJob",
                 "--output", "json")
    assert alices.returncode == 0, alices.stderr
    records = json.loads(alices.stdout)
    assert [r["allowed"] for r in records] == [False, False, True], alices.stdout
    assert records[2]["decidedBy"] == "permitted by vision-submits"
    assert ":service-job/" in records[2]["detail"], records[2]
    assert records[2]["resource"].endswith(":job-queue/research")

    # The table for people: one line per record, refusals marked.
    table = cli(server, "platform", "audit", "--limit", "3")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["TIME", "PRINCIPAL", "ACTION"], table.stdout
    assert len(lines) == 4, table.stdout
    assert "DENIED" in table.stdout and "DeleteAccessPolicies" in table.stdout


def test_a_profiles_principal_tags_reach_the_policies(server):
    """Runs last: it replaces the policy set."""
    rules = POLICIES + """
@id("nlp-submits")
permit(principal, action == Trainyard::Action::"SubmitServiceJob", resource == Trainyard::Queue::"sweeps")
when { principal.hasTag("team") && principal.getTag("team") == "nlp" };
"""
    path = os.path.join(os.path.dirname(server["policies"]), "tagged.cedar")
    with open(path, "w") as f:
        f.write(rules)
    stored = cli(server, "platform", "access", "set", path)
    assert stored.returncode == 0, stored.stderr
    erin = batch(server, "AKIDERIN", "erin-secret")
    tagged = submit(erin, "tagged", queue="sweeps")
    assert erin.describe_service_job(jobId=tagged["jobId"])["jobName"] == "tagged"
    assert_denied(lambda: submit(erin, "elsewhere", queue="production"), "SubmitServiceJob")
    bob = batch(server, "AKIDBOB", "bob-secret")
    assert_denied(lambda: submit(bob, "untagged", queue="sweeps"), "SubmitServiceJob")
