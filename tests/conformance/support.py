"""Helpers shared by the conformance tests: clients, payloads, raw HTTP, bounded waits and
resource bookkeeping. Nothing here asserts on server behaviour except `expect_client_error`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

REGION = "us-east-1"

# A Batch ARN of a given resource type; partition, region and account are not pinned because the
# server chooses them (local mode has no real account).
ARN_PREFIX = r"arn:aws[a-z-]*:batch:[a-z0-9-]+:\d{12}:"


def arn_pattern(resource: str, name: str) -> re.Pattern[str]:
    return re.compile("^" + ARN_PREFIX + re.escape(f"{resource}/{name}") + "$")


def endpoint() -> str:
    url = os.environ.get("TRAINYARD_ENDPOINT", "")
    if not url:
        pytest.fail("TRAINYARD_ENDPOINT is not set; run the suite through scripts/test", pytrace=False)
    return url.rstrip("/")


def make_client(url: str | None = None):
    """A boto3 Batch client for the server. No retries: a retry would hide a flaky server."""
    return boto3.client(
        "batch",
        endpoint_url=url or endpoint(),
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=5,
            read_timeout=30,
        ),
    )


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same data dir) uses."""
    return f"cf-{prefix}-{uuid.uuid4().hex[:12]}"


def training_payload(
    name: str = "train",
    instance_type: str = "ml.m5.large",
    count: int = 1,
    **extra: Any,
) -> str:
    """A SageMaker CreateTrainingJob request as the SDK sends it (PascalCase JSON string)."""
    body = {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:latest",
            "TrainingInputMode": "File",
        },
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/output"},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": count, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    body.update(extra)
    return json.dumps(body)


def submit_args(queue: str, job_name: str, **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "jobName": job_name,
        "jobQueue": queue,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": training_payload(),
    }
    args.update(extra)
    return args


def expect_client_error(call: Callable[..., Any], *keywords: str, **kwargs: Any) -> str:
    """Calls `call(**kwargs)`, requires a 400 ClientException, and requires the message to
    contain at least one of `keywords` (case-insensitive). Returns the message."""
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    err = info.value.response
    assert err["Error"]["Code"] == "ClientException", err
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400, err
    message = err["Error"]["Message"]
    assert message, "the error has no message"
    if keywords:
        lowered = message.lower()
        assert any(k.lower() in lowered for k in keywords), (
            f"message {message!r} names none of {keywords}"
        )
    return message


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else {}


