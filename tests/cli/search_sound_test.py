#!/usr/bin/env python3
"""search is sound on generated search spaces (issue 30 item 6). Each case draws a shipped model
card (dense, MoE, hybrid Mamba/GDN with and without bracket groups), a world of 8 to 32 GPUs on
nodes of 4 or 8, a global batch and random lists of TP, PP, VPP, EP, micro-batch sizes,
recomputation and EP overlap, a dispatcher, a routing model, TP communication overlap or not; then runs `search` twice: with --no-prune (every layout that passes
the rules and fits is simulated: the oracle) and with pruning. It checks
  - every simulated layout's lower bound is at or below its simulated step (folded replays,
    pipelines with and without interleaving, overlapped and not);
  - pruning keeps the exhaustive run's top K: the same step times, and the same layouts wherever
    the K-th time does not tie;
  - the pruned run simulated no more layouts than the exhaustive one, and both saw the same
    number that pass the rules and fit.
Cases run until a budget of seconds is spent (at least MIN_CASES) or one fails; the seed is
printed, and `search_sound_test.py BIN SEED` reruns one sequence.

usage: search_sound_test.py HYBRID_TWIN [SEED]
"""
import json
import os
import random
import subprocess
import sys
import time

BIN = os.path.abspath(sys.argv[1])
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("HT_SEARCH_SOUND_SEED", "20261206"))
BUDGET_S = float(os.environ.get("HT_SEARCH_SOUND_BUDGET_S", "60"))
MIN_CASES = 4
TOP = 5
failures = []

MODELS = {  # card: (MoE, experts)
    "qwen3-30b-a3b": (True, 128),
    "mixtral-8x7b": (True, 8),
    "nemotron-3-nano-grouped": (True, 128),
    "qwen3-next-grouped": (True, 512),
    "nemotron-h-8b": (False, 0),
    "nemotron-h-8b-grouped": (False, 0),
}


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def subset(rng, values, at_least=1):
    k = rng.randint(at_least, len(values))
    return sorted(rng.sample(values, k))


def draw(rng):
    model = rng.choice(sorted(MODELS))
    moe, experts = MODELS[model]
    gpus = rng.choice([8, 16, 32])
    per_node = rng.choice([4, 8])
    gbs = gpus * rng.choice([1, 2, 4])
    args = ["--model", model, "--platform", "dgx-h100:gpus_per_node=%d" % per_node, "--gpus", str(gpus),
            "--gbs", str(gbs), "--seq-len", str(rng.choice([2048, 4096])),
            "--tp-list", ",".join(map(str, subset(rng, [1, 2, 4]))),
            "--pp-list", ",".join(map(str, subset(rng, [1, 2, 4]))),
            "--vpp-list", ",".join(map(str, subset(rng, [0, 2]))),
            "--mbs-list", ",".join(map(str, subset(rng, [1, 2]))),
            "--recompute-list", ";".join(subset(rng, ["none", "full", "core_attn"]))]
    if moe:
        eps = [e for e in (1, 2, 4, 8, 16, 32) if e <= gpus and experts % e == 0]
        args += ["--ep-list", ",".join(map(str, subset(rng, eps)))]
        args += ["--overlap-list", ",".join(subset(rng, ["off", "on"]))]
        args += ["--routing", rng.choice(["aux-loss", "force-balance", "mean"]),
                 "--moe-dispatcher", rng.choice(["alltoall", "allgather", "deepep", "hybridep"])]
    if rng.random() < 0.3:
        args.append("--tp-comm-overlap")
    return args


def search(args, prune):
    cmd = [BIN, "search"] + args + ["-j", "2", "--json", "--top", str(TOP if prune else 100000)]
    if not prune:
        cmd.append("--no-prune")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else p.returncode
    return json.loads(p.stdout), None


def key(r):
    l = r["layout"]
    return (tuple(l[k] for k in ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "microbatches")),
            l["recompute"], r["schedule"])


rng = random.Random(SEED)
print("search_sound_test: seed %d, budget %.0f s (HT_SEARCH_SOUND_SEED / _BUDGET_S)" % (SEED, BUDGET_S))
start = time.time()
cases = compared = 0
worst = 0.0
while (cases < MIN_CASES or time.time() - start < BUDGET_S) and not failures:  # the first failing case ends it
    args = draw(rng)
    cases += 1
    label = "case %d (%s)" % (cases, " ".join(args))
    full, why = search(args, prune=False)
    if full is None:
        # A space whose every layout breaks a rule is refused as a whole: a usage outcome, not a
        # soundness one; any other failure is a failure.
        check(why and "no layout" in " ".join(why), "%s: the exhaustive search runs (%s)" % (label, why))
        continue
    exhaustive = full["results"]
    if not exhaustive:
        print("skip %s: nothing fits" % label)
        continue
    compared += 1
    ratios = [r["bound_s"] / r["step_time_s"] for r in exhaustive]
    worst = max(worst, max(ratios))
    bad = [(key(r), r["bound_s"], r["step_time_s"]) for r in exhaustive if r["bound_s"] > r["step_time_s"] * (1 + 1e-9)]
    check(not bad, "%s: every bound at or below its step over %d layouts (largest bound/step %.4f)%s"
          % (label, len(exhaustive), max(ratios), " first offender %s" % (bad[0],) if bad else ""))
    pruned, why = search(args, prune=True)
    if pruned is None:
        check(False, "%s: the pruned search runs (%s)" % (label, why))
        continue
    want = exhaustive[:TOP]
    got = pruned["results"]
    check([r["step_time_s"] for r in got] == [r["step_time_s"] for r in want],
          "%s: pruning keeps the top %d step times" % (label, len(want)))
    cut = want[-1]["step_time_s"]
    strict = lambda rs: sorted(key(r) for r in rs if r["step_time_s"] < cut)
    check(strict(got) == strict(want), "%s: and the same layouts above the %d-th time" % (label, len(want)))
    check(pruned["simulated"] <= full["simulated"] and
          pruned["simulated"] + pruned["pruned"] == full["simulated"],
          "%s: %d simulated + %d pruned = the exhaustive run's %d" %
          (label, pruned["simulated"], pruned["pruned"], full["simulated"]))

print("%d cases, %d compared, largest bound/step %.4f, %.0f s" % (cases, compared, worst, time.time() - start))
check(compared >= 2, "at least two generated spaces had layouts that fit (%d)" % compared)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
