#!/usr/bin/env python3
"""The command lines of every program in examples/ and probes/ (one parser,
examples/cli.c):

1. --help exits 0 and prints the usage, the options and an example, on
   stdout; --version exits 0 and prints "NAME (memra) VERSION".
2. A bad number exits 2 with one "NAME: OPTION: bad number ..." line and a
   pointer to --help on stderr, before anything is loaded; so do trailing
   text, overflow, an empty value, a leading blank, NaN and out-of-range
   values.
3. An unknown option, a missing value and a value given to a flag exit 2.
4. The spellings scripts use keep working: --opt=value, an option after
   an operand, key=value operands of the probes.

usage: cli_check.py VERSION DEFAULT_MODEL TMPDIR PROGRAM...
"""
import json
import os
import subprocess
import sys

# A command line per program with one bad number in it (None: the program
# takes no numbers). Each must fail before a model or file is opened.
BAD_NUMBER = {
    "memra-run": ["-n", "abc"],
    "memra-logits": ["--tokens", "1 2", "--mode", "decode", "--out", "/dev/null", "--chunk", "0"],
    "memra-tokenize": None,
    "memra-gguf-info": None,
    "memra-chat-template": None,
    "memra-synth": ["--model", "qwen3.5-0.8b", "--dry-run", "--layers", "2x"],
    "memra-bench": ["-m", "/nonexistent.gguf", "-p", "abc"],
    "memra-bench-tokenize": ["-r", "0"],
    "memra-server": ["-m", "/nonexistent.gguf", "--parallel", "4x"],
    "memra-batch": ["-f", "/nonexistent.txt", "-n", "0"],
    "memra-kernel-check": ["--iters=5x"],
    "memra-ppn-gate": ["/nonexistent.gguf", "P=1x"],
    "memra-argmax-margin-probe": ["/nonexistent.gguf", "/nonexistent.txt", "window=abc"],
}

failed = 0


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def check(label, ok, detail=""):
    global failed
    print("%-60s %s" % (label, "ok" if ok else "FAILED " + detail))
    failed += not ok


def expect_usage_error(label, prog, name, args, needle):
    rc, out, err = run([prog] + args)
    lines = err.strip().splitlines()
    ok = (rc == 2 and not out and len(lines) == 2 and lines[0].startswith(name + ": ") and needle in lines[0]
          and "--help" in lines[1])
    check("%s %s" % (name, label), ok, "want exit 2 and '%s: ...%s...' on stderr; got exit %s\nstdout: %s\nstderr: %s"
          % (name, needle, rc, out[:500], err[:500]))


