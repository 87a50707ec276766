"""SopBenchEnv: :class:`sopgym.envs.SOPEnv` over a SOP-Bench domain, with faithful tools.

Same contract as every sopgym env (messages, tools, submit tool from the output columns, statuses,
budgets, reward components, the episode record); what differs:

* tools are answered by :class:`.toolbox.SopBenchToolBox`: replayed from the domain's recording
  when the call is recorded, else run live by the domain's own ``tools.py``, in the Docker sandbox
  by default (``tools_runner="subprocess"``/``"inprocess"`` need ``trust_tools_code=True``);
* the default split is ``test`` (the only non-empty one);
* ``info["sopbench"]`` says how inputs were chosen (``inputs_rule``), which columns are hidden,
  the tool mode, the prompt style, the pandas version the tools run with (``pandas_version``: the
  sandbox image's pin for ``docker``, this interpreter's otherwise) and the recording's
  (``recording_pandas_version``), and whether the recording drifted (a changed checkout or pandas);
* ``prompt_style="upstream"`` reproduces upstream's prompt layout (see :mod:`.prompts`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from sopgym.envs.env import SOPEnv
from sopgym.envs.parsing import parse_reply
from sopgym.envs.policies import format_call
from sopgym.sandboxes.availability import BackendNeed, Fix, docker_problem
from sopgym.sandboxes.base import SandboxError
from sopgym.sop_tasks.pack import SUBMIT_TOOL, DomainPack

from .adapter import get_registered
from .prompts import PROMPT_STYLES, UPSTREAM_MAX_TURNS, final_decision, upstream_user_message
from .replay import Recording, RecordingDrift
from .runners import RUNNERS, check_pandas_version, host_pandas_version, make_runner, runner_pandas_version
from .sopbench_toolbox import TOOL_MODES, SopBenchToolBox

__all__ = ["SopBenchEnv"]


def _host_pandas_problem() -> str | None:
    """Why this interpreter's pandas cannot run SOP-Bench's tools (None when it can)."""
    try:
        check_pandas_version(host_pandas_version(), "this interpreter")
    except SandboxError as exc:
        return f"{exc}: pip install 'pandas>=2'"
    return None


class SopBenchEnv(SOPEnv):
    """Args (in addition to :class:`SOPEnv`'s):
    tool_mode: ``auto`` (replay recorded calls, run the rest live; default), ``replay`` (never run
        code: an unrecorded call is a sandbox error) or ``live`` (always run the code).
    tools_runner: ``docker`` (default), ``subprocess`` or ``inprocess``.
    trust_tools_code: must be True for the unsandboxed runners: the checkout's tools.py is third-party code.
    tool_timeout_s: deadline of one live tool request.
    recording: path of the recording (default: the registered domain's recording file).
    prompt_style: ``chat`` (default) or ``upstream``.
    allow_drift: replay a recording even when the checkout changed since it was made (warns).
    """

    def __init__(self, domain: str | DomainPack, *, split: str = "test", tool_mode: str = "auto",
                 tools_runner: str = "docker", trust_tools_code: bool = False, tool_timeout_s: float = 60.0,
                 recording: str | None = None, prompt_style: str = "chat", allow_drift: bool = False,
                 max_turns: int | None = None, **kwargs: Any) -> None:
        key = domain.key if isinstance(domain, DomainPack) else domain
        self.registered = get_registered(key)
        if tool_mode not in TOOL_MODES:
            raise ValueError(f"tool_mode must be one of {TOOL_MODES}, got {tool_mode!r}")
        if tools_runner not in RUNNERS:
            raise ValueError(f"tools_runner must be one of {RUNNERS}, got {tools_runner!r}")
        if tools_runner != "docker" and not trust_tools_code:
            raise ValueError(f"tools_runner={tools_runner!r} runs the checkout's tools.py unsandboxed: pass trust_tools_code=True")
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {prompt_style!r}")
        if prompt_style == "upstream" and max_turns is None:
            max_turns = UPSTREAM_MAX_TURNS
        super().__init__(self.registered.pack, split=split, max_turns=max_turns, **kwargs)
        self.tool_mode = tool_mode
        self.tools_runner = tools_runner
        self.trust_tools_code = trust_tools_code
        self.tool_timeout_s = tool_timeout_s
        self.prompt_style = prompt_style
        self.pandas_version = runner_pandas_version(tools_runner)
        here = host_pandas_version()
        self._pandas_notes = [] if (self.pandas_version or "").split(".")[0] == (here or "").split(".")[0] else [
            f"tools run with pandas {self.pandas_version} ({tools_runner} runner) but this interpreter, which reads "
            f"the task CSV, has pandas {here}: inputs and tool results may read cells differently"]
        self.recording = self._load_recording(recording, allow_drift)

    def _load_recording(self, path: str | None, allow_drift: bool) -> Recording | None:
        domain = self.registered.domain
        file = path or self.registered.recording_file
        self.drift: str | None = None
        self.recording_pandas_version: str | None = None
        try:
            rec = Recording.load(file)
        except FileNotFoundError:
            if self.tool_mode == "replay":
                raise FileNotFoundError(f"tool_mode='replay' needs a recording at {file}: run `sopgym sopbench record`") from None
            return None
        self.recording_pandas_version = rec.pandas_version
        self.drift = rec.check_drift(domain, self.pandas_version)
        if self.drift:
            if not allow_drift:
                if self.tool_mode == "replay":
                    raise RecordingDrift(self.drift)
                warnings.warn(f"{self.drift}; ignoring the recording and running tools live", stacklevel=3)
                return None
            warnings.warn(f"{self.drift}; replaying it anyway (allow_drift=True)", stacklevel=3)
        return rec

    def backend_needs(self) -> list[BackendNeed]:
        """:meth:`SOPEnv.backend_needs`, plus the tools runner when calls may run live (the checkout's
        ``tools.py``: in Docker by default, else this interpreter's pandas), and a warning-only need when
        the checkout has no ``tools.py`` (only recorded calls can be answered)."""
        needs = super().backend_needs()
        domain = self.registered.domain
        if not domain.has_tools:
            answered = ("only recorded calls are answered, any other is" if self.recording
                        else "and there is no recording: every tool call is")
            needs.append(BackendNeed("tools.py", "its tools: a data-only folder",
                                     lambda: f"tools.py missing, {answered} an infrastructure failure (a checkout "
                                             "with tools.py: docs/sopbench.md)", warning_only=True))
            return needs
        if self.tool_mode == "replay":
            return needs
        user = f"its tools.py{', for unrecorded calls' if self.tool_mode == 'auto' and self.recording else ''}"
        if self.tools_runner != "docker":
            needs.append(BackendNeed(f"pandas ({self.tools_runner} runner)", user, _host_pandas_problem))
            return needs
        fixes = [Fix({"tools_runner": "subprocess", "trust_tools_code": True},
                     "runs the checkout's tools.py on this host, unsandboxed, with this interpreter's pandas")]
        if self.recording is not None:
            fixes.append(Fix({"tool_mode": "replay"}, "recorded calls only: any other call is an infrastructure failure"))
        needs.append(BackendNeed("Docker", user, docker_problem, tuple(fixes)))
        return needs

    def _make_toolbox(self) -> SopBenchToolBox:
        domain = self.registered.domain
        options = {"timeout_s": self.tool_timeout_s} if self.tools_runner != "inprocess" else {}

        def factory():
            return make_runner(self.tools_runner, domain, trust_tools_code=self.trust_tools_code, **options)

        return SopBenchToolBox(self.pack.tools, domain.tool_names, recording=self.recording,
                               runner_factory=factory, mode=self.tool_mode)

    def _first_messages(self, task):
        """Upstream style: one user message with the SOP and the row, no system message."""
        if self.prompt_style != "upstream":
            return super()._first_messages(task)
        domain = self.registered.domain
        return [{"role": "user", "content": upstream_user_message(domain.sop, domain.raw_row(task.index), domain.input_columns)}]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = super().reset(seed=seed, options=options)
        domain = self.registered.domain
        info["sopbench"] = {
            "inputs_rule": domain.inputs_rule,
            "shown_columns": list(domain.input_columns),
            "hidden_columns": list(domain.hidden_columns),
            "ground_truth_columns": list(domain.output_columns),
            "tool_mode": self.tool_mode,
            "prompt_style": self.prompt_style,
            "pandas_version": self.pandas_version,
            "recording_pandas_version": self.recording_pandas_version,
            "recording_drift": self.drift,
            "notes": list(domain.problems) + list(self.registered.notes) + self._pandas_notes,
        }
        return observation, info

    def step(self, action: Any):
        if self.prompt_style == "upstream" and self._task is not None and not self._done:
            action = self._final_decision_as_submit(action)
        return super().step(action)

    def _final_decision_as_submit(self, action: Any) -> Any:
        """Upstream style: a reply with no tool call that carries ``<final_decision>`` is the submission."""
        reply = parse_reply(action)
        if reply.calls or reply.error is not None:
            return action
        text = action if isinstance(action, str) else (action.get("content") or "")
        decision = final_decision(text)
        if decision is None:
            return action
        fields = self.pack.output_fields
        answer: Mapping[str, Any]
        if len(fields) == 1:
            answer = {fields[0].name: _typed(decision, fields[0].type)}
        else:
            import json

            try:
                parsed = json.loads(decision)
            except (ValueError, RecursionError):  # not JSON, an integer past the digit limit, too deep
                return action
            answer = parsed if isinstance(parsed, Mapping) else {}
        return text + "\n" + format_call(SUBMIT_TOOL, answer)


def _typed(text: str, typ: str) -> Any:
    if typ == "string":
        return text
    if typ == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if typ == "integer" and number.is_integer() else number
