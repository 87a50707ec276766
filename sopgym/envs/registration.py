"""Register every domain pack's env id with gymnasium."""

from __future__ import annotations

import gymnasium as gym

from sopgym.sop_tasks.pack import DomainPack
from sopgym.sop_tasks.registry import all_packs
from sopgym.sop_tasks.registry import register_pack as _register_source

__all__ = ["register_envs", "register_pack", "registered_env_ids"]

ENTRY_POINT = "sopgym.envs.env:SOPEnv"


def register_pack(pack: DomainPack, *, replace: bool = False) -> str:
    """Make ``gymnasium.make(pack.env_id)`` work. Returns the env id."""
    _register_source(pack, replace=replace)
    if pack.env_id not in gym.registry or replace:
        gym.register(id=pack.env_id, entry_point=ENTRY_POINT, kwargs={"domain": pack.key}, order_enforce=True)
    return pack.env_id


def register_envs() -> list[str]:
    return [register_pack(pack) for pack in all_packs()]


def registered_env_ids(namespace: str | None = None) -> list[str]:
    return sorted(p.env_id for p in all_packs(namespace))
