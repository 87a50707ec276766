"""The sopgym trainer: SFT warm start and group-relative policy optimisation on sopgym environments.

Imports torch and transformers lazily (only its submodules do), so ``import sopgym`` stays light.
Entry point: ``sopgym train --config configs/X.yaml [key=value ...]`` (:mod:`sopgym.cli.train`).
See docs/trainer.md.
"""
