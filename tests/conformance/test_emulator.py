"""boto3's unmodified `sagemaker` client against `trainyard emulator`, started here on a free
loopback port (the same calls as scripts/check-emulator-boto3.py)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import support

@pytest.fixture(scope="module")
def sagemaker():
    with support.trainyard_process(
        "emulator", "--listen", "127.0.0.1:0", address=r"listening on (http://\S+)"
    ) as url:
        yield boto3.client(
            "sagemaker",
            endpoint_url=url,
            region_name=support.REGION,
            config=Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=10),
        )


def _request(name: str, **hyper: str) -> dict:
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        "HyperParameters": hyper,
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }


def test_a_training_job_runs_to_completed_and_is_listed(sagemaker):
    name = f"emu-{uuid.uuid4().hex[:12]}"
    arn = sagemaker.create_training_job(**_request(name, emulator_duration_s="0.2"))["TrainingJobArn"]
    assert arn.endswith(f":training-job/{name}")
    described = support.wait_until(
        lambda: (d := sagemaker.describe_training_job(TrainingJobName=name))["TrainingJobStatus"] == "Completed"
        and d,
        "the training job to complete",
        timeout_s=15.0,
    )
    assert described["SecondaryStatus"] == "Completed"
    names = [j["TrainingJobName"] for j in sagemaker.list_training_jobs(MaxResults=100)["TrainingJobSummaries"]]
    assert name in names


def test_stop_and_error_codes_decode_as_botocore_expects(sagemaker):
    name = f"emu-{uuid.uuid4().hex[:12]}"
    sagemaker.create_training_job(**_request(name, emulator_duration_s="300"))
    sagemaker.stop_training_job(TrainingJobName=name)
    status = sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobStatus"]
    assert status in ("Stopping", "Stopped")
    with pytest.raises(ClientError) as duplicate:
        sagemaker.create_training_job(**_request(name))
    assert duplicate.value.response["Error"]["Code"] == "ResourceInUse"
    with pytest.raises(ClientError) as missing:
        sagemaker.describe_training_job(TrainingJobName=f"missing-{uuid.uuid4().hex[:8]}")
    assert missing.value.response["Error"]["Code"] in ("ResourceNotFound", "ValidationException")


def test_the_sagemaker_sdk_attaches_an_estimator_to_an_emulated_training_job(sagemaker):
    """The SageMaker Python SDK's `Estimator.attach` rebuilds an estimator from the emulator's
    DescribeTrainingJob, as it does from SageMaker's (the SDK lives in its own virtualenv)."""
    sdk_python = os.environ.get("SAGEMAKER_SDK_PYTHON")
    if not sdk_python:
        pytest.fail("SAGEMAKER_SDK_PYTHON is not set: run the suite through scripts/test")
    name = support.unique("attach")
    sagemaker.create_training_job(
        TrainingJobName=name,
        RoleArn="arn:aws:iam::123456789012:role/SageMakerRole",
        AlgorithmSpecification={
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
            "TrainingInputMode": "File",
        },
        HyperParameters={"emulator_duration_s": "0.2", "epochs": "3"},
        OutputDataConfig={"S3OutputPath": "s3://bucket/out"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
    support.wait_until(
        lambda: sagemaker.describe_training_job(TrainingJobName=name)["TrainingJobStatus"]
        == "Completed",
        f"training job {name} to complete",
        10.0,
    )
    script = os.path.join(os.path.dirname(__file__), "..", "sagemaker-sdk", "check_attach.py")
    proc = subprocess.run(
        [sdk_python, script, sagemaker.meta.endpoint_url, name],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["hyperparameters"]["epochs"] == "3"


def test_instance_preferences_are_taken_and_described_as_botocore_expects(sagemaker):
    name = f"emu-{uuid.uuid4().hex[:12]}"
    request = _request(name, emulator_duration_s="300")
    request["ResourceConfig"] = {
        "InstanceCount": 1,
        "VolumeSizeInGB": 10,
        "InstancePreferences": [{"InstanceType": "ml.p5.48xlarge"}, {"InstanceType": "ml.m5.large"}],
    }
    sagemaker.create_training_job(**request)
    described = sagemaker.describe_training_job(TrainingJobName=name)
    resources = described["ResourceConfig"]
    assert resources["InstancePreferences"] == request["ResourceConfig"]["InstancePreferences"]
    assert (resources["SelectedInstanceType"], resources["SelectedInstanceCount"]) == ("ml.p5.48xlarge", 1)
    sagemaker.stop_training_job(TrainingJobName=name)
