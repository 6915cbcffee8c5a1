"""The binding covers the whole exported API, with the C layouts."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from typing import Dict, List, Tuple

import pytest

import memra
from memra import _capi


def _exported(repo_root: str) -> List[str]:
    with open(os.path.join(repo_root, "lib", "libmemra.sym")) as f:
        return re.findall(r"^\s+(memra_\w+);", f.read(), re.M)


def test_every_exported_function_is_prototyped(repo_root: str, lib_path: str) -> None:
    names = _exported(repo_root)
    assert len(names) > 100
    assert sorted(names) == sorted(_capi.PROTOTYPES)
    lib = _capi.lib()
    for name in names:
        f = getattr(lib, name)
        assert f.argtypes is not None, name


def test_every_exported_function_is_wrapped(repo_root: str) -> None:
    """Each C function is called somewhere in the package's Python wrappers."""
    pkg = os.path.dirname(memra.__file__)
    text = ""
    for fn in os.listdir(pkg):
        if fn.endswith(".py") and fn != "_capi.py":
            with open(os.path.join(pkg, fn)) as f:
                text += f.read()
    unwrapped = [n for n in _exported(repo_root) if n not in text]
    assert unwrapped == []


def _struct_fields(cls: type) -> List[Tuple[str, int, int]]:
    out = []
    for name, _t in cls._fields_:  # type: ignore[attr-defined]
        d = getattr(cls, name)
        out.append((name.rstrip("_"), d.offset, d.size))
    return out


def test_struct_layouts_match_c(repo_root: str, tmp_path: "os.PathLike[str]") -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to compare the struct layouts with")
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <memra/memra.h>", "int main(void) {"]
    expect: Dict[str, int] = {}
    for cname, cls in _capi.STRUCTS.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        expect[cname] = ctypes.sizeof(cls)
        for field, off, size in _struct_fields(cls):
            key = "%s.%s" % (cname, field)
            lines.append(
                'printf("%s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                % (key, cname, field, cname, field)
            )
    lines += ["return 0;", "}"]
    src = os.path.join(str(tmp_path), "layout.c")
    exe = os.path.join(str(tmp_path), "layout")
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", os.path.join(repo_root, "include"), src, "-o", exe], check=True)
    out = subprocess.run([exe], check=True, stdout=subprocess.PIPE).stdout.decode()
    got = {}
    for line in out.splitlines():
        parts = line.split()
        got[parts[0]] = tuple(int(x) for x in parts[1:])
    for cname, cls in _capi.STRUCTS.items():
        assert got[cname] == (ctypes.sizeof(cls),), cname
        for field, off, size in _struct_fields(cls):
            assert got["%s.%s" % (cname, field)] == (off, size), (cname, field)


def test_constants_match_headers(repo_root: str) -> None:
    defines: Dict[str, str] = {}
    for fn in os.listdir(os.path.join(repo_root, "include", "memra")):
        if fn.endswith(".h"):
            with open(os.path.join(repo_root, "include", "memra", fn)) as f:
                for m in re.finditer(r"^#define MEMRA_(\w+)\s+(\(1u << \d+\)|\d+u?)(?=\s|$)", f.read(), re.M):
                    defines[m.group(1)] = m.group(2)
    for name, text in defines.items():
        if name.startswith("VERSION") or not hasattr(_capi, name):
            continue
        shift = re.match(r"\(1u << (\d+)\)", text)
        value = 1 << int(shift.group(1)) if shift else int(text.rstrip("u"))
        assert getattr(_capi, name) == value, name
    for cname, pyname in [("MAX_PP_STAGES", "MAX_PP_STAGES"), ("TOKENIZE_PARSE_SPECIAL", "TOKENIZE_PARSE_SPECIAL")]:
        assert cname in defines and hasattr(_capi, pyname)


def test_status_enum_matches_library(lib_path: str) -> None:
    for st in memra.Status:
        assert memra.status_name(int(st)) == st.name


def test_default_params_set_size(lib_path: str) -> None:
    for p in [
        memra.engine_default_params(),
        memra.model_default_params(),
        memra.sampler_default_params(),
        memra.kernel_check_default_params(),
        memra.pp_parity_default_params(),
        memra.margin_default_params(),
    ]:
        assert p.size == ctypes.sizeof(p)
    assert memra.engine_default_params().fast == -1
    assert memra.model_default_params().shard == -1
    assert memra.pp_parity_default_params().n_stages == 2


def test_version(lib_path: str) -> None:
    v = memra.version()
    major, minor, patch = (int(x) for x in v.split("."))
    assert memra.version_number() == major * 10000 + minor * 100 + patch
    assert major == _capi.ABI_MAJOR


def test_type_tables(lib_path: str) -> None:
    assert memra.type_name(memra.TensorType.Q8_0) == "Q8_0"
    assert memra.type_block_size(memra.TensorType.Q8_0) == 32
    assert memra.type_block_bytes(memra.TensorType.Q8_0) == 34
    assert memra.type_name(5) is None and memra.type_block_size(5) == 0
    assert memra.gguf_type_name(memra.GgufType.UINT32) == "UINT32"
    assert memra.gguf_type_name(99) is None
    for t in memra.TensorType:
        assert memra.type_name(t) is not None


def test_library_path_from_environment(repo_root: str) -> None:
    """MEMRA_LIBRARY as a file or a folder; a bad one is a clear error."""
    import sys

    lib = os.environ.get("MEMRA_LIBRARY")
    if not lib:
        pytest.skip("MEMRA_LIBRARY not set")
    code = "import memra; print(memra.load_library())"
    pyroot = os.path.dirname(os.path.dirname(memra.__file__))
    env = dict(os.environ, PYTHONPATH=pyroot, MEMRA_LIBRARY=os.path.dirname(os.path.abspath(lib)))
    out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, check=True)
    assert out.stdout.decode().strip().endswith(".so") or ".so." in out.stdout.decode()
    env["MEMRA_LIBRARY"] = "/nonexistent/libmemra.so"
    r = subprocess.run([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    assert r.returncode != 0 and b"MEMRA_LIBRARY" in r.stderr
    # without MEMRA_LIBRARY: pkg-config (a build tree's memra-uninstalled.pc), then the loader
    build = os.path.dirname(os.path.abspath(lib))
    del env["MEMRA_LIBRARY"]
    env["LD_LIBRARY_PATH"] = ""
    uninstalled = os.path.join(build, "meson-uninstalled")
    if shutil.which("pkg-config") and os.path.isdir(uninstalled):
        env["PKG_CONFIG_PATH"] = uninstalled
        out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, check=True)
        assert os.path.realpath(os.path.dirname(out.stdout.decode().strip())) == os.path.realpath(build)
    env["PKG_CONFIG_PATH"] = "/nonexistent"
    env["PKG_CONFIG_LIBDIR"] = "/nonexistent"
    env["LD_LIBRARY_PATH"] = build
    out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, check=True)
    assert out.stdout.decode().strip().startswith("libmemra.so")


def test_package_type_checks() -> None:
    """mypy --strict is clean on the package (skipped where mypy is not installed)."""
    import sys

    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy not installed (apt-get install python3-mypy)")
    pkg = os.path.dirname(memra.__file__)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, pkg],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert r.returncode == 0, r.stdout.decode()
