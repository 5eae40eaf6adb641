"""GetJobQueueSnapshot: the front of the queue lists RUNNABLE jobs in dispatch order."""

import time

from support import submit_args, unique, wait_for_status


def test_fifo_front_of_queue_is_submission_order(batch, resources):
    queue = resources.queue()["jobQueueName"]
    arns = []
    for i in range(4):
        job = batch.submit_service_job(**submit_args(queue, unique(f"snap{i}"), schedulingPriority=10 * i))
        arns.append(job["jobArn"])
        time.sleep(0.01)
    for arn in arns:
        wait_for_status(batch, arn, "RUNNABLE")
    snap = batch.get_job_queue_snapshot(jobQueue=queue)
    front = snap["frontOfQueue"]["jobs"]
    assert [j["jobArn"] for j in front] == arns, "FIFO ignores schedulingPriority"
    assert all(isinstance(j["earliestTimeAtPosition"], int) for j in front)


def test_fair_share_front_orders_by_priority_within_a_share(batch, resources):
    queue = resources.fairshare_queue(shareDecaySeconds=0)["jobQueueArn"]
    low = batch.submit_service_job(**submit_args(queue, unique("low"), shareIdentifier="s", schedulingPriority=1))
    high = batch.submit_service_job(**submit_args(queue, unique("high"), shareIdentifier="s", schedulingPriority=900))
    for job in (low, high):
        wait_for_status(batch, job["jobId"], "RUNNABLE")
    front = batch.get_job_queue_snapshot(jobQueue=queue)["frontOfQueue"]["jobs"]
    assert [j["jobArn"] for j in front] == [high["jobArn"], low["jobArn"]]


def test_terminated_jobs_leave_the_front(batch, resources):
    queue = resources.queue()["jobQueueName"]
    a = batch.submit_service_job(**submit_args(queue, unique("a")))
    b = batch.submit_service_job(**submit_args(queue, unique("b")))
    for job in (a, b):
        wait_for_status(batch, job["jobId"], "RUNNABLE")
    batch.terminate_service_job(jobId=a["jobId"], reason="r")
    front = batch.get_job_queue_snapshot(jobQueue=queue)["frontOfQueue"]["jobs"]
    assert [j["jobArn"] for j in front] == [b["jobArn"]]
