"""sopgym: trustworthy multi-turn, tool-calling Gymnasium environments built around Standard Operating Procedures.

``import sopgym`` registers ``sopgym/<Domain>-v<N>`` for every authored domain, so that
``gymnasium.make("sopgym/WarehouseReceiving-v0")`` works; ``gymnasium.make("sopgym:sopgym/...")``
imports this module first and needs no import. It also registers ``sopgym/Remote-v0``, an env whose
episodes run on a sopgym env server (``gymnasium.make("sopgym/Remote-v0", url=...)``; see
:mod:`sopgym.integrations.remote_env`).
"""

import gymnasium as _gym

from sopgym.envs import SOPEnv, Status, register_envs, registered_env_ids

__version__ = "0.1.0"
__all__ = ["SOPEnv", "Status", "register_envs", "registered_env_ids", "__version__"]

register_envs()

# A client env for envs served on other hosts (`sopgym serve`); its module and `websockets` load only on make().
if "sopgym/Remote-v0" not in _gym.registry:
    _gym.register(id="sopgym/Remote-v0", entry_point="sopgym.integrations.remote_env:RemoteSOPEnv")


def _register_sopbench_from_env() -> None:
    """If ``SOPBENCH_DIR`` is set, register its SOP-Bench domains; never fail the import (warn instead).
    ``SOPBENCH_ALLOW_TRAINING`` (comma-separated domain names) is the explicit override of licences the
    matcher cannot settle (docs/sopbench.md)."""
    import os

    path = os.environ.get("SOPBENCH_DIR")
    if not path:
        return
    import warnings

    allow = [name.strip() for name in os.environ.get("SOPBENCH_ALLOW_TRAINING", "").split(",") if name.strip()]
    try:
        from sopgym.sopbench import register as _register

        report = _register(path, allow_training=allow)
    except Exception as exc:  # noqa: BLE001 - a broken checkout must not break `import sopgym`
        warnings.warn(f"SOPBENCH_DIR={path!r}: SOP-Bench domains not registered: {type(exc).__name__}: {exc}", stacklevel=2)
        return
    for name, why in report.skipped.items():
        warnings.warn(f"SOPBENCH_DIR={path!r}: domain {name!r} not loaded: {why}", stacklevel=2)


_register_sopbench_from_env()
