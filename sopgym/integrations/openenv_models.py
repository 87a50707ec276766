"""The typed wire models of ``sopgym serve``: what an OpenEnv client sends and gets (extra ``server``).

Shared by the server (:mod:`sopgym.integrations.openenv_server`) and the typed client
(:mod:`sopgym.integrations.openenv_client`), so both validate the same fields. They need OpenEnv's base
types (``openenv.core.env_server.types``) and pydantic, nothing of the server's web stack.

* :class:`SopgymAction`: one ``step`` (``reply``, ``call_tool``, ``list_tools`` or ``end_episode``).
* :class:`SopgymObservation`: the observation of a reset, a reply or an end; :class:`SopgymToolObservation`
  that of a ``call_tool`` step (OpenEnv's ``CallToolObservation`` plus the same fields).
* :class:`SopgymState`: the session's state.

``text``, ``messages`` and ``tool_schemas`` are what a prompt may show; ``gym_step`` (decoded by
:meth:`SopgymObservation.gym_return`) and the state are for harnesses: they carry bookkeeping
(``difficulty``, the final episode record) that must never reach a model. The expected answer and state
(:data:`~sopgym.integrations.protocol.GROUND_TRUTH_KEYS`) are in a record only when the server was
started with ``--send-ground-truth`` (``SopgymState.ground_truth`` says which).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from openenv.core.env_server.mcp_types import CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

import sopgym
from sopgym.status import END_CAUSES

from .protocol import ACTION_TYPES, PROTOCOL_KEY, PROTOCOL_VERSION

__all__ = ["SopgymAction", "SopgymObservation", "SopgymToolObservation", "SopgymState"]


class SopgymAction(Action):
    """One ``step`` request (see :data:`~sopgym.integrations.protocol.ACTION_TYPES`).

    Example:
        >>> SopgymAction(type="reply", reply='<tool_call>{"name": "get_account", "arguments": {}}</tool_call>')  # doctest: +SKIP
        >>> SopgymAction(type="end_episode", cause="stopped")  # doctest: +SKIP
    """

    type: Literal["reply", "call_tool", "list_tools", "end_episode"] = Field(
        default="reply", description="reply | call_tool | list_tools | end_episode")
    reply: Any = Field(default=None, description="type=reply: the assistant's reply, a string or an assistant message dict")
    tool_name: str | None = Field(default=None, description="type=call_tool: the tool to call")
    arguments: dict[str, Any] | None = Field(default=None, description="type=call_tool: its arguments")
    cause: str | None = Field(default=None, description=f"type=end_episode: one of {sorted(END_CAUSES)}")
    message: str = Field(default="", description="type=end_episode: why (kept in status_message)")

    @model_validator(mode="after")
    def _fields_match_type(self) -> SopgymAction:
        given = self.model_fields_set - {"type", "metadata"}
        needs = {"reply": {"reply"}, "call_tool": {"tool_name"}, "list_tools": set(), "end_episode": {"cause"}}[self.type]
        allowed = needs | {"call_tool": {"arguments"}, "end_episode": {"message"}}.get(self.type, set())
        # PydanticCustomError, not ValueError: OpenEnv sends the validation errors to the client, and an
        # exception object in their context cannot be encoded (the session would die instead).
        if not needs <= given or not given <= allowed:
            raise PydanticCustomError("sopgym_action", "{detail}", {"detail": (
                f"a {self.type!r} action takes {sorted(allowed) or 'no other keys'} (required: {sorted(needs) or 'none'}); "
                f"got {sorted(given)}. Action types: {list(ACTION_TYPES)}")})
        if self.type == "end_episode" and self.cause not in END_CAUSES:
            raise PydanticCustomError("sopgym_action", "{detail}", {
                "detail": f"end_episode cause must be one of {sorted(END_CAUSES)}, got {self.cause!r}"})
        return self


class _SopgymFields(BaseModel):
    text: str = Field(default="", description="the gymnasium observation: the task at reset, the tool results after a step")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="the chat messages this reset/step added (reset: system + user)")
    # Not "tools": OpenEnv's MCP clients read an observation with a "tools" key as a tools/list answer.
    tool_schemas: list[dict[str, Any]] | None = Field(
        default=None, description="the tool schemas (OpenAI format, what a chat template's tools= takes), at reset")
    status: str = Field(default="OK", description="info['status'] (sopgym.status.Status)")
    status_message: str | None = Field(default=None, description="info['status_message']")
    terminated: bool = False
    truncated: bool = False
    gym_step: str = Field(
        default="", description="the exact gymnasium return value as ASCII JSON, for harnesses: it includes "
                                "bookkeeping (difficulty, the final record) that a prompt must never show")

    def gym_return(self) -> dict[str, Any]:
        """``gym_step`` decoded: ``observation`` and ``info`` (a reset), plus ``reward``, ``terminated`` and
        ``truncated`` (a step), exactly as the env on the server returned them."""
        return json.loads(self.gym_step)


class SopgymObservation(Observation, _SopgymFields):
    """The observation of a reset, a reply or an end."""


class SopgymToolObservation(CallToolObservation, _SopgymFields):
    """The observation of a ``call_tool`` step: OpenEnv's ``CallToolObservation`` (``result`` is the tool message) plus sopgym's fields."""


class SopgymState(State):
    """The session's state: what a harness needs between steps."""

    sopgym_protocol: int = PROTOCOL_VERSION
    sopgym_version: str = sopgym.__version__
    env_id: str = ""
    max_observation_length: int = 0
    ground_truth: bool = Field(
        default=False, description="whether records leaving this server carry the expected answer and state "
                                   "(sopgym serve --send-ground-truth)")
    task_id: str | None = None
    split: str | None = None
    status: str | None = None
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    total_reward: float = 0.0
    infrastructure_failure: bool = False
    episode: dict[str, Any] | None = Field(
        default=None, description="the episode record once the episode ended (the expected answer only if ground_truth)")


assert PROTOCOL_KEY in SopgymState.model_fields  # how a client recognises a sopgym server
