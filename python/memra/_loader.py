"""Finding libmemra.so.

Order: an explicit path (memra.load_library), then the environment variable
MEMRA_LIBRARY (the library file, or a folder holding libmemra.so), then
`pkg-config --variable=libdir memra` (and the -L folders of its --libs),
then the system loader (LD_LIBRARY_PATH, ld.so.cache: libmemra.so.0,
libmemra.so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from typing import List, Optional, Tuple

ENV_VAR = "MEMRA_LIBRARY"
_NAMES = ("libmemra.so", "libmemra.so.0")


def _in_folder(folder: str) -> Optional[str]:
    for name in _NAMES:
        p = os.path.join(folder, name)
        if os.path.exists(p):
            return p
    return None


def _pkg_config(*args: str) -> Optional[str]:
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        r = subprocess.run(
            [exe, *args, "memra"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = r.stdout.decode(errors="replace").strip()
    return out if r.returncode == 0 else None


def _pkg_config_dirs() -> Optional[List[str]]:
    """The libdir of memra.pc, then its -L folders (a build tree's
    memra-uninstalled.pc names the build folder only there); None if
    pkg-config does not know memra."""
    libdir = _pkg_config("--variable=libdir")
    if libdir is None:
        return None
    dirs = [libdir] if libdir else []
    for flag in (_pkg_config("--libs-only-L") or "").split():
        if flag.startswith("-L") and flag[2:] not in dirs:
            dirs.append(flag[2:])
    return dirs


def same_file(a: str, b: str) -> Optional[bool]:
    """Whether A and B are one file (None when that cannot be told)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return None


def open_library(path: Optional[str] = None) -> Tuple[ctypes.CDLL, str]:
    """Opens libmemra; returns the handle and where it came from."""
    tried: List[str] = []
    explicit = path if path is not None else os.environ.get(ENV_VAR) or None
    if explicit is not None:
        target = explicit
        if os.path.isdir(explicit):
            found = _in_folder(explicit)
            if found is None:
                raise OSError("memra: no libmemra.so in %s (%s)" % (explicit, "argument" if path else ENV_VAR))
            target = found
        try:
            return ctypes.CDLL(os.path.abspath(target)), os.path.abspath(target)
        except OSError as e:
            raise OSError("memra: cannot load %s (%s): %s" % (target, "argument" if path else ENV_VAR, e)) from e
    dirs = _pkg_config_dirs()
    if dirs is None:
        tried.append("pkg-config knows no memra")
    for folder in dirs or []:
        found = _in_folder(folder)
        if found is None:
            tried.append("pkg-config folder %s has no libmemra.so" % folder)
            continue
        try:
            return ctypes.CDLL(found), found
        except OSError as e:
            tried.append("%s (pkg-config): %s" % (found, e))
    names = list(_NAMES)
    found_name = ctypes.util.find_library("memra")
    if found_name and found_name not in names:
        names.insert(0, found_name)
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append("%s: %s" % (name, e))
    raise OSError(
        "memra: libmemra.so not found; set %s to its path (or install memra so that pkg-config finds it). Tried: %s"
        % (ENV_VAR, "; ".join(tried))
    )
