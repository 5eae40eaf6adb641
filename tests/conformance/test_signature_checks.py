"""`trainyard up --credentials FILE` checks SigV4 signatures: the signatures botocore makes (as
`batch` for a plain client and the AWS CLI, as `execute-api` through clients/trainyard_sigv4.py)
verify with a key from the file, and a wrong secret or an unknown key is refused with the error
codes botocore decodes.

The suite's shared server runs without --credentials, so this module starts its own."""

import os
import pathlib
import subprocess
import sys
import tempfile

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import support

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "clients"))
import trainyard_sigv4  # noqa: E402

KEYS = "[alice]\naws_access_key_id = AKIDALICE\naws_secret_access_key = alice-secret\n"


@pytest.fixture(scope="module")
def checked_endpoint():
    with tempfile.TemporaryDirectory() as tmp:
        keys = os.path.join(tmp, "keys")
        with open(keys, "w") as f:
            f.write(KEYS)
        with support.trainyard_process(
            "up", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"),
            "--no-dispatch", "--credentials", keys, address=r"Listening on (http://\S+)",
        ) as url:
            yield url


def client(url, key_id="AKIDALICE", secret="alice-secret"):
    return boto3.client(
        "batch", endpoint_url=url, region_name=support.REGION,
        aws_access_key_id=key_id, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def test_botocore_signatures_for_batch_and_for_execute_api_verify(checked_endpoint):
    queues = client(checked_endpoint).describe_job_queues()["jobQueues"]
    assert {q["jobQueueName"] for q in queues} >= {"production", "research", "sweeps"}
    installed = trainyard_sigv4.install(client(checked_endpoint))
    job = installed.submit_service_job(
        jobName="signed", jobQueue="research", serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=support.training_payload(),
    )
    assert installed.describe_service_job(jobId=job["jobId"])["jobName"] == "signed"


@pytest.mark.parametrize(
    "key_id, secret, code",
    [("AKIDALICE", "wrong", "InvalidSignatureException"),
     ("AKIDMALLORY", "alice-secret", "UnrecognizedClientException")],
)
def test_a_wrong_secret_or_an_unknown_key_is_refused_with_403(checked_endpoint, key_id, secret, code):
    with pytest.raises(ClientError) as refused:
        client(checked_endpoint, key_id, secret).describe_job_queues()
    assert refused.value.response["Error"]["Code"] == code
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_the_aws_cli_signs_requests_that_verify(checked_endpoint):
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDALICE", AWS_SECRET_ACCESS_KEY="alice-secret",
               AWS_DEFAULT_REGION=support.REGION)
    run = lambda env: subprocess.run(
        [sys.executable, "-m", "awscli", "batch", "describe-job-queues",
         "--endpoint-url", checked_endpoint, "--output", "json"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    signed = run(env)
    assert signed.returncode == 0, signed.stderr
    refused = run(dict(env, AWS_SECRET_ACCESS_KEY="wrong"))
    assert refused.returncode != 0 and "InvalidSignatureException" in refused.stderr, refused.stderr
