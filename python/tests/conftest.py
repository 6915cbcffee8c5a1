"""Fixtures: the library (MEMRA_LIBRARY, else pkg-config or the loader) and the
bundled default model ($MEMRA_DEFAULT_MODEL, else test/data/default.gguf of
this source tree; a small qwen3 model that runs on the CPU engine)."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)
sys.path.insert(0, PYROOT)  # the package of this tree, installed or not

import memra  # noqa: E402


def default_model_path() -> str:
    return os.environ.get("MEMRA_DEFAULT_MODEL") or os.path.join(REPO, "test", "data", "default.gguf")


@pytest.fixture(scope="session")
def model_path() -> str:
    path = default_model_path()
    assert os.path.exists(path), "default model missing: %s" % path
    return path


@pytest.fixture(scope="session")
def lib_path() -> str:
    return memra.load_library()


@pytest.fixture()
def model(model_path: str, lib_path: str) -> Iterator[memra.Model]:
    with memra.Model(model_path) as m:
        yield m


@pytest.fixture()
def repo_root() -> str:
    return REPO
