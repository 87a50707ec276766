"""Authoring tools for domain packs: quality checks (``sopgym validate-domain``, ``sopgym domains-table``)
and the scaffold of a new pack (``sopgym new-domain``).

They run packs through the envs, so they live above both ``sop_tasks`` and ``envs`` (neither imports them).
"""
