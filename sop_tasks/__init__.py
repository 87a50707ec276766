"""Task sources: our authored domain packs (one folder each) and adapters for external benchmarks."""

from .pack import SPLITS, SUBMIT_TOOL, DomainPack, OutputField, Task, ToolCall, ToolError
from .registry import all_packs, get_pack, register_pack

__all__ = ["SPLITS", "SUBMIT_TOOL", "DomainPack", "OutputField", "Task", "ToolCall", "ToolError",
           "all_packs", "get_pack", "register_pack"]
