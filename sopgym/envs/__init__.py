"""Gymnasium environments over SOP domain packs. Speaks chat messages; never imports torch."""

from sopgym.status import Status

from .env import SOPEnv, default_max_turns
from .registration import register_envs, register_pack, registered_env_ids
from .wrappers import RecordTrajectory as RecordTrajectory  # public re-export

__all__ = ["SOPEnv", "Status", "default_max_turns", "register_envs", "register_pack", "registered_env_ids"]
