"""Attaches the SageMaker Python SDK's Estimator to a training job on an emulated SageMaker.

Usage: python check_attach.py ENDPOINT_URL TRAINING_JOB_NAME

Run with the SDK's own virtualenv (tests/sagemaker-sdk/requirements.txt); the conformance test
test_emulator.py calls it. Prints what the SDK rebuilt as JSON and exits non-zero on a mismatch.
"""

import json
import sys

import boto3
import sagemaker
from sagemaker.estimator import Estimator


def main() -> int:
    endpoint, name = sys.argv[1], sys.argv[2]
    boto_session = boto3.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    client = boto_session.client("sagemaker", endpoint_url=endpoint)
    session = sagemaker.Session(boto_session=boto_session, sagemaker_client=client)
    estimator = Estimator.attach(name, sagemaker_session=session)
    seen = {
        "name": estimator.latest_training_job.name,
        "instance_type": estimator.instance_type,
        "instance_count": estimator.instance_count,
        "hyperparameters": estimator.hyperparameters(),
        "model_data": estimator.model_data,
    }
    print(json.dumps(seen))
    expected = {"name": name, "instance_type": "ml.m5.large", "instance_count": 1}
    wrong = {k: (seen[k], v) for k, v in expected.items() if seen[k] != v}
    if wrong or not str(seen["model_data"]).endswith("/output/model.tar.gz"):
        print(f"mismatch: {wrong} model_data={seen['model_data']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
