"""The AWS CLI (v1, `aws batch ... --endpoint-url`) for a representative subset."""

from support import training_payload, unique, wait_for_status


def test_environment_and_queue_lifecycle(aws, resources):
    se = unique("se")
    rc, out, err = aws(
        "create-service-environment",
        "--service-environment-name", se,
        "--service-environment-type", "SAGEMAKER_TRAINING",
        "--capacity-limits", "maxCapacity=2,capacityUnit=NUM_INSTANCES",
    )
    assert rc == 0, err
    se_arn = out["serviceEnvironmentArn"]
    resources.add_cleanup(lambda: resources._delete_environment(se_arn))
    assert out["serviceEnvironmentName"] == se

    rc, out, err = aws("describe-service-environments", "--service-environments", se)
    assert rc == 0, err
    assert [e["serviceEnvironmentName"] for e in out["serviceEnvironments"]] == [se]

    q = unique("q")
    rc, out, err = aws(
        "create-job-queue",
        "--job-queue-name", q,
        "--priority", "7",
        "--job-queue-type", "SAGEMAKER_TRAINING",
        "--service-environment-order", f"order=1,serviceEnvironment={se}",
    )
    assert rc == 0, err
    queue_arn = out["jobQueueArn"]
    resources.add_cleanup(lambda: resources._delete_queue(queue_arn))
    rc, out, err = aws("describe-job-queues", "--job-queues", q)
    assert rc == 0, err
    assert out["jobQueues"][0]["priority"] == 7


def test_job_lifecycle(aws, batch, shared_queue):
    name = unique("cli")
    rc, out, err = aws(
        "submit-service-job",
        "--job-name", name,
        "--job-queue", shared_queue["jobQueueName"],
        "--service-job-type", "SAGEMAKER_TRAINING",
        "--service-request-payload", training_payload(),
        "--scheduling-priority", "3",
    )
    assert rc == 0, err
    job_id = out["jobId"]
    wait_for_status(batch, job_id, "RUNNABLE")

    rc, out, err = aws("describe-service-job", "--job-id", job_id)
    assert rc == 0, err
    assert (out["jobName"], out["status"], out["schedulingPriority"]) == (name, "RUNNABLE", 3)

    rc, out, err = aws(
        "list-service-jobs", "--job-queue", shared_queue["jobQueueName"], "--filters", f"name=JOB_NAME,values={name}"
    )
    assert rc == 0, err
    assert [j["jobId"] for j in out["jobSummaryList"]] == [job_id]

    rc, out, err = aws("update-service-job", "--job-id", job_id, "--scheduling-priority", "9")
    assert rc == 0, err
    rc, out, err = aws("terminate-service-job", "--job-id", job_id, "--reason", "from the cli")
    assert rc == 0, err
    rc, out, err = aws("describe-service-job", "--job-id", job_id)
    assert (out["status"], out["statusReason"], out["isTerminated"]) == ("FAILED", "from the cli", True)


def test_cli_paginates_list_service_jobs_on_its_own(aws, batch, resources):
    queue = resources.queue()["jobQueueName"]
    prefix = unique("clipage")
    ids = {
        batch.submit_service_job(
            jobName=f"{prefix}-{i}", jobQueue=queue, serviceJobType="SAGEMAKER_TRAINING", serviceRequestPayload=training_payload()
        )["jobId"]
        for i in range(5)
    }
    rc, out, err = aws("list-service-jobs", "--job-queue", queue, "--filters", f"name=JOB_NAME,values={prefix}*", "--page-size", "2")
    assert rc == 0, err
    assert {j["jobId"] for j in out["jobSummaryList"]} == ids


def test_errors_reach_the_cli_as_client_exceptions(aws):
    rc, out, err = aws(
        "submit-service-job",
        "--job-name", "x",
        "--job-queue", "production",
        "--service-job-type", "SAGEMAKER_TRAINING",
        "--service-request-payload", training_payload(),
        "--scheduling-priority", "10000",
    )
    assert rc != 0
    assert "ClientException" in err and "schedulingPriority" in err, err


def test_tags_through_the_cli(aws, resources):
    arn = resources.queue()["jobQueueArn"]
    rc, _, err = aws("tag-resource", "--resource-arn", arn, "--tags", "team=vision,cost=1")
    assert rc == 0, err
    rc, _, err = aws("untag-resource", "--resource-arn", arn, "--tag-keys", "cost")
    assert rc == 0, err
    rc, out, err = aws("list-tags-for-resource", "--resource-arn", arn)
    assert rc == 0, err
    assert out["tags"] == {"team": "vision"}
