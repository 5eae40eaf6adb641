"""Request signing for a deployed stack: clients/trainyard_sigv4.py makes Batch clients sign for
API Gateway (`execute-api`) instead of `batch`, and the calls still work.

The suite's server checks no signature, so these tests read the Authorization header each client
sends (its SigV4 credential scope names the service) and check the call succeeds;
test_signature_checks.py runs one that does (`trainyard up --credentials`)."""

import os
import pathlib
import subprocess
import sys
import tempfile

import boto3
import pytest

import support

CLIENTS = pathlib.Path(__file__).resolve().parents[2] / "clients"
sys.path.insert(0, str(CLIENTS))
import trainyard_sigv4  # noqa: E402


def scope_service(authorization: str) -> str:
    # "AWS4-HMAC-SHA256 Credential=AKID/20261130/us-east-1/execute-api/aws4_request, ..."
    credential = authorization.split("Credential=", 1)[1].split(",", 1)[0]
    return credential.split("/")[3]


def capture_authorization(events) -> list[str]:
    seen: list[str] = []

    def record(request, **_):
        value = request.headers["Authorization"]
        seen.append(value.decode() if isinstance(value, bytes) else value)

    events.register("before-send.batch", record)
    return seen


def test_a_plain_batch_client_signs_for_batch(endpoint):
    client = support.make_client(endpoint)
    seen = capture_authorization(client.meta.events)
    client.describe_job_queues()
    assert [scope_service(a) for a in seen] == ["batch"]


def test_an_installed_client_signs_for_execute_api_and_its_calls_work(endpoint):
    client = trainyard_sigv4.install(support.make_client(endpoint))
    seen = capture_authorization(client.meta.events)
    queues = client.describe_job_queues()["jobQueues"]
    assert isinstance(queues, list)
    assert [scope_service(a) for a in seen] == ["execute-api"]


def test_every_batch_client_of_an_installed_session_signs_for_execute_api(endpoint):
    session = trainyard_sigv4.install(
        boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=support.REGION)
    )
    client = session.client("batch", endpoint_url=endpoint)
    seen = capture_authorization(client.meta.events)
    client.describe_job_queues()
    assert [scope_service(a) for a in seen] == ["execute-api"]


def test_install_refuses_what_it_cannot_hook():
    with pytest.raises(TypeError):
        trainyard_sigv4.install(object())


def test_the_aws_cli_plugin_signs_for_execute_api(endpoint):
    with tempfile.TemporaryDirectory() as home:
        config = pathlib.Path(home) / "config"
        config.write_text("[plugins]\ntrainyard_sigv4 = trainyard_sigv4\n")
        env = dict(os.environ, AWS_CONFIG_FILE=str(config), PYTHONPATH=str(CLIENTS))
        cmd = [sys.executable, "-m", "awscli", "batch", "describe-job-queues", "--endpoint-url", endpoint, "--debug"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "/execute-api/aws4_request" in proc.stderr
    assert "/batch/aws4_request" not in proc.stderr


SDK_PROBE = """
import sys
sys.path.insert(0, sys.argv[2])
import trainyard_sigv4
trainyard_sigv4.install_default()
from sagemaker.aws_batch.boto_client import get_batch_boto_client
client = get_batch_boto_client(region="us-east-1", endpoint=sys.argv[1])
seen = []
client.meta.events.register("before-send.batch", lambda request, **_: seen.append(request.headers["Authorization"]))
client.describe_job_queues()
print(seen[0].decode() if isinstance(seen[0], bytes) else seen[0])
"""


def test_the_sagemaker_sdks_batch_client_signs_for_execute_api_after_install_default(endpoint):
    python = os.environ.get("SAGEMAKER_SDK_PYTHON")
    if not python:
        pytest.fail("SAGEMAKER_SDK_PYTHON is not set; run the suite through scripts/test", pytrace=False)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    proc = subprocess.run(
        [python, "-c", SDK_PROBE, endpoint, str(CLIENTS)],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert scope_service(proc.stdout.strip()) == "execute-api"
