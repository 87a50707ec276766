"""ContentModeration domain pack (SOP CM-12). See ``domain.py``."""

from .domain import PACK

__all__ = ["PACK"]
