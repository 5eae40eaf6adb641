"""ListServiceJobs: the default status, every filter, newest-first order, and pagination across
more than 100 jobs with the boto3 paginator and with nextToken by hand."""

import time

import pytest

import support
from support import submit_args, unique, wait_for_status


def job_ids(pages):
    return [j["jobId"] for page in pages for j in page["jobSummaryList"]]


def submit(batch, queue, name, **extra):
    return batch.submit_service_job(**submit_args(queue, name, **extra))


def test_default_status_is_running(batch, resources):
    queue = resources.queue()["jobQueueName"]
    job = submit(batch, queue, unique("job"))
    wait_for_status(batch, job["jobId"], "RUNNABLE")
    default = batch.list_service_jobs(jobQueue=queue)
    assert default["jobSummaryList"] == [], "nothing runs yet, and the default status is RUNNING"
    runnable = batch.list_service_jobs(jobQueue=queue, jobStatus="RUNNABLE")
    (summary,) = runnable["jobSummaryList"]
    assert summary["jobId"] == job["jobId"]
    assert summary["jobArn"] == job["jobArn"]
    assert summary["jobName"] == job["jobName"]
    assert summary["status"] == "RUNNABLE"
    assert summary["serviceJobType"] == "SAGEMAKER_TRAINING"
    assert isinstance(summary["createdAt"], int)


def test_status_filter_separates_failed_from_runnable(batch, resources):
    queue = resources.queue()["jobQueueName"]
    keep = submit(batch, queue, unique("keep"))
    stop = submit(batch, queue, unique("stop"))
    wait_for_status(batch, keep["jobId"], "RUNNABLE")
    batch.terminate_service_job(jobId=stop["jobId"], reason="r")
    assert job_ids([batch.list_service_jobs(jobQueue=queue, jobStatus="FAILED")]) == [stop["jobId"]]
    assert job_ids([batch.list_service_jobs(jobQueue=queue, jobStatus="RUNNABLE")]) == [keep["jobId"]]


def test_job_name_filter_is_case_insensitive_exact_or_prefix_and_newest_first(batch, shared_queue):
    queue = shared_queue["jobQueueName"]
    prefix = unique("Name")
    alpha = submit(batch, queue, f"{prefix}-Alpha")
    time.sleep(0.01)
    alpha2 = submit(batch, queue, f"{prefix}-alpha2")
    time.sleep(0.01)
    submit(batch, queue, f"{prefix}-beta")

    def names_for(value):
        resp = batch.list_service_jobs(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [value]}])
        return [j["jobId"] for j in resp["jobSummaryList"]]

    assert names_for(f"{prefix.upper()}-ALPHA") == [alpha["jobId"]], "exact match ignores case"
    assert names_for(f"{prefix.lower()}-alpha*") == [alpha2["jobId"], alpha["jobId"]], "prefix, newest first"
    assert len(names_for(f"{prefix}*")) == 3
    assert names_for(f"{prefix}-gamma") == []


def test_job_name_filter_ignores_status(batch, shared_queue):
    name = unique("any-status")
    job = submit(batch, shared_queue["jobQueueName"], name)
    batch.terminate_service_job(jobId=job["jobId"], reason="r")
    resp = batch.list_service_jobs(
        jobQueue=shared_queue["jobQueueName"], jobStatus="RUNNING", filters=[{"name": "JOB_NAME", "values": [name]}]
    )
    assert job_ids([resp]) == [job["jobId"]]


