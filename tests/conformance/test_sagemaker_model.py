"""The SageMaker `CreateTrainingJob` shape that payloads are checked against at submit
(shared/domain/src/payload/create_training_job.json) is the pinned botocore's, member for member."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_payload_shape_is_the_pinned_botocores():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sagemaker-model"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
