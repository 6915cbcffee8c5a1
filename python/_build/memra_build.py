"""A PEP 517 build backend in the standard library only, so that
`pip install ./python` works offline (no setuptools download into pip's
isolated build environment). It packs memra/ into a pure-Python wheel
(py3-none-any), an editable wheel (a .pth file naming this folder) or an
sdist, with metadata from pyproject.toml's [project] table."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "memra"


def _project() -> Dict[str, Any]:
    """The [project] table of pyproject.toml (tomllib on 3.11+, else the few
    simple keys this file uses, read line by line)."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib

        with open(path, "rb") as f:
            return dict(tomllib.load(f)["project"])
    except ImportError:
        pass
    out: Dict[str, Any] = {}
    section = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*\[(.+)\]\s*$", line)
            if m:
                section = m.group(1).strip()
                continue
            m = re.match(r'^\s*([A-Za-z0-9_-]+)\s*=\s*"(.*)"\s*$', line)
            if section == "project" and m:
                out[m.group(1)] = m.group(2)
            m = re.match(r'^\s*license\s*=\s*\{\s*text\s*=\s*"(.*)"\s*\}\s*$', line)
            if section == "project" and m:
                out["license"] = {"text": m.group(1)}
    return out


def _name_version() -> Tuple[str, str]:
    p = _project()
    return str(p["name"]), str(p["version"])


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % p["name"],
        "Version: %s" % p["version"],
    ]
    if p.get("description"):
        lines.append("Summary: %s" % p["description"])
    if isinstance(p.get("license"), dict) and p["license"].get("text"):
        lines.append("License: %s" % p["license"]["text"])
    if p.get("requires-python"):
        lines.append("Requires-Python: %s" % p["requires-python"])
    for c in p.get("classifiers", []) or []:
        lines.append("Classifier: %s" % c)
    for extra, reqs in sorted((p.get("optional-dependencies") or {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        for r in reqs:
            lines.append('Requires-Dist: %s; extra == "%s"' % (r, extra))
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[str]:
    """Paths of the package relative to ROOT (sources and py.typed; no caches)."""
    files: List[str] = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                files.append(os.path.relpath(os.path.join(dirpath, fn), ROOT))
    return files


def _dist_info() -> str:
    name, version = _name_version()
    return "%s-%s.dist-info" % (name.replace("-", "_"), version)


def _dist_info_files() -> Dict[str, bytes]:
    di = _dist_info()
    wheel = "Wheel-Version: 1.0\nGenerator: memra_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {
        di + "/METADATA": _metadata().encode(),
        di + "/WHEEL": wheel.encode(),
        di + "/top_level.txt": (PACKAGE + "\n").encode(),
    }


def _write_wheel(wheel_directory: str, contents: Dict[str, bytes]) -> str:
    name, version = _name_version()
    filename = "%s-%s-py3-none-any.whl" % (name.replace("-", "_"), version)
    record: List[str] = []
    path = os.path.join(wheel_directory, filename)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in contents.items():
            zi = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        rec = _dist_info() + "/RECORD"
        record.append(rec + ",,")
        zi = zipfile.ZipInfo(rec, date_time=(1980, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zf.writestr(zi, "\n".join(record) + "\n")
    return filename


# ---- PEP 517 / PEP 660 hooks -------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    for arc, data in _dist_info_files().items():
        out = os.path.join(metadata_directory, arc)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(data)
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    contents: Dict[str, bytes] = {}
    for rel in _package_files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            contents[rel.replace(os.sep, "/")] = f.read()
    contents.update(_dist_info_files())
    return _write_wheel(wheel_directory, contents)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    contents = {"__editable__.%s.pth" % PACKAGE: (ROOT + "\n").encode()}
    contents.update(_dist_info_files())
    return _write_wheel(wheel_directory, contents)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _name_version()
    base = "%s-%s" % (name.replace("-", "_"), version)
    files = ["pyproject.toml", "README.md"] + _package_files()
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "_build")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        files += [os.path.relpath(os.path.join(dirpath, fn), ROOT) for fn in sorted(filenames) if fn.endswith(".py")]
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel in files:
            full = os.path.join(ROOT, rel)
            if os.path.exists(full):
                tf.add(full, arcname=base + "/" + rel.replace(os.sep, "/"), recursive=False)
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg_info)
        ti.mtime = int(time.time())
        ti.mode = 0o644
        tf.addfile(ti, io.BytesIO(pkg_info))
    return base + ".tar.gz"
