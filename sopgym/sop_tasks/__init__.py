"""Task sources: the domain-pack format (``pack``), the helpers packs are written with (``toolkit``,
``generation``), the registry, and the authored packs, one folder each (docs/adding_a_domain.md).
Adapters of external benchmarks live elsewhere (``sopgym.sopbench``) and register their packs at run time."""

from .pack import SPLITS, SUBMIT_TOOL, DomainPack, OutputField, Task, ToolCall, ToolError
from .registry import all_packs, get_pack, register_pack

__all__ = ["SPLITS", "SUBMIT_TOOL", "DomainPack", "OutputField", "Task", "ToolCall", "ToolError",
           "all_packs", "get_pack", "register_pack"]
