"""Public entry to the SOP-Bench adapter: ``sopgym.sopbench.register(path)``.

A thin re-export of :mod:`sopgym.sop_tasks.sopbench`; see docs/sopbench.md.
"""

from sopgym.sop_tasks.sopbench import check, load, record, register, registered

__all__ = ["register", "load", "check", "record", "registered"]
