"""`trainyard up` creates a demo set-up on first start: environment `local` (8 instances) and
FIFO queues production (900), research (500) and sweeps (100) feeding it; sweeps ages
(2 points an hour up to 899)."""

from support import arn_pattern


def test_demo_environment_has_eight_instances(batch):
    envs = batch.describe_service_environments(serviceEnvironments=["local"])["serviceEnvironments"]
    assert len(envs) == 1
    assert envs[0]["capacityLimits"] == [{"maxCapacity": 8, "capacityUnit": "NUM_INSTANCES"}]
    assert envs[0]["state"] == "ENABLED"


def test_demo_queues_have_their_priorities_and_feed_the_local_environment(batch):
    queues = batch.describe_job_queues(jobQueues=["production", "research", "sweeps"])["jobQueues"]
    by_name = {q["jobQueueName"]: q for q in queues}
    assert {n: q["priority"] for n, q in by_name.items()} == {"production": 900, "research": 500, "sweeps": 100}
    for name, q in by_name.items():
        assert arn_pattern("job-queue", name).match(q["jobQueueArn"])
        assert q["jobQueueType"] == "SAGEMAKER_TRAINING"
        assert q["state"] == "ENABLED"
        assert "schedulingPolicyArn" not in q, "demo queues are FIFO"
        (order,) = q["serviceEnvironmentOrder"]
        assert arn_pattern("service-environment", "local").match(order["serviceEnvironment"])


def test_only_the_demo_sweeps_queue_ages(batch):
    queues = batch.describe_job_queues(jobQueues=["production", "research", "sweeps"])["jobQueues"]
    aging = {
        q["jobQueueName"]: {k: v for k, v in q.get("tags", {}).items() if k.startswith("trainyard:aging")}
        for q in queues
    }
    assert aging == {
        "production": {},
        "research": {},
        "sweeps": {"trainyard:aging-per-hour": "2", "trainyard:aging-max-priority": "899"},
    }
