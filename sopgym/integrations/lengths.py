"""Length pre-flights: the first prompt of each env as a library really sends it, measured with the user's tokenizer.

Each library caps the prompt (verl's ``rollout.prompt_length``, SkyRL's ``generator.max_input_length``)
and refuses or crashes mid-run when a prompt is longer. The prompt the model really sees is longer
than the dataset's messages: the tool schemas are rendered into it (by the chat template with
``tools=`` for verl and TRL's ``rollout_func``, appended to the system message by the SkyRL adapter's
``init``). :func:`first_prompt_lengths` measures it per task as each adapter builds it;
:func:`check_prompt_length` refuses a config before anything runs, naming the number to set;
``python -m sopgym.integrations.lengths`` prints the figures per env.

Command line::

    python -m sopgym.integrations.lengths --tokenizer PATH --library verl --env sopgym/WarehouseReceiving-v0 [--tasks 16]
        [--server sopgym/WarehouseReceiving-v0=http://envhost:8000]   # an env served elsewhere (token: $SOPGYM_SERVE_TOKEN)
        [--check 4096]   # exit 2, naming the value to set, if a first prompt is longer (a launch script's pre-flight)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from ._common import system_with_tools, task_rows

__all__ = ["LIBRARIES", "first_prompt_lengths", "recommended_prompt_length", "refuse_short_cap", "check_prompt_length", "main"]

#: How each adapter renders the first prompt: ``tools=`` through the chat template, or in the system message.
LIBRARIES = {"verl": "template", "trl-rollout-func": "template", "skyrl": "system-message"}


def _render(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]], library: str) -> int:
    if LIBRARIES[library] == "template":
        text = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=True)
    else:
        text = tokenizer.apply_chat_template(system_with_tools(messages, tools), tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def first_prompt_lengths(env_id: str, tokenizer, library: str, *, num_tasks: int = 16, split: str = "train",
                         env_kwargs: Mapping[str, Any] | None = None, servers: Mapping[str, Any] | None = None) -> list[int]:
    """Tokens of the first prompt of tasks ``0..num_tasks-1`` of ``split``, as ``library``'s adapter sends it
    (``servers``: ``{env_id: URL}`` of envs served elsewhere, as the adapters take it).

    Raises:
        ValueError: an unknown library.
    """
    if library not in LIBRARIES:
        raise ValueError(f"library must be one of {sorted(LIBRARIES)}, got {library!r}")
    from ._common import make_env

    env = make_env(env_id, env_kwargs, servers)
    try:
        _, info = env.reset(seed=0)
        tools = info["tools"]
    finally:
        env.close()
    rows = task_rows(env_id, split, num_tasks, env_kwargs=env_kwargs, allow_restricted=True, servers=servers)
    return [_render(tokenizer, [dict(m) for m in row["prompt"]], tools, library) for row in rows]


def recommended_prompt_length(longest: int, headroom: float = 0.25, multiple: int = 256) -> int:
    """The longest measured prompt plus ``headroom`` (other tasks' inputs run longer), rounded up to ``multiple``."""
    want = int(longest * (1 + headroom))
    return -(-want // multiple) * multiple


def refuse_short_cap(longest: Mapping[str, int], limit: int, setting: str) -> None:
    """Refuse a prompt cap ``setting=limit`` below an env's longest first prompt (``longest``: env -> tokens).

    Raises:
        ValueError: naming the envs, their longest first prompt and the value to set.
    """
    over = {e: n for e, n in longest.items() if n > limit}
    if over:
        worst = max(over.values())
        raise ValueError(
            f"{setting}={limit} is shorter than the first prompt of {sorted(over)} (longest {worst} tokens with this "
            f"tokenizer, tool schemas included); expected at least that: set {setting}={recommended_prompt_length(worst)}"
        )


def check_prompt_length(env_ids: Sequence[str], tokenizer, library: str, limit: int, setting: str, **kwargs: Any) -> dict[str, int]:
    """Refuse a config whose prompt cap is below an env's measured first prompt. Returns ``env -> longest``.

    Raises:
        ValueError: naming the env, its longest first prompt and the value to set.
    """
    longest = {env_id: max(first_prompt_lengths(env_id, tokenizer, library, **kwargs)) for env_id in env_ids}
    refuse_short_cap(longest, limit, setting)
    return longest


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sopgym.integrations.lengths", description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer folder or hub id (AutoTokenizer.from_pretrained)")
    parser.add_argument("--library", required=True, choices=sorted(LIBRARIES))
    parser.add_argument("--env", action="append", required=True, help="an env id (repeatable)")
    parser.add_argument("--tasks", type=int, default=16, help="train tasks measured per env")
    parser.add_argument("--server", action="append", default=[], metavar="ENV_ID=URL",
                        help="an env served by `sopgym serve` there (repeatable; token from $SOPGYM_SERVE_TOKEN)")
    parser.add_argument("--check", type=int, metavar="N",
                        help="the library's prompt cap: exit 2 with the value to set if a first prompt is longer")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.server):
        parser.error(f"--server takes ENV_ID=URL, got {args.server}")
    servers = dict(item.split("=", 1) for item in args.server) if args.server else None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    setting = {"verl": "actor_rollout_ref.rollout.prompt_length", "skyrl": "generator.max_input_length",
               "trl-rollout-func": "(the prompt is not capped by TRL)"}[args.library]
    print(f"{'env':<44} {'median':>7} {'longest':>8} {'set ' + setting}")
    longest: dict[str, int] = {}
    for env_id in args.env:
        sizes = sorted(first_prompt_lengths(env_id, tokenizer, args.library, num_tasks=args.tasks, servers=servers))
        print(f"{env_id:<44} {sizes[len(sizes) // 2]:>7} {sizes[-1]:>8} {recommended_prompt_length(sizes[-1])}")
        longest[env_id] = sizes[-1]
    if args.check is not None:
        try:
            refuse_short_cap(longest, args.check, setting)
        except ValueError as exc:
            parser.exit(2, f"error: {exc}\n")


if __name__ == "__main__":
    main()
