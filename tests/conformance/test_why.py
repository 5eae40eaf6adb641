"""Why a job waits, as a user asks it: every RUNNABLE job carries a reason in Batch's
`CATEGORY:CODE - message` form (also the ones behind the first jobs a cycle reads), and
`trainyard why` prints what holds a job back, most fundamental first, and its history."""

from __future__ import annotations

import json
import os
import subprocess

import support


def why(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRAINYARD_ENDPOINT=support.endpoint(), NO_COLOR="1")
    return subprocess.run([support.TRAINYARD_BIN, "why", *args], capture_output=True, text=True,
                          timeout=60, env=env, stdin=subprocess.DEVNULL)


def test_every_waiting_job_has_a_reason_and_why_ranks_what_holds_it_back(batch, resources):
    env = resources.environment([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}])
    queue = resources.queue(env["serviceEnvironmentArn"])

    def submit(name: str, seconds: str) -> str:
        payload = json.loads(support.training_payload(name=name))
        payload["HyperParameters"] = {"emulator_duration_s": seconds}
        args = support.submit_args(queue["jobQueueArn"], support.unique(name),
                                   serviceRequestPayload=json.dumps(payload))
        return batch.submit_service_job(**args)["jobId"]

    holder = submit("holder", "600")
    support.wait_until(
        lambda: batch.describe_service_job(jobId=holder)["status"] in ("SCHEDULED", "STARTING", "RUNNING"),
        "the holder to take the only instance",
    )
    # More than a cycle reads of a full queue (its free instances plus 16).
    waiting = [submit(f"waiting-{i}", "1") for i in range(25)]

    def reason(job_id: str) -> str:
        return batch.describe_service_job(jobId=job_id).get("statusReason", "")

    last = support.wait_until(lambda: reason(waiting[-1]) or None, "the last job to have a reason")
    assert last.startswith("PRIORITY:JOBS_AHEAD - at least 8 jobs wait ahead of it in queue "), last
    assert waiting[0] in last, last
    first = reason(waiting[0])
    assert first.startswith("CAPACITY:SERVICE_ENVIRONMENT_FULL - needs 1 NUM_INSTANCES, 0 free"), first
    # Listing shows the same reasons.
    listed = batch.list_service_jobs(jobQueue=queue["jobQueueName"], jobStatus="RUNNABLE")["jobSummaryList"]
    assert len(listed) == 25 and all(j.get("statusReason") for j in listed), listed

    shown = why(waiting[-1])
    assert shown.returncode == 0, shown.stderr
    assert "is RUNNABLE in queue" in shown.stdout and "number 25 in its line" in shown.stdout, shown.stdout
    holds = shown.stdout.split("What holds it back, most fundamental first:\n")[1]
    assert holds.index("PRIORITY:JOBS_AHEAD: 24 jobs wait ahead of it") < holds.index(
        "CAPACITY:SERVICE_ENVIRONMENT_FULL"), shown.stdout
    assert "submitted" in shown.stdout, shown.stdout

    as_json = json.loads(why(waiting[0], "--output", "json").stdout)
    assert [b["code"] for b in as_json["blockers"]] == ["CAPACITY:SERVICE_ENVIRONMENT_FULL"], as_json
    assert as_json["blockers"][0]["detail"] == {
        "kind": "INSUFFICIENT_CAPACITY", "environment": env["serviceEnvironmentName"],
        "unit": "NUM_INSTANCES", "needed": 1, "free": 0,
    }, as_json
    assert as_json["position"] == 1 and as_json["status"] == "RUNNABLE", as_json

    # Start-time estimates (the suite's server runs a forecast round every 2 s): after the
    # reason, in describe and list, in `trainyard why` and in `trainyard jobs`.
    estimated = support.wait_until(
        lambda: (lambda r: r if "; start p50 " in r else None)(reason(waiting[-1])),
        "the last job to have a start estimate",
    )
    assert estimated.startswith("PRIORITY:JOBS_AHEAD - "), estimated
    assert estimated.endswith("(uncalibrated)"), "no attempt has ended yet: " + estimated
    described = batch.describe_service_job(jobId=waiting[0])
    assert described["statusReason"].startswith("CAPACITY:SERVICE_ENVIRONMENT_FULL - "), described
    shown = why(waiting[-1])
    assert "Expected start: p50 " in shown.stdout and "uncalibrated" in shown.stdout, shown.stdout
    as_json = json.loads(why(waiting[-1], "--output", "json").stdout)
    assert as_json["estimate"]["p50Ms"] <= as_json["estimate"]["p90Ms"], as_json
    env_vars = dict(os.environ, TRAINYARD_ENDPOINT=support.endpoint(), NO_COLOR="1")
    listed = subprocess.run(
        [support.TRAINYARD_BIN, "jobs", "--queue", queue["jobQueueName"], "--status", "RUNNABLE"],
        capture_output=True, text=True, timeout=60, env=env_vars, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr
    assert "START p50/p90" in listed.stdout and " ?" in listed.stdout, listed.stdout

    missing = why("00000000-0000-4000-8000-000000000000")
    assert missing.returncode != 0 and "does not exist" in missing.stderr, missing.stderr

    for job_id in [holder, *waiting]:
        batch.terminate_service_job(jobId=job_id, reason="test over")


def test_every_recorded_cycle_replays_to_its_decisions():
    """The determinism check: `trainyard up` records each cycle that had a job to plan (this
    suite's runs among them, quota-share preemptions and fair shares included); planning each
    recorded snapshot again gives the recorded decisions."""
    data_dir = os.environ.get("TRAINYARD_DATA_DIR")
    assert data_dir, "TRAINYARD_DATA_DIR is not set; run the suite through scripts/test"
    listed = subprocess.run([support.TRAINYARD_BIN, "replay", "--data-dir", data_dir, "--limit", "10000",
                             "--output", "json"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr
    cycles = json.loads(listed.stdout)
    assert cycles and any(c["dispatches"] > 0 for c in cycles), cycles
    replayed = subprocess.run([support.TRAINYARD_BIN, "replay", "--all", "--data-dir", data_dir],
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "every one to its recorded decisions" in replayed.stdout, replayed.stdout
