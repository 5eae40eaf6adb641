"""Fixtures for the conformance suite. The suite talks to a running `trainyard up` at
TRAINYARD_ENDPOINT (scripts/test starts one) with boto3 and the AWS CLI, exactly as users do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

import support

# Isolate every client from the developer's own AWS set-up: dummy credentials, a fixed region,
# no shared config or credentials files, no instance-metadata look-ups (which would try the
# network), and no endpoint overrides other than the ones the tests set.
_EMPTY = os.path.join(tempfile.gettempdir(), "trainyard-conformance-no-such-aws-file")
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": support.REGION,
        "AWS_REGION": support.REGION,
        "AWS_CONFIG_FILE": _EMPTY,
        "AWS_SHARED_CREDENTIALS_FILE": _EMPTY,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_PAGER": "",
    }
)
for _var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BATCH"):
    os.environ.pop(_var, None)


@pytest.fixture(scope="session")
def endpoint() -> str:
    return support.endpoint()


@pytest.fixture(scope="session")
def batch(endpoint):
    return support.make_client(endpoint)


@pytest.fixture
def resources(batch):
    """Per-test resources, deleted at teardown (see support.Resources)."""
    res = support.Resources(batch)
    yield res
    problems = res.close()
    assert not problems, f"cleanup failed: {problems}"


@pytest.fixture(scope="module")
def module_resources(batch):
    """Resources shared by one test module, deleted when the module ends."""
    res = support.Resources(batch)
    yield res
    problems = res.close()
    assert not problems, f"cleanup failed: {problems}"


@pytest.fixture(scope="module")
def shared_queue(module_resources):
    """A FIFO queue shared by a module's tests; tests isolate themselves by unique job names."""
    return module_resources.queue()


@pytest.fixture
def aws(endpoint):
    """Runs `aws batch ARGS... --endpoint-url E --output json`; returns (exit code, parsed JSON
    or None, stderr)."""

    def run(*args: str, timeout_s: float = 60.0):
        cmd = [sys.executable, "-m", "awscli", "batch", *args, "--endpoint-url", endpoint, "--output", "json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        out = proc.stdout.strip()
        parsed = json.loads(out) if out else None
        return proc.returncode, parsed, proc.stderr

    return run