def main():
    version, model, tmp = sys.argv[1:4]
    progs = sys.argv[4:]
    names = {}
    for prog in progs:
        name = os.path.basename(prog)
        names[name] = prog
        rc, out, err = run([prog, "--help"])
        ok = (rc == 0 and out.startswith("usage: " + name) and "--help" in out and "--version" in out
              and "example" in out and "default" in out)
        check(name + " --help", ok, "exit %s\n%s%s" % (rc, out[:800], err[:500]))
        rc2, out2, _ = run([prog, "-h"])
        check(name + " -h", rc2 == 0 and out2 == out)
        rc, out, err = run([prog, "--version"])
        check(name + " --version", rc == 0 and out == "%s (memra) %s\n" % (name, version), "exit %s: %r" % (rc, out))
        expect_usage_error("--no-such-option", prog, name, ["--no-such-option"], "--no-such-option")
        expect_usage_error("-Z", prog, name, ["-Z"], "-Z")
        expect_usage_error("--help=x (value to a flag)", prog, name, ["--help=x"], "takes no value")
        bad = BAD_NUMBER[name]
        if bad is None:
            print("%-60s %s" % (name + " bad number", "n/a (no numeric options)"))
        else:
            expect_usage_error("bad number " + " ".join(bad[-2:]), prog, name, bad, "bad number")

    # every kind of bad number, on integer, unsigned, float and list options
    run_ = names["memra-run"]
    for v in ["12x", "", " 5", "1e3", "0x10", "99999999999999999999", "-1", "1048577", "+"]:
        expect_usage_error("-n %r" % v, run_, "memra-run", ["-n", v], "bad number")
    for v in ["nan", "inf", "-0.5", "1e7", "0.8x", "."]:
        expect_usage_error("--temp %r" % v, run_, "memra-run", ["--temp", v], "bad number")
    for v in ["-1", "18446744073709551616", "1.5"]:
        expect_usage_error("--seed %r" % v, run_, "memra-run", ["--seed", v], "bad number")
    expect_usage_error("--top-p 0 (the sampler's range)", run_, "memra-run", ["--top-p", "0"], "top_p")
    expect_usage_error("-n (no value)", run_, "memra-run", ["-n"], "needs a value")
    expect_usage_error("--model (no value)", run_, "memra-run", ["--model"], "needs a value")
    expect_usage_error("an operand", run_, "memra-run", ["prompt"], "unexpected argument")
    bench = names["memra-bench"]
    for v in ["1,,2", "1,", ",1", "1,2,3,4,5,6,7,8,9", "-5", "512x"]:
        expect_usage_error("-p %r" % v, bench, "memra-bench", ["-m", "x", "-p", v], "bad number")
    expect_usage_error("no -m", bench, "memra-bench", [], "no model")
    kc = names["memra-kernel-check"]
    for a in ["--device=abc", "--device=-1", "--seed=-1", "--iters=0", "--iters="]:
        expect_usage_error(a, kc, "memra-kernel-check", [a], "bad number")

    # spellings in use keep working
    synth = names["memra-synth"]
    rc, out, err = run([synth, "--model=qwen3.5-0.8b", "--type=q8_0", "--layers=2", "--vocab=1024", "--dry-run"])
    try:
        ok = rc == 0 and json.loads(out)["layers"] == 2
    except ValueError:
        ok = False
    check("memra-synth --model=NAME --layers=2 --dry-run", ok, "exit %s\n%s%s" % (rc, out, err))
    rc, out, err = run([names["memra-gguf-info"], model, "--json"])
    try:
        ok = rc == 0 and "general.architecture" in json.loads(out)["kv"]
    except ValueError:
        ok = False
    check("memra-gguf-info FILE --json (option after the operand)", ok, "exit %s\n%s" % (rc, err))
    rc, out, err = run([run_, "-m", model, "-p", "Hello", "-n", "3", "--temp", "0", "-t", "1"])
    check("memra-run -m MODEL -p TEXT -n 3 --temp 0", rc == 0 and out.startswith("Hello") and "decode:" in err
          and "load:" in err, "exit %s\n%s%s" % (rc, out, err))
    path = os.path.join(tmp, "cli-check-%d.txt" % os.getpid())
    with open(path, "w") as f:
        f.write("Hello")
    rc2, out2, err2 = run([run_, "-m", model, "-f", path, "-n", "3", "--temp", "0", "-t", "1"])
    check("memra-run -f FILE gives what -p gives", rc2 == 0 and out2 == out, "exit %s\n%s%s" % (rc2, out2, err2))
    rc2, out2, err2 = run([run_, "-m", model, "-f", "-", "-n", "3", "--temp", "0", "-t", "1"], stdin="Hello")
    check("memra-run -f - (stdin)", rc2 == 0 and out2 == out, "exit %s\n%s%s" % (rc2, out2, err2))
    rc2, out2, err2 = run([run_, "-m", model, "-f", path, "-n", "8", "-c", "4", "--temp", "0", "-t", "1"])
    check("memra-run -c stops at a full context", rc2 == 0 and "context is full" in err2, "exit %s\n%s" % (rc2, err2))
    rc2, out2, err2 = run([run_, "-m", model, "-p", "Hello world and more words", "-c", "2", "-t", "1"])
    check("memra-run -c below the prompt fails", rc2 == 1 and "more than the context" in err2,
          "exit %s\n%s" % (rc2, err2))
    os.remove(path)
    # --chat: a reply line per turn through the model's template; -cnv is llama.cpp's spelling
    for flag in ("--chat", "-cnv"):
        rc2, out2, err2 = run([run_, "-m", model, flag, "--system", "Be brief.", "-n", "4", "--temp", "0", "-t", "1"],
                              stdin="Hello\nAnd again\n/exit\nnot read\n")
        check("memra-run %s: two turns, two reply lines" % flag, rc2 == 0 and out2.count("\n") == 2,
              "exit %s\n%r\n%s" % (rc2, out2, err2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
