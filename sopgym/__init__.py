"""sopgym: trustworthy multi-turn, tool-calling Gymnasium environments built around Standard Operating Procedures.

``import sopgym`` registers ``sopgym/<Domain>-v<N>`` for every authored domain, so that
``gymnasium.make("sopgym/WarehouseReceiving-v0")`` works; ``gymnasium.make("sopgym:sopgym/...")``
imports this module first and needs no import.
"""

from sopgym.envs import SOPEnv, Status, register_envs, registered_env_ids

__version__ = "0.1.0"
__all__ = ["SOPEnv", "Status", "register_envs", "registered_env_ids", "__version__"]

register_envs()
