#!/usr/bin/env python3
"""The memory a planner can trust (issue 28 item 5): simulate counts the process's runtime
overhead (CUDA context, NCCL communicators, DeepEP buffers) and --memory-margin against the HBM
the driver reports; the JSON's parts add up to the HBM exactly (tensors + runtime + margin +
free); a margin just above what is free turns the verdict to DOES NOT FIT and just below keeps it;
search refuses layouts by the same rule and passes the margin on to the jobs it emits; a bad
margin is refused in one line.

usage: memory_margin_test.py HYBRID_TWIN
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run
GIB = 2.0 ** 30

base = ["simulate", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--ep", "8", "--gbs", "32"]
rc, out, err = run(base + ["--json"])
check(rc == 0, f"simulate --json runs ({err.strip()[-200:]})")
m = json.loads(out)["memory"] if rc == 0 else {}
parts = m.get("runtime", {})
check(abs(m.get("hbm_gib", 0) * GIB - 81559 * 2 ** 20) < 1, f"HBM is the H100's 81559 MiB as the driver reports it ({m.get('hbm_gib')})")
# 16 ranks, dp 16, ep 8 (edp 2), the all-to-all dispatcher: dp group, gradient norm over all 16,
# the edp pair, NCCL's all-to-all; and the CUDA context.
want = 400e6 + 688e6 + 688e6 + 544e6 + 3.28e9
check(parts.get("nccl_communicators") == 4 and abs(m.get("runtime_gib", 0) * GIB - want) < 1,
      f"runtime = context + 3 collective groups + an all-to-all ({m.get('runtime_gib', 0) * GIB / 1e9:.3f} GB, want {want / 1e9:.3f})")
total = json.loads(out)["memory_gib"] + m.get("runtime_gib", 0) + m.get("margin_gib", 0) + m.get("free_gib", 0)
check(abs(total - m.get("hbm_gib", 0)) < 1e-9, "tensors + runtime + margin + free = HBM")

free = m.get("free_gib", 0)
check(free > 1, f"the layout fits with {free:.2f} GiB free")
for margin, fits in ((free + 0.05, False), (free - 0.05, True)):
    rc, out, _ = run(base + ["--json", "--memory-margin", f"{margin:.4f}"])
    r = json.loads(out) if rc == 0 else {}
    check(rc == 0 and r.get("memory_fits") is fits and abs(r["memory"]["margin_gib"] - margin) < 1e-3,
          f"--memory-margin {margin:.2f}: fits is {fits}")
rc, out, _ = run(base + ["--memory-margin", f"{free + 0.05:.4f}"])
check(rc == 0 and "DOES NOT FIT" in out and " margin of " in out and "runtime      CUDA context" in out,
      "the report says DOES NOT FIT and names the runtime and the margin")

rc, out, err = run(base + ["--memory-margin", "-1"])
check(rc == 2 and out == "" and err.startswith("error: --memory-margin") and "-1" in err.splitlines()[0],
      f"a negative margin is refused, naming the flag and the value: {err.strip().splitlines()[0][:120]}")

# search: a margin larger than the HBM leaves nothing that fits; the jobs it emits carry it.
sbase = ["search", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "16", "--gbs", "32",
         "--tp-list", "1", "--pp-list", "1", "--ep-list", "8", "--mbs-list", "1", "--recompute-list", "none"]
rc, out, err = run(sbase + ["--memory-margin", "80"])
check("do not fit in 79.6 GiB of HBM beside the runtime overhead and the 80.0 GiB margin" in err and "0 remain" in err,
      f"search with an 80 GiB margin: nothing fits ({err.strip().splitlines()[1] if err.count(chr(10)) > 1 else err.strip()})")
with tempfile.TemporaryDirectory() as d:
    jobs = os.path.join(d, "jobs.sh")
    rc, _, err = run(sbase + ["--memory-margin", "1.5", "--emit-jobs", jobs, "--jobs-dir", d])
    lines = open(jobs).read().splitlines() if rc == 0 and os.path.exists(jobs) else []
    cmds = [x for x in lines if "simulate" in x]
    check(rc == 0 and cmds and all("--memory-margin '1.5'" in x for x in cmds),
          f"--emit-jobs passes --memory-margin on ({len(cmds)} jobs; {err.strip()[-150:]})")
checks.exit()
