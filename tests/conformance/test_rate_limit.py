"""Per-caller rate limits in local mode, through boto3 and the `trainyard` CLI: a caller over
its limit gets `ThrottlingException` (HTTP 429), which botocore and the CLI back off from and
retry, so a client that keeps its retries gets every answer; refusals are counted in /metrics.

The suite's shared server runs with the default limit; this module starts one with a limit of
4 requests per second (bursts of 8) to reach it quickly."""

import os
import subprocess
import tempfile
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import support


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as tmp:
        with support.trainyard_process(
            "up", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"),
            "--no-dispatch", "--rate-limit", "4", address=r"Listening on (http://\S+)",
        ) as url:
            yield url


def client(url, attempts):
    return boto3.client(
        "batch", endpoint_url=url, region_name=support.REGION,
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
        config=Config(retries={"max_attempts": attempts, "mode": "standard"}),
    )


def test_a_caller_over_its_limit_is_throttled_and_clients_that_retry_get_through(server):
    impatient = client(server, 1)
    outcomes = []
    # boto3 sends faster than 4 a second: the burst runs out within a few dozen calls.
    while "ThrottlingException" not in outcomes[-3:] and len(outcomes) < 200:
        try:
            impatient.describe_job_queues()
            outcomes.append("ok")
        except ClientError as refused:
            error = refused.response
            assert error["ResponseMetadata"]["HTTPStatusCode"] == 429
            outcomes.append(error["Error"]["Code"])
    assert outcomes.count("ok") >= 8, outcomes
    assert outcomes[-1] == "ThrottlingException", outcomes
    assert set(outcomes) == {"ok", "ThrottlingException"}, outcomes

    # With retries (botocore's standard mode backs off from throttling), every call answers.
    patient = client(server, 10)
    for _ in range(12):
        assert "jobQueues" in patient.describe_job_queues()

    # The CLI retries too.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(TRAINYARD_ENDPOINT=server, NO_COLOR="1")
    for _ in range(12):
        run = subprocess.run([support.TRAINYARD_BIN, "whoami"], capture_output=True, text=True,
                             timeout=60, env=env, stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run.stderr

    with urllib.request.urlopen(server + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    throttled = [line for line in metrics.splitlines()
                 if line.startswith("trainyard_throttled_total ")]
    assert throttled and int(throttled[0].split()[1]) >= outcomes.count("ThrottlingException")
