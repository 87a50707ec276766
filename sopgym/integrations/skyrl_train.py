"""SkyRL's own trainer on sopgym envs: SkyRL's ``main_base`` experiment, with sopgym's envs registered in
the process that runs SkyRL's generator and the length pre-flight done before Ray starts.

Command line (every argument but sopgym's own options is a SkyRL override, as ``main_base`` takes them)::

    python -m sopgym.integrations.skyrl_train [--server ENV_ID=URL ...] [--no-preflight] \\
        data.train_data="['runs/skyrl/train.parquet']" trainer.policy.model.path=... generator.max_input_length=...

``configs/integrations/skyrl-gpu.sh`` is the launch recipe (rows written by :func:`~sopgym.integrations.skyrl.skyrl_rows`,
the overrides in ``configs/integrations/skyrl-gpu.overrides``). What it adds to ``main_base``:

* **Envs where the generator runs.** ``BasePPOExp`` builds SkyRL's generator (which calls
  ``skyrl_gym.make`` for each row's ``env_class``) in the Ray task of its entrypoint, not in the
  launching process, so registering sopgym's ids there (``register_skyrl_envs``) is what makes them
  known. The env ids are the ``env_class`` column of the training and validation rows.
* **Lengths checked first.** SkyRL drops dataset rows longer than ``trainer.max_prompt_length`` (its
  ``PromptDataset`` filter: a cap below every first prompt leaves no data) and ends an episode whose
  input passes ``generator.max_input_length`` (the whole conversation at each turn). Both are checked
  against the first prompt SkyRL really sends, measured per env with the policy's tokenizer
  (:func:`~sopgym.integrations.lengths.check_prompt_length`: the SOP, the task and the tool schemas),
  and a config below it is refused with the value to set, before Ray or any model starts.

What blocks running it on CPU: SkyRL's trainer needs its vLLM (or SGLang) inference engines and its
FSDP workers; neither runs on a CPU-only host. The tests (``tox -e skyrl``) check the recipe's overrides
against the pinned SkyRL's own config and validation, the pre-flight, and the registration in the
entrypoint's process; docs/integrations.md says what was run.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["env_rows", "preflight", "run_experiment", "main"]


def env_rows(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The ``env_class`` and ``env_kwargs`` of every row of the parquet files ``paths`` (as ``skyrl_rows`` writes them).

    Raises:
        ValueError: a file without an ``env_class`` column.
    """
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in paths:
        table = pq.read_table(path)
        if "env_class" not in table.column_names:
            raise ValueError(f"{path}: expected SkyRL rows with an env_class column (sopgym.integrations.skyrl.skyrl_rows), "
                             f"got columns {table.column_names}")
        kwargs = table.column("env_kwargs").to_pylist() if "env_kwargs" in table.column_names else [None] * table.num_rows
        rows += [{"env_class": env, "env_kwargs": json.loads(k) if k else {}} for env, k in zip(table.column("env_class").to_pylist(), kwargs)]
    return rows


def _data_paths(cfg) -> list[str]:
    return [str(p) for p in list(cfg.data.train_data or []) + list(cfg.data.val_data or [])]


def preflight(cfg, tokenizer, *, servers: Mapping[str, Any] | None = None, num_tasks: int = 16) -> dict[str, int]:
    """Refuse ``cfg`` if ``trainer.max_prompt_length`` or ``generator.max_input_length`` is below an env's first prompt.

    The envs and their kwargs are those of the config's data files. Returns ``env_id -> longest first prompt``.

    Raises:
        ValueError: naming the setting, the env, its longest first prompt and the value to set.
    """
    from .lengths import first_prompt_lengths, refuse_short_cap

    by_env: dict[str, dict[str, Any]] = {}
    for row in env_rows(_data_paths(cfg)):
        by_env.setdefault(row["env_class"], row["env_kwargs"])
    if not by_env:
        raise ValueError(f"expected data.train_data / data.val_data to hold sopgym rows, got no rows in {_data_paths(cfg)}")
    # Each env's first prompts measured once, then held against both caps.
    longest = {env_id: max(first_prompt_lengths(env_id, tokenizer, "skyrl", num_tasks=num_tasks, env_kwargs=kwargs or None,
                                                servers=servers))
               for env_id, kwargs in sorted(by_env.items())}
    refuse_short_cap(longest, int(cfg.trainer.max_prompt_length), "trainer.max_prompt_length")
    refuse_short_cap(longest, int(cfg.generator.max_input_length or cfg.trainer.max_prompt_length), "generator.max_input_length")
    return longest


def run_experiment(cfg, env_ids: Sequence[str], servers: Mapping[str, Any] | None = None, experiment=None) -> None:
    """Register ``env_ids`` in this process, then run SkyRL's experiment (``BasePPOExp`` unless ``experiment``)."""
    from .skyrl import register_skyrl_envs

    register_skyrl_envs(list(env_ids), servers=servers)
    if experiment is None:
        from skyrl.train.entrypoints.main_base import BasePPOExp

        experiment = BasePPOExp
    experiment(cfg).run()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sopgym.integrations.skyrl_train", description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="append", default=[], metavar="ENV_ID=URL",
                        help="an env served by `sopgym serve` there (repeatable; token from $SOPGYM_SERVE_TOKEN)")
    parser.add_argument("--no-preflight", action="store_true", help="skip the length pre-flight (it loads the tokenizer here)")
    parser.add_argument("overrides", nargs="*", help="SkyRL config overrides, key.path=value")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if any("=" not in item for item in args.server):
        _parser().error(f"--server takes ENV_ID=URL, got {args.server}")
    servers = dict(item.split("=", 1) for item in args.server) if args.server else None

    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.entrypoints.main_base import validate_cfg
    from skyrl.train.utils import initialize_ray

    cfg = SkyRLTrainConfig.from_cli_overrides(args.overrides)
    validate_cfg(cfg)
    env_ids = sorted({row["env_class"] for row in env_rows(_data_paths(cfg))})
    if not args.no_preflight:
        from transformers import AutoTokenizer

        longest = preflight(cfg, AutoTokenizer.from_pretrained(cfg.trainer.policy.model.path), servers=servers)
        print(f"sopgym: longest first prompt per env (tokens): {longest}")
    initialize_ray(cfg)
    ray.get(ray.remote(num_cpus=1)(run_experiment).remote(cfg, env_ids, servers))


if __name__ == "__main__":
    main()
