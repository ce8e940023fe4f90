#!/usr/bin/env python3
"""`hybrid-twin expert-load` reads Megatron's tokens-per-expert logs into the busiest EP rank's
load (issue 32). Logs written here exactly as Megatron writes them (one JSON line per iteration and
MoE layer, rank<R>.jsonl, expert ranks laid out etp + ETP (ep + EP (edp + EDP pp))) from a skewed
router; the expected figure is computed here a second way, from the layout's coordinates rather
than rank arithmetic, and must agree to 1e-12. A uniform random router (what Megatron's
--moe-router-force-load-balancing does) logged the same way must come out where the twin's own
force-balance model puts it (simulate's expert_load_factor) within the sampling error. Broken logs
are refused in one line that names the file or the rank; so is an expert-TP size left at 1 where
the run's copies log the same rows.

usage: expert_load_test.py HYBRID_TWIN
"""
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run


def route(rng, tokens, experts, topk, weights):
    """Rows per expert when `tokens` tokens each pick `topk` distinct experts by `weights`."""
    counts = [0] * experts
    for _ in range(tokens):
        chosen = set()
        while len(chosen) < topk:
            chosen.add(rng.choices(range(experts), weights=weights)[0])
        for e in chosen:
            counts[e] += 1
    return counts


def decompose(index, shape):
    """Mixed-radix digits of index, the first dimension fastest."""
    digits = []
    for size in shape:
        digits.append(index % size)
        index //= size
    return digits


