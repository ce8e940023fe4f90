#!/usr/bin/env python3
"""Layout search against an exhaustive run of the same space (bench, not a test).

Runs `hybrid-twin search` as a user would (bound-ordered, pruned) and with `--no-prune` (every
layout that passes the rules and fits is simulated: the peer), both with -j N, and prints the wall
times, their ratio, whether the top K agree layout for layout, and how tight the lower bound was
over every simulated layout (it must never exceed its step). Default: Qwen3-235B-A22B on 256
H100s at global batch 2048, the search issue 32 timed (the exhaustive side takes about half an
hour on 2 cores).

usage: search_vs_exhaustive.py BIN [--model M] [--gpus N] [--gbs G] [--platform P] [-j N] [--top K]
"""
import argparse
import json
import subprocess
import sys
import time


def run(cmd):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    return time.monotonic() - t0, json.loads(p.stdout)


def key(r):
    l = r["layout"]
    return (l["tp"], l["cp"], l["pp"], l["vpp"], l["ep"], l["etp"], l["mbs"], l["recompute"], r["schedule"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--model", default="qwen3-235b-a22b")
    ap.add_argument("--gpus", default="256")
    ap.add_argument("--gbs", default="2048")
    ap.add_argument("--platform", default="dgx-h100")
    ap.add_argument("-j", default="2")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    base = [a.bin, "search", "--model", a.model, "--gpus", a.gpus, "--gbs", a.gbs, "--platform", a.platform,
            "-j", a.j, "--json"]
    t_search, pruned = run(base + ["--top", str(a.top)])
    t_all, everything = run(base + ["--no-prune", "--top", "1000000"])
    top_pruned = [key(r) for r in pruned["results"][: a.top]]
    top_all = [key(r) for r in everything["results"][: a.top]]
    ratios = sorted(r["bound_s"] / r["step_time_s"] for r in everything["results"])
    above = sum(1 for r in everything["results"] if r["bound_s"] > r["step_time_s"] * (1 + 1e-9))
    print(f"{a.model} on {a.gpus} GPUs ({a.platform}), global batch {a.gbs}, -j {a.j}: {pruned['layouts']} layouts")
    print(f"search (pruned)    {t_search:8.1f} s   simulated {pruned['simulated']}")
    print(f"exhaustive (peer)  {t_all:8.1f} s   simulated {everything['simulated']}")
    print(f"ratio              {t_all / t_search:8.1f}x")
    print(f"top {a.top}             {'the same, layout for layout' if top_pruned == top_all else 'DIFFERENT'}")
    print(f"lower bound / step over {len(ratios)} layouts: min {ratios[0]:.3f}, median {ratios[len(ratios) // 2]:.3f}, "
          f"max {ratios[-1]:.3f}; above its step: {above}")


if __name__ == "__main__":
    main()
