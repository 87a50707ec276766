"""Which domain packs exist: every subpackage of ``sop_tasks`` that defines ``PACK`` (found on first
use, in name order), and the packs adapters (``sopgym.sopbench``) register at run time."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

from .pack import DomainPack

__all__ = ["get_pack", "all_packs", "register_pack"]

def _authored_modules() -> list[str]:
    """Every subpackage of sop_tasks, in name order (deterministic); those defining ``PACK`` are packs."""
    import sopgym.sop_tasks as root

    return sorted(m.name for m in pkgutil.iter_modules(root.__path__) if m.ispkg)

_PACKS: dict[str, DomainPack] = {}
_loaded_authored = False


def _load_authored() -> None:
    global _loaded_authored
    if _loaded_authored:
        return
    for module_name in _authored_modules():
        module = importlib.import_module(f"sopgym.sop_tasks.{module_name}")
        pack = getattr(module, "PACK", None)
        if isinstance(pack, DomainPack):
            _PACKS.setdefault(pack.key, pack)
    _loaded_authored = True


def register_pack(pack: DomainPack, *, replace: bool = False) -> None:
    """Make ``pack`` available to :func:`get_pack` (env registration is ``sopgym.envs.register_pack``)."""
    _load_authored()
    if pack.key in _PACKS and not replace and _PACKS[pack.key] is not pack:
        raise ValueError(f"a domain pack {pack.key!r} is already registered; pass replace=True")
    _PACKS[pack.key] = pack


def get_pack(key: str) -> DomainPack:
    """Look up by ``namespace/Name`` or, for authored domains, by ``Name`` alone."""
    _load_authored()
    if "/" not in key:
        key = f"sopgym/{key}"
    try:
        return _PACKS[key]
    except KeyError:
        raise KeyError(f"unknown domain {key!r}; registered: {sorted(_PACKS)}") from None


def all_packs(namespace: str | None = None) -> Iterator[DomainPack]:
    _load_authored()
    for pack in list(_PACKS.values()):
        if namespace is None or pack.namespace == namespace:
            yield pack

