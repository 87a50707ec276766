"""AircraftPreflightInspection domain pack (SOP APF-3). See ``domain.py``."""

from .domain import PACK

__all__ = ["PACK"]
