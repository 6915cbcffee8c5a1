"""The in-tree build backend (python/_build/memra_build.py) makes a valid wheel,
editable wheel and sdist with the standard library only (what pip runs offline)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import sys
import tarfile
import zipfile
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)


def _backend() -> ModuleType:
    path = os.path.join(PYROOT, "_build", "memra_build.py")
    spec = importlib.util.spec_from_file_location("memra_build", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wheel(tmp_path: "os.PathLike[str]") -> None:
    b = _backend()
    assert b.get_requires_for_build_wheel() == []
    name = b.build_wheel(str(tmp_path))
    assert name == "memra-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(str(tmp_path), name)) as zf:
        names = set(zf.namelist())
        assert {"memra/__init__.py", "memra/_capi.py", "memra/py.typed"} <= names
        assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
        meta = zf.read("memra-0.1.0.dist-info/METADATA").decode()
        assert "Name: memra\n" in meta and "Version: 0.1.0\n" in meta and "Requires-Python: >=3.8" in meta
        assert "Tag: py3-none-any" in zf.read("memra-0.1.0.dist-info/WHEEL").decode()
        record = zf.read("memra-0.1.0.dist-info/RECORD").decode().splitlines()
        assert len(record) == len(names)
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = zf.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data)
    with open(os.path.join(PYROOT, "memra", "__init__.py")) as f:
        assert '__version__ = "0.1.0"' in f.read()  # the package and pyproject agree


def test_editable_and_sdist(tmp_path: "os.PathLike[str]") -> None:
    b = _backend()
    name = b.build_editable(str(tmp_path))
    with zipfile.ZipFile(os.path.join(str(tmp_path), name)) as zf:
        assert zf.read("__editable__.memra.pth").decode().strip() == PYROOT
    sdist = b.build_sdist(str(tmp_path))
    with tarfile.open(os.path.join(str(tmp_path), sdist)) as tf:
        names = set(tf.getnames())
    assert {"memra-0.1.0/pyproject.toml", "memra-0.1.0/PKG-INFO", "memra-0.1.0/_build/memra_build.py"} <= names
    assert "memra-0.1.0/memra/py.typed" in names
    meta_dir = os.path.join(str(tmp_path), "meta")
    os.makedirs(meta_dir)
    assert b.prepare_metadata_for_build_wheel(meta_dir) == "memra-0.1.0.dist-info"
    assert sys.version_info >= (3, 8)
