#!/usr/bin/env python3
"""HYBRID_TWIN_LOG (io/log.hpp): what the commands say on stderr goes through one facility with
named categories. 'quiet' leaves errors and warnings only, '-NAME' silences a category, '+NAME'
keeps one when quiet; stdout (the results) never changes; a bad list is a one-line usage error.

usage: log_test.py HYBRID_TWIN
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check = checks.check


def run(args, spec=None):
    env = dict(os.environ)
    env.pop("HYBRID_TWIN_LOG", None)
    if spec is not None:
        env["HYBRID_TWIN_LOG"] = spec
    p = subprocess.run([sys.argv[1]] + args, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as d:
    plan = os.path.join(d, "plan.json")
    args = ["plan", "[*E]-", "--ep", "2", "--microbatches", "2", "-o", plan]
    rc, out, err = run(args)
    check(rc == 0 and err.startswith("wrote " + plan), f"plan -o says what it wrote: {err.strip()[:120]}")
    for spec in ("quiet", "-wrote", " -wrote , -search "):
        rc2, out2, err2 = run(args, spec)
        check(rc2 == 0 and err2 == "" and out2 == out, f"HYBRID_TWIN_LOG='{spec}' silences the 'wrote' line only")
    rc2, _, err2 = run(args, "quiet,+wrote")
    check(rc2 == 0 and err2 == err, "'+wrote' keeps the category when quiet")
    # Errors are said whatever the list.
    rc2, out2, err2 = run(["plan", "[*E", "--ep", "2"], "quiet")
    check(rc2 == 2 and out2 == "" and err2.startswith("error:"), "errors are said when quiet")
    # A search's notes are category 'search'.
    search = ["search", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--gbs", "32",
              "--tp-list", "1", "--pp-list", "1", "--ep-list", "8", "--cp-list", "1", "--top", "1", "-j", "1"]
    rc, out, err = run(search)
    rc2, out2, err2 = run(search, "-search")
    check(rc == 0 and "search: " in err and rc2 == 0 and "search: " not in err2 and out2 == out,
          "'-search' silences search's notes and leaves its table")
# A bad list: one line, exit 2, before the command runs.
for spec in ("loud", "-", "-Search", "+wrote;rm"):
    rc, out, err = run(["pattern", "M*"], spec)
    check(rc == 2 and out == "" and err.count("\n") == 1 and "HYBRID_TWIN_LOG" in err,
          f"HYBRID_TWIN_LOG='{spec}' is refused in one line: {err.strip()[:120]}")
checks.exit()
