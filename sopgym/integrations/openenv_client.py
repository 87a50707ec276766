"""A typed OpenEnv client of ``sopgym serve``: :class:`SopgymEnvClient` (extra ``server``, or ``openenv`` alone).

OpenEnv's ``EnvClient`` over one WebSocket session (one env on the server), with sopgym's wire models
(:mod:`sopgym.integrations.openenv_models`) instead of untyped dicts, and the server's token sent with
the handshake. A gymnasium loop wants ``sopgym/Remote-v0`` instead (no OpenEnv needed); this is for
code written against OpenEnv's client API.

Example:
    >>> from sopgym.integrations.openenv_client import SopgymEnvClient
    >>> from sopgym.integrations.openenv_models import SopgymAction
    >>> with SopgymEnvClient("http://127.0.0.1:8000").sync() as env:  # doctest: +SKIP
    ...     result = env.reset(split="test", index=0)                    # token from SOPGYM_SERVE_TOKEN
    ...     print(result.observation.text[:60], result.observation.tool_schemas[0]["function"]["name"])
    ...     result = env.step(SopgymAction(type="call_tool", tool_name="check_outage", arguments={"region_code": "RG-01"}))
    ...     print(result.observation.status, result.observation.result[:60])
    ...     print(env.state().task_id)
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.mcp_types import ListToolsObservation

from .openenv_models import SopgymAction, SopgymObservation, SopgymState, SopgymToolObservation
from .protocol import auth_headers, token_from_env

__all__ = ["SopgymEnvClient"]


class SopgymEnvClient(EnvClient[SopgymAction, SopgymObservation, SopgymState]):
    """One session of a sopgym env server, typed.

    ``reset(**kwargs)`` takes the server's reset keys (``seed``, ``options``, ``episode_id``, ``split``,
    ``index``, ``task_id``); ``step(SopgymAction(...))`` returns a ``StepResult`` whose observation is a
    :class:`~sopgym.integrations.openenv_models.SopgymObservation`, a
    :class:`~sopgym.integrations.openenv_models.SopgymToolObservation` (a ``call_tool`` step) or OpenEnv's
    ``ListToolsObservation`` (``list_tools``); ``state()`` is a
    :class:`~sopgym.integrations.openenv_models.SopgymState`.

    Args:
        base_url: the server, ``http://HOST:PORT`` as ``sopgym serve`` prints it.
        token: the server's token; None: the one in ``SOPGYM_SERVE_TOKEN``, or none.
        **kwargs: OpenEnv's ``EnvClient`` options (``message_timeout_s``, ``headers``, ...).
    """

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        headers = {**auth_headers(token if token is not None else token_from_env()), **(kwargs.pop("headers", None) or {})}
        super().__init__(base_url, headers=headers or None, **kwargs)

    def _step_payload(self, action: SopgymAction) -> dict[str, Any]:
        if not isinstance(action, SopgymAction):
            raise TypeError(f"expected a SopgymAction, got {type(action).__name__}")
        # Only the fields given: the server checks that they are those of the action's type.
        return {"type": action.type, **action.model_dump(mode="json", exclude_unset=True, exclude={"metadata"})}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult:
        fields = {**payload.get("observation", {}), "reward": payload.get("reward"), "done": payload.get("done", False)}
        if "tools" in fields:
            observation = ListToolsObservation.model_validate(fields)
        elif "tool_name" in fields:
            observation = SopgymToolObservation.model_validate(fields)
        else:
            observation = SopgymObservation.model_validate(fields)
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False),
                          metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> SopgymState:
        return SopgymState.model_validate(payload)
