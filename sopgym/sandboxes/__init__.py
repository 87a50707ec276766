"""Tool backends: replay, stateful (in-process SQLite or Docker) and verifiable tiers.

Never imports gymnasium, envs or trainers: a backend knows tools and state only.
"""

from .base import (
    ERROR_KEY,
    CodeRunner,
    ExecResult,
    Outcome,
    SandboxEpisode,
    SandboxError,
    SandboxMisuse,
    SandboxTimeout,
    SandboxUnavailable,
    StatefulBackend,
    StatefulProgram,
    Tier,
    ToolResult,
    ToolSpec,
    canonical_args,
)
from .inprocess import InProcessBackend
from .schema import SchemaError, validate
from .toolbox import ToolBox

__all__ = [
    "ERROR_KEY", "CodeRunner", "SandboxEpisode", "ExecResult", "InProcessBackend", "Outcome",
    "SandboxError", "SandboxMisuse", "SandboxTimeout", "SandboxUnavailable", "SchemaError", "StatefulBackend",
    "StatefulProgram", "Tier", "ToolBox", "ToolResult", "ToolSpec", "canonical_args", "validate",
]
