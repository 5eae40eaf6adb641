"""Sign AWS Batch requests for API Gateway, so Batch clients can call a deployed Trainyard.

A deployed stack serves the Batch API behind an API Gateway HTTP API with IAM auth. API Gateway
checks SigV4 signatures made for the service name ``execute-api``; Batch clients sign for
``batch``. Nothing else differs, so this module changes only the signing name of Batch requests
(the Region, the credentials and the request stay as they are). It works three ways:

* boto3 client: ``trainyard_sigv4.install(batch_client)``
* boto3 session, and so every Batch client made from it: ``trainyard_sigv4.install(session)``
* boto3's default session, which ``boto3.client("batch")`` and the SageMaker Python SDK's
  ``TrainingQueue`` use: ``trainyard_sigv4.install_default()``
* AWS CLI (v1 or v2) plugin, enabled in ``~/.aws/config`` with the module on ``PYTHONPATH``
  (v2: ``cli_legacy_plugin_path`` under ``[plugins]``)::

      [plugins]
      trainyard_sigv4 = trainyard_sigv4

The module has no dependency beyond botocore. Local mode (``trainyard up``) does not check
signatures, so installing it there is harmless.
"""

from __future__ import annotations

from typing import Any

SIGNING_NAME = "execute-api"
EVENT = "before-sign.batch"


def _sign_for_execute_api(request: Any, **_: Any) -> None:
    # botocore's RequestSigner reads request.context["signing"]["signing_name"] after this event.
    request.context.setdefault("signing", {})["signing_name"] = SIGNING_NAME


def install(target: Any) -> Any:
    """Makes ``target`` (a boto3/botocore client, a boto3 ``Session``, or a botocore session)
    sign Batch requests for ``execute-api``; returns ``target``."""
    meta = getattr(target, "meta", None)
    if meta is not None and hasattr(meta, "events"):  # a client
        meta.events.register(EVENT, _sign_for_execute_api)
    elif hasattr(target, "events"):  # boto3.Session
        target.events.register(EVENT, _sign_for_execute_api)
    elif hasattr(target, "register"):  # botocore.session.Session or an event emitter
        target.register(EVENT, _sign_for_execute_api)
    else:
        raise TypeError(f"cannot install request signing on {type(target).__name__}")
    return target


def install_default() -> Any:
    """Installs on boto3's default session (creating it if needed), which module-level
    ``boto3.client(...)`` calls use; returns that session."""
    import boto3

    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    return install(boto3.DEFAULT_SESSION)


def awscli_initialize(cli: Any) -> None:
    """The AWS CLI's plugin entry point: ``cli`` is its event emitter."""
    cli.register(EVENT, _sign_for_execute_api)
