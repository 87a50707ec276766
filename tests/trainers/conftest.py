import pytest
import torch

from .helpers import tiny_tokenizer


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """The tiny offline BPE tokenizer, saved once per module."""
    path = tmp_path_factory.mktemp("tok")
    tiny_tokenizer().save_pretrained(str(path))
    return str(path)

