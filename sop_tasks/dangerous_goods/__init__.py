"""DangerousGoodsClassification domain pack (SOP DG-5). See ``domain.py``."""

from .domain import PACK

__all__ = ["PACK"]
