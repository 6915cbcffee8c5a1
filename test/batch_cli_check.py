#!/usr/bin/env python3
"""memra-batch and memra-bench --batch on the CPU with the bundled model:

1. memra-batch serves every prompt of a file, and each sequence's text is
   what memra-run prints for that prompt alone with --temp 0 (greedy), for
   several batch sizes and prompt chunks (sequences joining and retiring);
   the aggregate rate goes to stderr.
2. memra-bench --batch B,.. --json prints one object per B with positive
   aggregate prefill and decode rates.
3. Usage errors exit 2: no prompt file, B out of range, --batch with -d.

usage: batch_cli_check.py MEMRA_BATCH MEMRA_RUN MEMRA_BENCH MODEL TMPDIR
"""
import json
import os
import re
import subprocess
import sys

failed = 0

PROMPTS = [
    "The quick brown fox",
    "Once upon a time",
    "Hello world, this is a longer prompt with more tokens in it than the others, to be chunked",
    "abc",
    "1 2 3 4 5",
    "Le café est très bon.",
    "def f(x):",
]


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, errors="surrogateescape", timeout=300)
    return r.returncode, r.stdout, r.stderr


def check(label, ok, detail=""):
    global failed
    print("%-64s %s" % (label, "ok" if ok else "FAILED " + detail))
    failed += not ok


def sequences(out):
    """{index: text} from memra-batch's stdout: a header line per sequence,
    then its text up to the next header."""
    parts = re.split(r"^--- sequence (\d+): [^\n]*\n", out, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def main():
    batch, run_, bench, model, tmp = sys.argv[1:6]
    n = "6"
    alone = {}
    for i, p in enumerate(PROMPTS):
        rc, out, err = run([run_, "-m", model, "-p", p, "-n", n, "--temp", "0", "-t", "1"])
        if rc != 0:
            check("memra-run prompt %d" % i, False, err)
            return 1
        alone[i] = out
    path = os.path.join(tmp, "batch-cli-check-%d.txt" % os.getpid())
    with open(path, "w") as f:
        f.write("\n".join(PROMPTS[:3]) + "\n\n" + "\n".join(PROMPTS[3:]) + "\n")  # an empty line is skipped
    for b, chunk in [("1", "64"), ("2", "3"), ("4", "5"), ("8", "1")]:
        rc, out, err = run([batch, "-m", model, "-f", path, "-b", b, "-n", n, "--chunk", chunk, "-t", "1"])
        got = sequences(out)
        ok = rc == 0 and sorted(got) == list(range(len(PROMPTS))) and "tok/s aggregate" in err
        bad = [i for i in got if got[i] != alone.get(i)]
        check("memra-batch -b %s --chunk %s: every sequence as memra-run alone" % (b, chunk), ok and not bad,
              "exit %s, differing %s\n%s\n%s" % (rc, bad, out[:2000], err[:500]))
    with open(path) as f:
        rc, out, err = run([batch, "-m", model, "-f", "-", "-b", "3", "-n", n, "-t", "1"], stdin=f.read())
    check("memra-batch -f - (stdin)", rc == 0 and sequences(out) == alone, "exit %s\n%s" % (rc, err[:500]))
    os.remove(path)

    rc, out, err = run([bench, "-m", model, "--batch", "1,2,4", "-p", "8", "-n", "4", "-r", "1", "-t", "1", "--json"])
    try:
        rows = [json.loads(line) for line in out.splitlines()]
        ok = (rc == 0 and [r["batch"] for r in rows] == [1, 2, 4]
              and all(r["pp"]["tok_s"] > 0 and r["tg"]["tok_s"] > 0 and r["tg"]["n_gen"] == 4 for r in rows))
    except (ValueError, KeyError, TypeError):
        ok = False
    check("memra-bench --batch 1,2,4 --json: one object per B", ok, "exit %s\n%s%s" % (rc, out, err))
    rc, out, err = run([bench, "-m", model, "--batch", "2", "-p", "4", "-n", "2", "-r", "1", "-t", "1"])
    check("memra-bench --batch 2 (table)", rc == 0 and "B 2" in out and "aggregate" in out,
          "exit %s\n%s%s" % (rc, out, err))

    for args, needle in [([], "no prompt file"), (["-f", "x", "-b", "65"], "bad number"),
                         (["-f", "x", "-b", "0"], "bad number")]:
        rc, out, err = run([batch] + args)
        check("memra-batch %s: usage error" % " ".join(args), rc == 2 and needle in err, "exit %s\n%s" % (rc, err))
    for args, needle in [(["--batch", "65"], "bad number"), (["--batch", "2", "-d", "8"], "depth")]:
        rc, out, err = run([bench, "-m", model] + args)
        check("memra-bench %s: usage error" % " ".join(args), rc == 2 and needle in err, "exit %s\n%s" % (rc, err))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
