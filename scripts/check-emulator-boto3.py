#!/usr/bin/env python3
"""Checks the Trainyard SageMaker emulator with boto3's unmodified `sagemaker` client.

Usage: check-emulator-boto3.py http://127.0.0.1:PORT

Creates three training jobs, then describes, lists (with a paginator), reads tags, stops one,
and checks the error codes botocore decodes. Job names carry a random suffix so the script can
run against an emulator that already has jobs. Every call has short timeouts and no retries, so
the script ends within seconds whatever the server does. Exit status 0 means every check passed;
otherwise the first failed check is printed to stderr.
"""

import sys
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def error_code(call, **kwargs):
    try:
        call(**kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["Error"]["Message"]
    return None, None


def request(name):
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        # Long enough that every job is still in progress while the script runs.
        "HyperParameters": {"emulator_duration_s": "600"},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out/"},
        "ResourceConfig": {
            "InstanceType": "ml.m5.xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 10,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Tags": [{"Key": "team", "Value": "vision"}],
    }


def main(url):
    client = boto3.client(
        "sagemaker",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="emulator",
        aws_secret_access_key="emulator",
        config=Config(
            connect_timeout=5,
            read_timeout=10,
            retries={"max_attempts": 1, "mode": "standard"},
        ),
    )
    prefix = "boto3-check-" + uuid.uuid4().hex[:8]
    names = [f"{prefix}-{i}" for i in range(3)]

    arns = [client.create_training_job(**request(n))["TrainingJobArn"] for n in names]
    check(
        arns[0] == f"arn:aws:sagemaker:us-east-1:000000000000:training-job/{names[0]}",
        "CreateTrainingJob returns the training-job ARN",
    )

    d = client.describe_training_job(TrainingJobName=names[0])
    check(d["TrainingJobStatus"] == "InProgress", "a new job is InProgress")
    check(d["TrainingJobName"] == names[0], "Describe names the job")
    check(hasattr(d["CreationTime"], "year"), "CreationTime parses as a timestamp")
    check(
        [t["Status"] for t in d["SecondaryStatusTransitions"]][0] == "Starting",
        "the first secondary status is Starting",
    )

    listed = client.list_training_jobs(NameContains=prefix, SortOrder="Descending")
    check(
        [s["TrainingJobName"] for s in listed["TrainingJobSummaries"]]
        == sorted(names, reverse=True),
        "ListTrainingJobs finds the three jobs, newest first",
    )
    check("NextToken" not in listed, "a complete list has no NextToken")

    pages = client.get_paginator("list_training_jobs").paginate(
        NameContains=prefix,
        SortBy="Name",
        SortOrder="Ascending",
        PaginationConfig={"PageSize": 1},
    )
    paged = []
    page_count = 0
    for page in pages:
        page_count += 1
        paged += [s["TrainingJobName"] for s in page["TrainingJobSummaries"]]
        if page_count > 3:
            break
    check(page_count == 3, "the paginator stops after three pages")
    check(paged == names, "the paginator walks every job once, in name order")

    tags = client.list_tags(ResourceArn=arns[0])["Tags"]
    check(tags == [{"Key": "team", "Value": "vision"}], "ListTags returns the create tags")

    client.stop_training_job(TrainingJobName=names[1])
    status = client.describe_training_job(TrainingJobName=names[1])["TrainingJobStatus"]
    check(status in ("Stopping", "Stopped"), "a stopped job is Stopping or Stopped")

    code, _ = error_code(client.create_training_job, **request(names[0]))
    check(code == "ResourceInUse", "a duplicate name is ResourceInUse")
    check(
        issubclass(client.exceptions.ResourceInUse, ClientError),
        "botocore maps ResourceInUse to its modeled exception",
    )
    try:
        client.create_training_job(**request(names[0]))
        check(False, "a duplicate create raises")
    except client.exceptions.ResourceInUse:
        check(True, "a duplicate create raises client.exceptions.ResourceInUse")

    code, _ = error_code(client.describe_training_job, TrainingJobName=prefix + "-missing")
    check(code == "ResourceNotFound", "describing an unknown job is ResourceNotFound")

    bad = request(prefix + "-bad")
    bad["HyperParameters"] = {"emulator_outcome": "Sometimes"}
    code, message = error_code(client.create_training_job, **bad)
    check(code == "ValidationException", "an invalid request is ValidationException")
    check("emulator_outcome" in (message or ""), "the message names the member")

    code, _ = error_code(client.list_training_jobs, StatusEquals="Paused")
    check(code == "ValidationException", "an unknown StatusEquals is ValidationException")

    print("all boto3 checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: check-emulator-boto3.py http://127.0.0.1:PORT")
    try:
        main(sys.argv[1])
    except AssertionError as e:
        sys.exit(f"FAILED: {e}")
