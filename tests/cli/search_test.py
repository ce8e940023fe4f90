#!/usr/bin/env python3
"""`hybrid-twin search` and `merge` (issue 20) on a small search space of a shipped model card:
-j 2 gives -j 1's table; the lower-bound pruning gives the table of simulating every layout and
each simulated layout's bound is below its step; every listed layout fits, is on the requested
GPUs and batch, and the table is sorted; a layout that `simulate` itself reports as not fitting is
left out and counted; `--emit-jobs` commands run one by one and `merge` give the search's table;
merge refuses a file that is not a result in one line; a sweep with -j 2 prints -j 1's table.

usage: search_test.py HYBRID_TWIN
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.path.abspath(sys.argv[1])
SPACE = ["--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--gbs", "32",
         "--tp-list", "1,2", "--pp-list", "1,2", "--vpp-list", "0", "--mbs-list", "1",
         "--recompute-list", "none;full"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(args, cwd=None):
    p = subprocess.run([BIN] + args, capture_output=True, text=True, cwd=cwd, timeout=600)
    return p.returncode, p.stdout, p.stderr


def key(r):
    l = r["layout"]
    return (tuple(l[k] for k in ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "microbatches")),
            l["recompute"], r["schedule"])


def search(extra):
    rc, out, err = run(["search"] + SPACE + ["--json"] + extra)
    check(rc == 0, "search %s exits 0 (%s)" % (" ".join(extra), err.strip().splitlines()[-1:] if rc else ""))
    return json.loads(out) if rc == 0 else {"results": []}, err


one, err1 = search(["-j", "1", "--top", "5"])
two, _ = search(["-j", "2", "--top", "5"])
full, _ = search(["-j", "2", "--no-prune", "--top", "1000"])
table = [(key(r), r["step_time_s"]) for r in one["results"]]
check(len(table) == 5, "five layouts listed (%d)" % len(table))
check(table == [(key(r), r["step_time_s"]) for r in two["results"]], "-j 2 gives the table of -j 1")
check(table == [(key(r), r["step_time_s"]) for r in full["results"][:5]],
      "pruning by the lower bound gives the table of simulating all %d layouts" % len(full["results"]))
check(all(r["bound_s"] <= r["step_time_s"] * (1 + 1e-9) for r in full["results"]),
      "every layout's lower bound is at or below its simulated step")
check(one["pruned"] > 0, "the bound pruned some layouts (%d)" % one["pruned"])
# Where the bound is tightest: EP 16 across two nodes without a pipeline, whose data-parallel
# stream runs partly while the compute stream waits for the all-to-alls (priced beside compute,
# the bound passed the step by up to 2 %).
rc, out, err = run(["search", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--gbs", "64",
                    "--tp-list", "1,2", "--pp-list", "1", "--ep-list", "16", "--mbs-list", "1,2", "-j", "2",
                    "--no-prune", "--top", "1000", "--json"])
tight = json.loads(out)["results"] if rc == 0 else []
check(len(tight) > 0 and all(r["bound_s"] <= r["step_time_s"] * (1 + 1e-9) for r in tight),
      "EP 16 over two nodes: every bound at or below its step (largest ratio %.4f)"
      % max([r["bound_s"] / r["step_time_s"] for r in tight] or [0]))
steps = [r["step_time_s"] for r in full["results"]]
check(steps == sorted(steps), "the table is sorted by step time")
check(all(r["memory_fits"] and r["layout"]["gpus"] == 16 and r["layout"]["gbs"] == 32 for r in full["results"]),
      "every listed layout fits and runs 16 GPUs at global batch 32")

# tp 1, pp 1, ep 1, no recomputation: 30B parameters with their gradients and optimizer state on
# every GPU; simulate says it does not fit, and search leaves it out and counts it.
rc, out, _ = run(["simulate", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--gbs", "32",
                  "--mbs", "1", "--no-overlap", "--json"])
big = json.loads(out) if rc == 0 else {}
check(rc == 0 and big.get("memory_fits") is False, "simulate: tp 1 pp 1 ep 1 does not fit (%.1f GiB)"
      % big.get("memory_gib", 0))
listed = {key(r) for r in full["results"]}
check(rc == 0 and key(big) not in listed, "search leaves that layout out")
check(one["memory_exceeded"] > 0 and "do not fit in" in err1, "search counts the layouts that do not fit and says so")

with tempfile.TemporaryDirectory() as d:
    jobs = os.path.join(d, "jobs.txt")
    rc, _, err = run(["search"] + SPACE + ["--emit-jobs", jobs, "--jobs-dir", os.path.join(d, "out"), "--bin", BIN])
    lines = open(jobs).read().splitlines() if rc == 0 else []
    check(rc == 0 and len(lines) == len(full["results"]),
          "--emit-jobs writes one command per layout that fits (%d)" % len(lines))
    for line in lines:
        subprocess.run(["bash", "-c", line], check=True, capture_output=True, timeout=300)
    results = sorted(os.path.join(d, "out", f) for f in os.listdir(os.path.join(d, "out")))
    rc, out, _ = run(["merge", "--top", "5", "--json"] + results)
    merged = json.loads(out)["results"] if rc == 0 else []
    check([(key(r), r["step_time_s"]) for r in merged] == table, "the emitted commands + merge give the search's table")
    rc_text, text, _ = run(["merge", "--top", "5"] + results)
    rc_s, stext, _ = run(["search"] + SPACE + ["--top", "5"])
    check(rc_text == 0 and rc_s == 0 and text == stext, "merge prints search's table, character for character")
    # A physics value with more digits than std::to_string keeps reaches the emitted commands exactly.
    load = ["--expert-load", "1.23456789", "--memory-margin", "0.123456789"]
    jobs2 = os.path.join(d, "jobs2.txt")
    rc, _, _ = run(["search"] + SPACE + load + ["--emit-jobs", jobs2, "--jobs-dir", os.path.join(d, "out2"), "--bin", BIN])
    lines2 = open(jobs2).read().splitlines() if rc == 0 else []
    check(rc == 0 and lines2 and all("--expert-load '1.23456789'" in l and "--memory-margin '0.123456789'" in l
                                     for l in lines2), "--emit-jobs passes --expert-load and --memory-margin digit for digit")
    for line in lines2:
        subprocess.run(["bash", "-c", line], check=True, capture_output=True, timeout=300)
    results2 = sorted(os.path.join(d, "out2", f) for f in os.listdir(os.path.join(d, "out2"))) if lines2 else []
    rc_m, mtext, _ = run(["merge", "--top", "5"] + results2)
    rc_s, stext2, _ = run(["search"] + SPACE + load + ["--top", "5"])
    check(rc_m == 0 and rc_s == 0 and mtext == stext2 and stext2 != stext,
          "with --expert-load the emitted commands + merge print search's table, and it differs from the default's")
    bad = os.path.join(d, "bad.json")
    open(bad, "w").write('{"hello": 1}')
    rc, _, err = run(["merge", bad])
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "not the JSON of" in err, "merge refuses a non-result in one line")

# A sweep's table from 2 worker processes is the table from 1.
sweep = ["simulate", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--gbs", "32",
         "--sweep", "ep=2,4,8", "--sweep", "ib_gbps=200,400"]
rc1, t1, _ = run(sweep + ["-j", "1"])
rc2, t2, _ = run(sweep + ["-j", "2"])
check(rc1 == 0 and rc2 == 0 and t1 == t2 and len(t1.splitlines()) == 7, "simulate --sweep -j 2 prints the table of -j 1")

print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
