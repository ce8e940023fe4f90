#!/usr/bin/env python3
"""train --estimate-memory (issue 31: one memory model for train and simulate) against what the
run really holds: the one-rank trainer's estimate counts exactly the parameters `train --json`
reports; the executor's counts every rank's stage and only its own experts (2 ranks: the
non-expert weights twice, each expert once), the device executor's the same plus its host
copies; a sequential plan holds one microbatch's
activations whatever their number, combined 1F1B more; a run that cannot fit says so and the
same run without the flag is refused in one line naming the same figure.

usage: train_memory_test.py HYBRID_TWIN
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run


def estimate(args):
    rc, out, err = run(["train"] + args + ["--estimate-memory", "--json"])
    check(rc == 0, f"train {' '.join(args)} --estimate-memory --json runs ({err.strip()[-200:]})")
    return json.loads(out) if rc == 0 else {}


one = ["--pattern", "M*G-E", "--batch", "4", "--seq", "32"]
e = estimate(one)
rc, out, _ = run(["train"] + one + ["--steps", "0", "--json"])
held = json.loads(out)["parameters"] if rc == 0 else -1
check(e.get("parameters") == held, f"one rank: the estimate's parameters are the model's ({e.get('parameters')} vs {held})")
# Data-parallel runs report the model's parameters, each expert once whatever its replicas.
for backend in ("cpu", "cuda-host"):
    for dp, ep in ((2, 1), (4, 2)):
        rc, out, _ = run(["train"] + one + ["--backend", backend, "--dp", str(dp), "--ep", str(ep), "--steps", "0",
                                            "--json", "--no-overlap"])
        got = json.loads(out)["parameters"] if rc == 0 else -1
        check(got == held, f"{backend} --dp {dp} --ep {ep}: the model's parameters ({got} vs {held})")
check(abs(e["memory_gib"] * 2**30 - (16 * e["parameters"] + e["activations_gib"] * 2**30)) < 1,
      "one rank: 16 bytes a parameter plus the activations")

moe = ["--pattern", "[*E][*E]", "--ep", "2", "--batch", "4", "--seq", "32", "--no-overlap"]
seq2, seq8 = estimate(moe + ["--microbatches", "2"]), estimate(moe + ["--microbatches", "8"])
single = estimate(["--pattern", "[*E][*E]", "--batch", "4", "--seq", "32"])
# Executor ranks: two copies of the non-expert weights, the experts split between them.
check(seq2.get("ranks") == 2 and seq2["parameters"] < 2 * single["parameters"],
      f"EP 2: each rank holds only its experts ({seq2.get('parameters')} < 2 x {single.get('parameters')})")
check(seq2["activations_gib"] == seq8["activations_gib"],
      "sequential: one microbatch in flight whatever their number")
ovl = estimate(["--pattern", "[*E][*E]", "--ep", "2", "--batch", "4", "--seq", "32", "--microbatches", "8", "--overlap"])
check(ovl["activations_gib"] > seq8["activations_gib"], "combined 1F1B keeps the next microbatch's forward too")

# The device executor (host emulation) walks the same plan with the same lifetimes: the same
# parameters and activations, plus a host copy of each held parameter's value and gradient.
dev2, dev8 = (estimate(moe + ["--backend", "cuda-host", "--microbatches", str(m)]) for m in (2, 8))
check(dev2.get("parameters") == seq2["parameters"] and dev2.get("activations_gib") == seq2["activations_gib"],
      f"device executor: the CPU executor's parameters and activations ({dev2.get('parameters')} vs {seq2['parameters']})")
check(abs((dev2["memory_gib"] - seq2["memory_gib"]) * 2**30 - 8 * seq2["parameters"]) < 1,
      "device executor: 8 bytes a parameter more (the host's copies)")
check(dev8.get("activations_gib") == dev2["activations_gib"],
      "device executor, sequential: one microbatch in flight whatever their number")

huge = ["--hidden", "1000000000", "--steps", "1"]
big = estimate(huge)
check(big.get("fits") is False and big["memory_gib"] > big["available_gib"], "a run that cannot fit says so")
rc, out, err = run(["train"] + huge)
lines = err.strip().splitlines()
figure = re.search(r"needs about ([\d.e+]+) GiB", err)
check(rc == 2 and len(lines) == 1 and figure is not None
      and abs(float(figure.group(1)) - big["memory_gib"]) <= 0.01 * big["memory_gib"],
      f"...and without the flag it is refused in one line with the same figure ({err.strip()[:160]})")
checks.exit()
