#!/usr/bin/env python3
"""memra-chat-template against the golden chat-template cases: the exact
rendering on stdout (nothing added) and exit 0, or the recorded error on
stderr and exit 1; -m MODEL uses the GGUF's own template; bad usage exits 2.

usage: chat_cli_check.py MEMRA-CHAT-TEMPLATE FIXTURES DEFAULT.GGUF
Exits 77 (skipped) when FIXTURES/chat is absent."""
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe, fixtures, model = sys.argv[1:4]
    chat = os.path.join(os.environ.get("MEMRA_FIXTURES", fixtures), "chat")
    files = sorted(glob.glob(os.path.join(chat, "*.cases.json")))
    if not files:
        print(f"{chat}: no chat-template fixtures; skipping")
        return 77
    bad = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        ctx_path = os.path.join(tmp, "context.json")
        for path in files:
            doc = json.load(open(path, encoding="utf-8"))
            tmpl = os.path.join(chat, doc["template"])
            for case in doc["cases"]:
                total += 1
                with open(ctx_path, "w", encoding="utf-8") as f:
                    json.dump(case["context"], f, ensure_ascii=False)
                p = subprocess.run([exe, "--now", doc["strftime_now"], tmpl, ctx_path], capture_output=True)
                if "expected" in case:
                    ok = p.returncode == 0 and p.stdout == case["expected"].encode("utf-8") and not p.stderr
                else:
                    ok = p.returncode == 1 and not p.stdout and case["error"].encode("utf-8") in p.stderr
                if not ok:
                    bad += 1
                    print(f"FAIL {doc['template']} / {case['name']}: exit {p.returncode}, "
                          f"stderr {p.stderr.decode('utf-8', 'replace')[:200]!r}")
        print(f"memra-chat-template: {total - bad} of {total} golden cases")

        with open(ctx_path, "w") as f:
            json.dump({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True}, f)
        p = subprocess.run([exe, "-m", model, ctx_path], capture_output=True)
        if p.returncode != 0 or not p.stdout.endswith(b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"):
            bad += 1
            print(f"FAIL -m {model}: exit {p.returncode}, {p.stdout[-120:]!r} {p.stderr[:200]!r}")
        for args in ([], [ctx_path], ["-x", ctx_path, ctx_path], [ctx_path, ctx_path, ctx_path]):
            p = subprocess.run([exe] + args, capture_output=True)
            if p.returncode != 2:
                bad += 1
                print(f"FAIL usage {args}: exit {p.returncode}, expected 2")
        p = subprocess.run([exe, os.path.join(tmp, "missing.jinja"), ctx_path], capture_output=True)
        if p.returncode != 1 or not p.stderr:
            bad += 1
            print(f"FAIL missing template: exit {p.returncode}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
