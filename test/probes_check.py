#!/usr/bin/env python3
"""Hostile arguments to the probes: each must end with exit 2 and a message,
quickly, instead of running on a misread value, reading without bound or
reporting an empty run.

1. memra-argmax-margin-probe: a prompt file without end (/dev/zero) is
   refused at its size limit; token ids beyond int32 ("4294967297", which
   once became 1) and junk between digits ("12-3") are refused.
2. memra-kernel-check: numbers are parsed strictly (--device=abc was 0);
   a --test name that matches no case is an error, not "FAILED 0 of 0"
   (run with MEMRA_KERNEL_CHECK_CPU=1, the harness's CPU self-check, so
   that it gets that far without a GPU).

usage: probes_check.py ARGMAX_PROBE KERNEL_CHECK FIXTURES TMPDIR
"""
import os
import resource
import subprocess
import sys


def limit_memory():
    # a probe that reads without bound fails here instead of taking the machine
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def run(cmd, env=None):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=limit_memory,
                           env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return r.returncode, r.stdout + r.stderr


def main():
    argmax, kcheck, fixtures, tmp = sys.argv[1:5]
    failed = 0

    def expect(name, cmd, needle, env=None):
        nonlocal failed
        rc, out = run(cmd, env)
        ok = rc == 2 and needle in out
        print("%-40s exit %s %s" % (name, rc, "ok" if ok else "FAILED: want exit 2 naming '%s'\n%s" % (needle, out)))
        failed += not ok

    model = os.path.join(fixtures, "models", "llama-dense.f32.gguf")
    if not os.path.exists(model):
        model = "/nonexistent/model.gguf"  # the prompt errors come before the model is opened
    expect("argmax: /dev/zero prompt", [argmax, model, "/dev/zero"], "larger than")
    for name, text in [("id beyond int32", "5 4294967297 7"), ("id below int32", "-2147483649"),
                       ("junk between digits", "12-3 4"), ("double sign", "--5")]:
        path = os.path.join(tmp, "probes-check-%d.txt" % os.getpid())
        with open(path, "w") as f:
            f.write(text)
        expect("argmax: " + name, [argmax, model, path], "token id")
        os.remove(path)

    for arg in ["--device=abc", "--device=-1", "--device=1x", "--seed=-1", "--seed=99999999999999999999",
                "--iters=0", "--iters=5x", "--iters="]:
        expect("kernel-check: " + arg, [kcheck, arg], "bad number")
    expect("kernel-check: --test=zzz", [kcheck, "--test=zzz", "--small"], "no case",
           env={"MEMRA_KERNEL_CHECK_CPU": "1"})
    # the harness's own env knob parses like every other (it once took any text but "1" as off)
    expect("kernel-check: MEMRA_KERNEL_CHECK_CPU=yes", [kcheck, "--small"], "MEMRA_KERNEL_CHECK_CPU",
           env={"MEMRA_KERNEL_CHECK_CPU": "yes"})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