def test_created_at_filters_split_at_a_timestamp(batch, resources):
    queue = resources.queue()["jobQueueName"]
    older = submit(batch, queue, unique("older"))
    time.sleep(0.05)
    newer = submit(batch, queue, unique("newer"))
    t_old = batch.describe_service_job(jobId=older["jobId"])["createdAt"]
    t_new = batch.describe_service_job(jobId=newer["jobId"])["createdAt"]
    assert t_new > t_old
    middle = str((t_old + t_new) // 2)

    def listed(filter_name, value):
        resp = batch.list_service_jobs(jobQueue=queue, filters=[{"name": filter_name, "values": [value]}])
        return job_ids([resp])

    assert listed("AFTER_CREATED_AT", middle) == [newer["jobId"]]
    assert listed("BEFORE_CREATED_AT", middle) == [older["jobId"]]
    assert listed("AFTER_CREATED_AT", str(t_old - 1000)) == [newer["jobId"], older["jobId"]], "newest first"
    assert listed("BEFORE_CREATED_AT", str(t_old - 1000)) == []


def test_share_identifier_filter_with_status(batch, resources):
    queue = resources.fairshare_queue(shareDecaySeconds=0)["jobQueueName"]
    a = submit(batch, queue, unique("a"), shareIdentifier="teama")
    b = submit(batch, queue, unique("b"), shareIdentifier="teamb")
    for j in (a, b):
        wait_for_status(batch, j["jobId"], "RUNNABLE")
    resp = batch.list_service_jobs(
        jobQueue=queue, jobStatus="RUNNABLE", filters=[{"name": "SHARE_IDENTIFIER", "values": ["teama"]}]
    )
    assert job_ids([resp]) == [a["jobId"]]
    assert resp["jobSummaryList"][0]["shareIdentifier"] == "teama"


def test_quota_share_name_filter_with_status(batch, resources):
    queue = resources.quota_queue()
    other = resources.quota_share(queue["jobQueueArn"])
    # An instance type the environment does not offer keeps both jobs RUNNABLE: the scheduler
    # would otherwise dispatch them before the listing.
    waiting = support.training_payload(instance_type="ml.p5.48xlarge")
    a = submit(batch, queue["jobQueueName"], unique("a"), quotaShareName=queue["quotaShareName"],
               serviceRequestPayload=waiting)
    b = submit(batch, queue["jobQueueName"], unique("b"), quotaShareName=other["quotaShareName"],
               serviceRequestPayload=waiting)
    for j in (a, b):
        wait_for_status(batch, j["jobId"], "RUNNABLE")
    resp = batch.list_service_jobs(
        jobQueue=queue["jobQueueName"],
        jobStatus="RUNNABLE",
        filters=[{"name": "QUOTA_SHARE_NAME", "values": [other["quotaShareName"]]}],
    )
    assert job_ids([resp]) == [b["jobId"]]
    assert resp["jobSummaryList"][0]["quotaShareName"] == other["quotaShareName"]


@pytest.fixture(scope="module")
def many_jobs(batch, module_resources):
    """130 jobs in a queue of their own: more than one default page (100)."""
    queue = module_resources.queue()["jobQueueName"]
    prefix = unique("page")
    ids = [submit(batch, queue, f"{prefix}-{i:03d}")["jobId"] for i in range(130)]
    return queue, prefix, ids


def test_paginator_visits_every_job_exactly_once(batch, many_jobs):
    queue, prefix, ids = many_jobs
    pages = list(
        batch.get_paginator("list_service_jobs").paginate(
            jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [f"{prefix}*"]}]
        )
    )
    assert [len(p["jobSummaryList"]) for p in pages] == [100, 30], "default page size is 100"
    got = job_ids(pages)
    assert sorted(got) == sorted(ids) and len(set(got)) == len(got)
    assert "nextToken" not in pages[-1]


def test_manual_next_token_with_small_pages(batch, many_jobs):
    queue, prefix, ids = many_jobs
    seen, token, pages = [], None, 0
    while True:
        kwargs = {"jobQueue": queue, "maxResults": 40, "filters": [{"name": "JOB_NAME", "values": [f"{prefix}*"]}]}
        if token:
            kwargs["nextToken"] = token
        page = batch.list_service_jobs(**kwargs)
        pages += 1
        assert len(page["jobSummaryList"]) <= 40
        seen += job_ids([page])
        token = page.get("nextToken")
        if not token:
            break
        assert pages < 10, "pagination did not terminate"
    assert pages == 4
    assert sorted(seen) == sorted(ids) and len(set(seen)) == len(seen)


def test_status_listing_pages_too(batch, many_jobs):
    queue, _, ids = many_jobs
    for job_id in ids:
        wait_for_status(batch, job_id, "RUNNABLE", timeout_s=15)
    pages = list(batch.get_paginator("list_service_jobs").paginate(jobQueue=queue, jobStatus="RUNNABLE"))
    got = job_ids(pages)
    assert sorted(got) == sorted(ids)
    assert "nextToken" not in pages[-1]
