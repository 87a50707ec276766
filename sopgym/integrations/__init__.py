"""Adapters from sopgym's public env API to other libraries and to other hosts.

Each module imports its library only when it is used, so ``import sopgym`` still needs gymnasium and
numpy alone; nothing in ``envs``, ``sandboxes`` or ``trainers`` imports this package.
"""
