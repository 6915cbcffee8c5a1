#!/usr/bin/env python3
"""Prints one closing line over meson test logs: 'tests: N passed, N failed, N skipped'.
Each cmocka case counts (its [ OK ]/[ FAILED ]/[ SKIPPED ] lines); a meson
test without cmocka lines counts as one case by its result; the Python
package's pytest cases count from BUILD_DIR/meson-logs/pytest.xml (JUnit XML,
written by scripts/test.sh) when it exists.
usage: count-tests.py BUILD_DIR [BUILD_DIR...]"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for build in sys.argv[1:]:
    for line in open(build + "/meson-logs/testlog.json"):
        t = json.loads(line)
        out = t.get("stdout") or ""
        ok = len(re.findall(r"^\[       OK \]", out, re.M))
        bad = len(re.findall(r"^\[  (FAILED|ERROR)  ?\]", out, re.M))
        skip = len(re.findall(r"^\[  SKIPPED \]", out, re.M))
        if ok + bad + skip == 0:
            ok, bad, skip = {"OK": (1, 0, 0), "SKIP": (0, 0, 1), "EXPECTEDFAIL": (1, 0, 0)}.get(t["result"], (0, 1, 0))
        elif t["result"] not in ("OK", "SKIP") and bad == 0:
            bad = 1  # crashed or timed out after its last case
        passed += ok
        failed += bad
        skipped += skip
    junit = build + "/meson-logs/pytest.xml"
    if os.path.exists(junit):
        root = ET.parse(junit).getroot()
        for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
            n = int(suite.get("tests", 0))
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            passed += n - bad - skip
            failed += bad
            skipped += skip
print("tests: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