def raw_request(path: str, body: bytes | None, method: str = "POST") -> RawResponse:
    """An unsigned HTTP request straight to the server (for what boto3 cannot send)."""
    req = urllib.request.Request(
        endpoint() + path,
        data=body,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return RawResponse(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as e:
        return RawResponse(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def wait_until(probe: Callable[[], Any], what: str, timeout_s: float = 10.0, interval_s: float = 0.1) -> Any:
    """Polls `probe` until it returns something truthy or the deadline passes (then fails)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}")
        time.sleep(interval_s)


def wait_for_status(batch, job_id: str, status: str, timeout_s: float = 10.0) -> dict:
    def probe():
        job = batch.describe_service_job(jobId=job_id)
        return job if job["status"] == status else None

    return wait_until(probe, f"job {job_id} to be {status}", timeout_s)


@dataclass
class Resources:
    """Creates resources with unique names and deletes them again at teardown, in reverse order
    (quota shares, queues, policies, then environments), so the suite stays under Batch's
    50-queue and 50-environment limits however many tests run."""

    batch: Any
    _cleanups: list[Callable[[], None]] = field(default_factory=list)

    # --- service environments -----------------------------------------------------------------
    def environment(self, capacity_limits: list[dict] | None = None, **extra: Any) -> dict:
        """A service environment. By default it has no capacity (`maxCapacity` 0), so jobs in
        its queues stay RUNNABLE: `trainyard up` dispatches whatever fits, and the API tests
        observe jobs waiting. Tests that want jobs to run pass capacity."""
        name = unique("se")
        resp = self.batch.create_service_environment(
            serviceEnvironmentName=name,
            serviceEnvironmentType="SAGEMAKER_TRAINING",
            capacityLimits=capacity_limits or [{"maxCapacity": 0, "capacityUnit": "NUM_INSTANCES"}],
            **extra,
        )
        self._cleanups.append(lambda: self._delete_environment(resp["serviceEnvironmentArn"]))
        return resp

    def _delete_environment(self, arn: str) -> None:
        self.batch.update_service_environment(serviceEnvironment=arn, state="DISABLED")
        retry_briefly(lambda: self.batch.delete_service_environment(serviceEnvironment=arn))

    # --- scheduling policies ------------------------------------------------------------------
    def fairshare_policy(self, **policy: Any) -> dict:
        resp = self.batch.create_scheduling_policy(name=unique("fs"), fairsharePolicy=policy)
        self._cleanups.append(lambda: self.batch.delete_scheduling_policy(arn=resp["arn"]))
        return resp

    def quota_policy(self) -> dict:
        resp = self.batch.create_scheduling_policy(
            name=unique("qp"), quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
        )
        self._cleanups.append(lambda: self.batch.delete_scheduling_policy(arn=resp["arn"]))
        return resp

    # --- job queues ---------------------------------------------------------------------------
    def queue(self, environment_arn: str | None = None, priority: int = 10, **extra: Any) -> dict:
        if environment_arn is None:
            environment_arn = self.environment()["serviceEnvironmentArn"]
        name = unique("q")
        resp = self.batch.create_job_queue(
            jobQueueName=name,
            priority=priority,
            jobQueueType="SAGEMAKER_TRAINING",
            serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": environment_arn}],
            **extra,
        )
        self._cleanups.append(lambda: self._delete_queue(resp["jobQueueArn"]))
        return resp

    def _delete_queue(self, arn: str) -> None:
        self.batch.update_job_queue(jobQueue=arn, state="DISABLED")
        self.batch.delete_job_queue(jobQueue=arn)

        def gone():
            queues = self.batch.describe_job_queues(jobQueues=[arn])["jobQueues"]
            return all(q.get("status") == "DELETED" for q in queues)

        deadline = time.monotonic() + 10
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.1)

    def fairshare_queue(self, **policy: Any) -> dict:
        policy_arn = self.fairshare_policy(**policy)["arn"]
        return self.queue(schedulingPolicyArn=policy_arn)

    def quota_queue(self, instance_type: str = "ml.m5.large") -> dict:
        """A quota-management queue: its own environment in instance-type units, a quota-share
        policy, and one quota share named in the result's `quotaShareName`."""
        env = self.environment([{"maxCapacity": 4, "capacityUnit": instance_type}])
        policy = self.quota_policy()
        queue = self.queue(env["serviceEnvironmentArn"], schedulingPolicyArn=policy["arn"])
        wait_for_queue_valid(self.batch, queue["jobQueueArn"])
        share = self.quota_share(queue["jobQueueArn"], instance_type)
        return {**queue, **share}

    def quota_share(self, queue: str, instance_type: str = "ml.m5.large", **extra: Any) -> dict:
        args = {
            "quotaShareName": unique("share"),
            "jobQueue": queue,
            "capacityLimits": [{"maxCapacity": 2, "capacityUnit": instance_type}],
            "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        }
        args.update(extra)
        resp = self.batch.create_quota_share(**args)
        self._cleanups.append(lambda: self._delete_quota_share(resp["quotaShareArn"]))
        return resp

    def _delete_quota_share(self, arn: str) -> None:
        self.batch.update_quota_share(quotaShareArn=arn, state="DISABLED")
        self.batch.delete_quota_share(quotaShareArn=arn)

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        self._cleanups.append(fn)

    def close(self) -> list[str]:
        """Runs every cleanup, newest first; returns the failures instead of raising so one
        failed delete does not leak everything created before it."""
        problems = []
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - reported by the fixture
                problems.append(repr(e))
        return problems


def retry_briefly(fn: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """Retries `fn` on ClientException for a few seconds: deleting an environment right after its
    queue may race the queue's own asynchronous deletion."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except ClientError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def wait_for_queue_valid(batch, queue: str, timeout_s: float = 10.0) -> dict:
    def probe():
        queues = batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
        return queues[0] if queues and queues[0].get("status") == "VALID" else None

    return wait_until(probe, f"job queue {queue} to be VALID", timeout_s)


TRAINYARD_BIN = os.environ.get("TRAINYARD_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "trainyard"
)


@contextlib.contextmanager
def trainyard_process(*args: str, address: str):
    """Runs `trainyard ARGS...` (a server on a free port), yields the URL its stdout prints in
    the group of regex `address`, and stops it with SIGTERM, which it must exit 0 on."""
    if not os.path.exists(TRAINYARD_BIN):
        pytest.fail(f"no trainyard binary at {TRAINYARD_BIN} (build it, or set TRAINYARD_BIN)")
    proc = subprocess.Popen(
        [TRAINYARD_BIN, *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        url, deadline = None, time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            found = re.search(address, line)
            url = found.group(1) if found else None
        assert url, f"trainyard {args[0]} printed no address"
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=15) == 0, f"trainyard {args[0]} did not stop cleanly on SIGTERM"
        finally:
            if proc.poll() is None:
                proc.kill()