def orthogonal_groups(sizes, varying):
    """Megatron's rank groups (parallel_state.generate_masked_orthogonal_rank_groups, re-derived):
    ranks lie on a grid of `sizes` in its order (tp-cp-ep-dp-pp, first fastest); a group holds the
    ranks that differ only in the dimensions marked in `varying`, listed in their order."""
    strides = [1]
    for size in sizes[:-1]:
        strides.append(strides[-1] * size)
    inner = [(sz, st) for sz, st, v in zip(sizes, strides, varying) if v]
    outer = [(sz, st) for sz, st, v in zip(sizes, strides, varying) if not v]
    group_size, world = 1, 1
    for sz, _ in inner:
        group_size *= sz
    for sz in sizes:
        world *= sz
    groups = []
    for g in range(world // group_size):
        base = sum(d * st for d, (_, st) in zip(decompose(g, [sz for sz, _ in outer]), outer))
        groups.append([base + sum(d * st for d, (_, st) in zip(decompose(r, [sz for sz, _ in inner]), inner))
                       for r in range(group_size)])
    return groups


def ep_groups(layout):
    """(EP group's ranks, its expert-TP index, edp, pp) for the expert grid tp=etp, cp=1, ep, dp=edp, pp."""
    sizes = [layout["etp"], 1, layout["ep"], layout["edp"], layout["pp"]]
    out = []
    for g, ranks in enumerate(orthogonal_groups(sizes, [False, False, True, False, False])):
        t, _, d, p = decompose(g, [layout["etp"], 1, layout["edp"], layout["pp"]])
        out.append((ranks, t, d, p))
    return out


def write_logs(folder, layout, iters, keys, forwards, experts, counts_of):
    """Megatron's files for a layout {etp, ep, edp, pp}, ranks placed by Megatron's group algorithm;
    counts_of(iter, pp, edp, key index, forward) gives the EP group's per-expert rows (the same on
    every expert-TP copy, as each copy sees the same tokens). keys: the log lines' block and layer."""
    local = experts // layout["ep"]
    lines = {}
    for it in iters:
        for ranks, _, d, p in ep_groups(layout):
            for e, rank in enumerate(ranks):
                for i, key in enumerate(keys):
                    tpe = [counts_of(it, p, d, i, f)[e * local:(e + 1) * local] for f in range(forwards)]
                    lines.setdefault(rank, []).append(json.dumps({"iter": it, **key, "tpe": tpe}) + "\n")
    os.makedirs(os.path.join(folder, "tokens_per_expert"), exist_ok=True)
    for rank, ls in lines.items():
        with open(os.path.join(folder, "tokens_per_expert", f"rank{rank}.jsonl"), "a") as f:
            f.writelines(ls)


def expected(layout, iters, keys, forwards, experts, counts_of, gpus_per_node=8):
    """The definitions, walked over Megatron's EP groups: per iteration the slowest group's sum over
    (layer, forward) of the busiest rank's rows over its sum of the mean rank's rows, and the same
    for the busiest node (its members' rows pooled, over their number); averaged over iterations."""
    ep, local = layout["ep"], experts // layout["ep"]
    factors = []
    for it in iters:
        worst = worst_node = 0.0
        for ranks, _, d, p in ep_groups(layout):
            most = node_most = mean = 0.0
            for i in range(len(keys)):
                for f in range(forwards):
                    c = counts_of(it, p, d, i, f)
                    rows = [sum(c[e * local:(e + 1) * local]) for e in range(ep)]
                    if sum(rows) == 0:
                        continue
                    nodes = {}
                    for rank, r in zip(ranks, rows):
                        nodes.setdefault(rank // gpus_per_node, []).append(r)
                    most += max(rows)
                    node_most += max(sum(v) / len(v) for v in nodes.values())
                    mean += sum(rows) / ep
            worst, worst_node = max(worst, most / mean), max(worst_node, node_most / mean)
        factors.append((worst, worst_node))
    return tuple(sum(f[k] for f in factors) / len(factors) for k in (0, 1))


tmp = tempfile.mkdtemp(prefix="ht-expert-load-")
try:
    # 1. A skewed router on etp 2 x ep 4 x edp 2 x pp 2 = 32 ranks, 3 layers and an MTP layer a
    # stage, 4 forwards a layer, 2 logged iterations; 16 experts top-2 with Zipf popularity permuted
    # per layer; ranks placed by Megatron's group algorithm, not by the tool's formula.
    rng = random.Random(7)
    layout = {"etp": 2, "ep": 4, "edp": 2, "pp": 2}
    iters, forwards, experts = [10, 20], 4, 16
    keys = [{"block": "decoder", "layer": l} for l in range(3)] + [{"block": "mtp", "mtp_idx": 0, "layer": 0}]
    memo = {}

    def skewed(it, p, d, l, f):
        key = (it, p, d, l, f)
        if key not in memo:
            order = list(range(experts))
            random.Random(hash((p, l)) & 0xffff).shuffle(order)
            weights = [1.0 / (1 + order[e]) ** 0.8 for e in range(experts)]
            memo[key] = route(rng, 64, experts, 2, weights)
        return memo[key]

    logs = os.path.join(tmp, "skewed")
    write_logs(logs, layout, iters, keys, forwards, experts, skewed)
    want = expected(layout, iters, keys, forwards, experts, skewed)[0]
    rc, out, err = run(["expert-load", logs, "--ep", "4", "--etp", "2", "--json"])
    check(rc == 0, f"expert-load reads 32 ranks' logs ({err.strip()[-200:]})")
    got = json.loads(out) if rc == 0 else {}
    check(abs(got.get("expert_load", 0) - want) <= 1e-12 * want,
          f"busiest-rank load {got.get('expert_load')} equals the definition walked by layout coordinates {want}")
    check(want > 1.2, f"the skewed router is far from even ({want:.3f})")
    check(got.get("groups") == 8 and got.get("local_experts") == 4 and got.get("ranks") == 32,
          f"8 EP groups (both expert-TP copies) of 4 local experts ({got.get('groups')}, {got.get('local_experts')})")
    check([i["iter"] for i in got.get("iterations", [])] == iters, "both logged iterations reported")
    check(got.get("spans_nodes") is False and got.get("expert_node_load") == 1,
          "EP groups inside one node of 8: the node pools every member, its load is the mean")
    want_node = expected(layout, iters, keys, forwards, experts, skewed, 4)[1]
    rc, out, _ = run(["expert-load", logs, "--ep", "4", "--etp", "2", "--gpus-per-node", "4", "--json"])
    got4 = json.loads(out) if rc == 0 else {}
    check(got4.get("spans_nodes") is True and abs(got4.get("expert_node_load", 0) - want_node) <= 1e-12 * want_node,
          f"4 GPUs a node: the busiest node's load {got4.get('expert_node_load')} equals the definition {want_node}")
    check(1 < want_node < want, f"pooling a node's ranks evens the load ({want_node:.3f} < {want:.3f})")
    rc, table, _ = run(["expert-load", os.path.join(logs, "tokens_per_expert", "rank0.jsonl")] +
                       [os.path.join(logs, "tokens_per_expert", f"rank{r}.jsonl") for r in range(1, 32)] +
                       ["--ep", "4", "--etp", "2"])
    check(rc == 0 and f"--expert-load {want:.3f}" in table,
          f"the table given the files one by one says what to pass to simulate ({table.strip().splitlines()[-1:]})")

    # 2. Megatron's forced balance (uniform random top-k) at qwen3-30b-a3b's router, EP 8, 512
    # tokens a GPU: the logged load must sit where the twin's force-balance model puts it.
    rc, out, err = run(["simulate", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "8", "--ep", "8",
                        "--seq-len", "512", "--gbs", "8", "--routing", "force-balance", "--json"])
    model = json.loads(out)["physics"]["expert_load_factor"] if rc == 0 else 0
    check(rc == 0 and model > 1.01, f"the twin's force-balance model at EP 8, 512 tokens a GPU: {model:.4f}")
    urng = random.Random(11)
    forwards_uniform = 150

    def uniform(it, p, d, l, f):
        counts = [0] * 128
        for _ in range(8 * 512):
            for e in urng.sample(range(128), 8):
                counts[e] += 1
        return counts

    logs = os.path.join(tmp, "uniform")
    write_logs(logs, {"etp": 1, "ep": 8, "edp": 1, "pp": 1}, [1], [{"block": "decoder", "layer": 0}], forwards_uniform,
               128, uniform)
    rc, out, err = run(["expert-load", logs, "--ep", "8", "--json"])
    measured = json.loads(out)["expert_load"] if rc == 0 else 0
    # The mean over 150 forwards of the busiest of 8 ranks: its spread is about 0.6 of a rank's
    # standard deviation, so the mean is known to about 5 % of (factor - 1).
    check(abs((measured - 1) - (model - 1)) <= 0.12 * (model - 1),
          f"a logged uniform router ({measured:.4f}) agrees with the twin's model ({model:.4f}) within sampling error")

    # 3. Broken logs: one line each, exit 2, naming what is wrong.
    def refused(args, words, what):
        rc, _, err = run(["expert-load"] + args)
        check(rc == 2 and words in err and err.count("\n") == 1, f"{what}: exit {rc}, {err.strip()[:160]}")

    bad = os.path.join(tmp, "bad")
    shutil.copytree(os.path.join(tmp, "skewed"), bad)
    tpe_dir = os.path.join(bad, "tokens_per_expert")
    refused([bad, "--ep", "3", "--etp", "2"], "has no log of layer 0", "an EP size that does not tile the ranks")
    refused([bad, "--ep", "8", "--etp", "2", "--experts", "16"], "makes 32 experts, not the 16 given",
            "an EP size that tiles the ranks but not the model's experts")
    rc, out, _ = run(["expert-load", bad, "--ep", "4", "--etp", "2", "--experts", "16", "--json"])
    check(rc == 0 and abs(json.loads(out)["expert_load"] - want) <= 1e-12 * want, "the right EP size and experts pass")
    refused([bad, "--ep", "4"], "expert-TP copies", "expert-TP left at 1 where the run's copies log in pairs")
    refused([bad, "--ep", "65536", "--etp", "65536"], "has no log of", "an EP x expert-TP block beyond 32 bits")
    # Megatron appends: a resumed run logs iteration 20 again; the last lines stand.
    with open(os.path.join(tpe_dir, "rank6.jsonl")) as f:
        last = f.readlines()[-1]
    with open(os.path.join(tpe_dir, "rank6.jsonl"), "a") as f:
        f.write(last)
    rc, out, _ = run(["expert-load", bad, "--ep", "4", "--etp", "2", "--json"])
    got = json.loads(out) if rc == 0 else {}
    check(rc == 0 and got["relogged"] == 1 and abs(got["expert_load"] - want) <= 1e-12 * want,
          "a line logged again (a resumed run) is counted and the last one kept")
    first = os.path.join(tpe_dir, "rank0.jsonl")
    os.rename(first, first + ".away")
    refused([bad, "--ep", "4", "--etp", "2"], "rank 0 of the EP group of rank 0", "a group's first rank missing")
    os.rename(first + ".away", first)
    os.remove(os.path.join(tpe_dir, "rank6.jsonl"))
    refused([bad, "--ep", "4", "--etp", "2"], "rank 6 of the EP group of rank 0", "a rank's log missing")
    def broken(text, words, what):
        """rank 6's log replaced by `text`."""
        with open(os.path.join(tpe_dir, "rank6.jsonl"), "w") as f:
            f.write(text)
        refused([bad, "--ep", "4", "--etp", "2"], words, what)

    line = '{"iter": 10, "block": "decoder", "layer": 0, "tpe": [[%s]]}\n'
    broken(line % "1, 2, 3", "3 local experts", "a rank with another number of local experts")
    broken(line % "1, 2, -3, 4", "rank6.jsonl' line 1: an expert's rows are -3", "a negative count")
    broken("\n" + line.replace("}", "", 1), "rank6.jsonl' line 2", "a line that is not JSON")
    broken(line.replace("decoder", "encoder") % "1, 2, 3, 4", "not \"decoder\" or \"mtp\"", "an unknown block")
    broken(line.replace('"layer": 0', '"layer": 4294967296') % "1, 2, 3, 4", "not a layer index",
           "a layer index beyond any model")
    broken(line % "1, 2, 3, 4", "log 4 and 1 forwards", "members with different numbers of forwards")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    refused([empty, "--ep", "4"], "no rank<R>.jsonl files", "a folder without logs")
    other = os.path.join(tmp, "other.jsonl")
    open(other, "w").close()
    refused([other, "--ep", "4"], "is not named rank<R>.jsonl", "a file that does not name its rank")
    refused([os.path.join(tmp, "rank3.jsonl"), "--ep", "4"], "no such file or folder", "a missing file")
    refused([os.path.join(tmp, "nowhere"), "--ep", "4"], "no such file or folder", "a missing folder")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

checks.exit()
