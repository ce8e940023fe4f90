#!/usr/bin/env python3
"""--megatron-args (issue 28) against a second description of the same runs: the Megatron
argument lists in tests/cli/megatron-args/ (real Model Zoo arguments) must give exactly the step,
memory, pattern and layout that the shipped model cards (built from the models' Hugging Face
configs) give with the same layout typed as hybrid-twin flags. Every argument of a fixture is
reported once, as used or as ignored (counted by this test's own reading of the file); arguments
the twin cannot honour are refused, naming them.

usage: megatron_args_test.py HYBRID_TWIN SOURCE_DIR
"""
import json
import os
import re
import shlex
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

BIN, SRC = sys.argv[1], sys.argv[2]
FIX = os.path.join(SRC, "tests", "cli", "megatron-args")
checks = Checks(BIN)
check, run = checks.check, checks.run


def names_in(path):
    """Distinct Megatron argument names of a fixture, read plainly: the words after the script."""
    text = open(path).read()
    lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
    words = shlex.split(" ".join(lines).replace("\\", " "))
    if any(w.endswith(".py") for w in words):
        words = words[[i for i, w in enumerate(words) if w.endswith(".py")][0] + 1:]
    return {w.rstrip(":").replace("_", "-") for w in words if w.startswith("--")}


def summary(err):
    used = re.search(r"megatron-args: used (\d+): (.*)", err)
    ignored = re.search(r"megatron-args: ignored (\d+)(?:: (.*))?", err)
    u = [x.split(" ")[0] for x in used.group(2).split(", ")] if used else []
    i = ignored.group(2).split(", ") if ignored and ignored.group(2) else []
    approx = re.search(r"megatron-args: not modelled, the real run may differ: (.*)", err)
    return u, i + (approx.group(1).split(", ") if approx else [])


def same(a, b, keys):
    return all(a.get(k) == b.get(k) for k in keys)


# 1. DeepSeek-V3, a torchrun command line without a card: MLA, a dense-then-MoE layer list, MTP,
#    group-limited routing, uneven pipeline stages. The card deepseek-v3 is the oracle.
ds = os.path.join(FIX, "deepseek-v3-torchrun.sh")
rc, out, err = run(["simulate", "--megatron-args", ds, "--platform", "dgx-h800", "--json"])
check(rc == 0, f"deepseek-v3 torchrun line simulates (rc {rc}: {err.strip()[-200:]})")
if rc == 0:
    got = json.loads(out)
    rc2, out2, err2 = run(["simulate", "--model", "deepseek-v3", "--platform", "dgx-h800", "--gpus", "1024",
                           "--tp", "1", "--pp", "8", "--ep", "64", "--mbs", "1", "--gbs", "1024", "--seq-len", "4096",
                           "--first-stage-layers", "7", "--last-stage-layers", "6", "--recompute", "full",
                           "--no-overlap", "--no-delay-wgrad", "--moe-dispatcher", "alltoall", "--json"])
    assert rc2 == 0, err2
    want = json.loads(out2)
    card = json.load(open(os.path.join(SRC, "patterns", "models", "deepseek-v3.json")))
    check(got["pattern"] == card["pattern"], "the pattern derived from --num-layers, --moe-layer-freq, MLA and "
          "--mtp-num-layers is the card's")
    check(got["step_time_s"] == want["step_time_s"],
          f"step time equals the card's ({got['step_time_s']} vs {want['step_time_s']})")
    check(got["memory"] == want["memory"], "memory equals the card's field by field")
    check(got["layout"] == want["layout"], f"layout equals the typed one ({got['layout']})")
    check(got["layout"]["gpus"] == 128 * 8, "the world size comes from torchrun's --nnodes x --nproc-per-node")
    check(got["layout"]["first_stage_layers"] == 7 and got["layout"]["last_stage_layers"] == 6,
          "uneven stages are carried")
    used, ignored = summary(err)
    names = names_in(ds)
    check(sorted(set(used) | set(ignored)) == sorted(names) and not set(used) & set(ignored),
          f"every argument is reported once, used ({len(used)}) or ignored ({len(ignored)}), of {len(names)}")
    check({"--lr", "--save", "--tokenizer-model"} <= set(ignored), "training-only arguments are listed as ignored")
    rc, out, err = run(["plan", "--megatron-args", ds])
    check(rc == 0 and "not used by plan: --moe-dispatcher alltoall" in err,
          "plan reads the same file and lists what it has no option for")

# 2. Qwen3-235B from the Model Zoo's YAML lines with the card: the fidelity row's layout.
qw = os.path.join(FIX, "qwen3-235b-modelzoo.yaml")
base = ["--model", "qwen3-235b-a22b", "--platform", "dgx-h100", "--gpus", "256", "--json"]
rc, out, err = run(["simulate", "--megatron-args", qw] + base)
check(rc == 0, f"qwen3-235b Model Zoo YAML simulates (rc {rc}: {err.strip()[-200:]})")
if rc == 0:
    got = json.loads(out)
    rows = json.load(open(os.path.join(SRC, "bench", "fidelity", "public-runs.json")))["runs"]
    row = [r for r in rows if r["id"] == "qwen3-235b tp2 ep32 pp8 vpp4 overlap"][0]
    rc2, out2, err2 = run(["simulate"] + row["args"] + ["--json"])
    assert rc2 == 0, err2
    want = json.loads(out2)
    check(got["step_time_s"] == want["step_time_s"],
          f"step time equals the fidelity row typed by hand ({got['step_time_s']} vs {want['step_time_s']})")
    check(same(got["layout"], want["layout"], ["tp", "pp", "vpp", "ep", "etp", "dp", "mbs", "gbs", "recompute",
                                               "distributed_optimizer", "account_embedding", "account_loss"]),
          "layout: VPP from --num-layers-per-virtual-pipeline-stage with the embedding and loss counted")
    check(got["physics"]["moe_dispatcher"] == "deepep", "flex + deepep backend is the DeepEP dispatcher")
    used, ignored = summary(err)
    names = names_in(qw)
    check(sorted(set(used) | set(ignored)) == sorted(names), f"every YAML argument is reported ({len(names)})")
    # Flags typed on the command line win over the file.
    rc3, out3, _ = run(["simulate", "--megatron-args", qw] + base + ["--no-overlap", "--no-delay-wgrad"])
    check(rc3 == 0 and json.loads(out3)["step_time_s"] != got["step_time_s"]
          and json.loads(out3)["step_time_s"] == json.loads(run(["simulate"] + [a for a in row["args"] if a != "--overlap"]
                                                                 + ["--no-overlap", "--json"])[1])["step_time_s"],
          "a typed --no-overlap wins over --overlap-moe-expert-parallel-comm in the file")
    # Without the card the vocabulary must be given; typed --vocab is enough.
    rc4, _, err4 = run(["simulate", "--megatron-args", qw, "--platform", "dgx-h100", "--gpus", "256"])
    check(rc4 == 2 and "--padded-vocab-size" in err4, "without a card an unknown vocabulary is refused, naming the fix")
    rc5, out5, err5 = run(["simulate", "--megatron-args", qw, "--vocab", "151936", "--platform", "dgx-h100",
                           "--gpus", "256", "--json"])
    check(rc5 == 0 and json.loads(out5)["step_time_s"] == got["step_time_s"],
          "without the card, the arguments alone describe the same model (same step)")
    # search with the file as its fixed layout: one layout, the same step.
    rc6, out6, err6 = run(["search", "--megatron-args", qw, "--model", "qwen3-235b-a22b", "--platform", "dgx-h100",
                           "--gpus", "256", "--json"])
    if rc6 == 0:
        res = json.loads(out6)
        layouts = res["results"] if isinstance(res, dict) and "results" in res else res
        check(len(layouts) == 1 and abs(layouts[0]["step_time_s"] - got["step_time_s"]) <= 1e-9 * got["step_time_s"],
              f"search --megatron-args searches the file's layout ({len(layouts)} layouts)")
    else:
        check(False, f"search --megatron-args runs (rc {rc6}: {err6.strip()[-300:]})")

# 3. A dense GPT (Llama 3 8B, FP8) and a hybrid Mamba model (Megatron's Mamba-2 hybrid 8B): the
#    plan written from the launch script equals, byte for byte, the plan of the hybrid-twin flags a
#    person writes from reading the script, and so does the simulated step.
typed = {
    "llama3-8b-fp8.sh": (["--pattern", "[*-]" * 32, "--hidden", "4096", "--ffn-hidden", "14336", "--num-heads", "32",
                          "--num-kv-heads", "8", "--head-dim", "128", "--seq-len", "8192", "--gated-ffn", "1",
                          "--tied-embeddings", "0", "--qk-norm", "0", "--rotary-percent", "100", "--vocab", "128256",
                          "--gpus", "8", "--tp", "1", "--cp", "1", "--mbs", "1", "--gbs", "128",
                          "--grad-reduce-in-bf16"],
                         ["--precision", "fp8", "--cross-entropy-fusion"], []),
    "mamba2-hybrid-8b.sh": (["--pattern", "M-M-M--M-M*-M-M-M-M--M*-M-M-M-M-M*--M-M-M-M-M*-M--M-M-M-", "--hidden", "4096",
                             "--num-heads", "32", "--num-kv-heads", "8", "--head-dim", "128", "--ffn-hidden", "16384",
                             "--gated-ffn", "0", "--tied-embeddings", "0", "--qk-norm", "0", "--mamba-state", "128",
                             "--mamba-head-dim", "64", "--mamba-groups", "8", "--mamba-num-heads", "128",
                             "--seq-len", "4096", "--vocab", "256000", "--gpus", "8", "--tp", "4", "--pp", "1",
                             "--mbs", "4", "--gbs", "8"],
                            [], ["--vocab", "256000"]),
}
with tempfile.TemporaryDirectory() as d:
    for name, (flags, sim_only, extra) in typed.items():
        f = os.path.join(FIX, name)
        a, b = os.path.join(d, "from-args.json"), os.path.join(d, "typed.json")
        rc1, _, err1 = run(["plan", "--megatron-args", f, "-o", a] + extra)
        rc2, _, err2 = run(["plan"] + flags + ["--no-overlap", "--no-delay-wgrad", "-o", b])
        check(rc1 == 0 and rc2 == 0 and open(a, "rb").read() == open(b, "rb").read(),
              f"{name}: the plan equals the typed flags' plan byte for byte ({err1.strip()[-120:]} {err2.strip()[-120:]})")
        rc1, out1, _ = run(["simulate", "--megatron-args", f, "--json"] + extra)
        rc2, out2, _ = run(["simulate"] + flags + sim_only + ["--no-overlap", "--no-delay-wgrad", "--json"])
        check(rc1 == 0 and rc2 == 0 and json.loads(out1)["step_time_s"] == json.loads(out2)["step_time_s"]
              and json.loads(out1)["physics"] == json.loads(out2)["physics"],
              f"{name}: the simulated step and physics equal the typed flags'")
        used, ignored = summary(err1)
        reported = set(used) | set(ignored)
        check(reported == names_in(f), f"{name}: every argument is reported ({len(names_in(f))})")
    rc, _, err = run(["simulate", "--megatron-args", os.path.join(FIX, "llama3-8b-fp8.sh")])
    not_modelled = [line for line in err.splitlines() if "not modelled, the real run may differ:" in line]
    check(len(not_modelled) == 1 and "--empty-unused-memory-level, --fp8-param-gather" in not_modelled[0]
          and "--grad-reduce-in-bf16" not in not_modelled[0],
          "arguments that change a real run in ways the twin does not model are listed apart "
          "(--grad-reduce-in-bf16 is modelled since 2026-12-07)")
    open(os.path.join(d, "bf16.txt"), "w").write(
        "--bf16 --num-layers 48 --expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 "
        "--use-megatron-fsdp --megatron-fsdp-grad-comm-dtype bf16")
    rc, out, err = run(["simulate", "--megatron-args", os.path.join(d, "bf16.txt"), "--model", "qwen3-30b-a3b",
                        "--gpus", "16", "--json"])
    check(rc == 0 and json.loads(out)["layout"]["grad_reduce_in_bf16"] is True,
          f"Megatron-FSDP's --megatron-fsdp-grad-comm-dtype bf16 is the twin's --grad-reduce-in-bf16 ({err.strip()[-150:]})")

# 4. Refusals name the argument; nothing runs.
with tempfile.TemporaryDirectory() as d:
    def refused(text, words, extra=None):
        f = os.path.join(d, "args.txt")
        open(f, "w").write(text)
        rc, out, err = run(["simulate", "--megatron-args", f] + (extra or ["--model", "qwen3-30b-a3b", "--gpus", "16"]))
        check(rc == 2 and all(w in err for w in words) and err.count("\n") == 1 and out == "",
              f"refused in one line naming {words}: {err.strip()[:160]}")

    ok = "--bf16 --num-layers 48 --expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 "
    f = os.path.join(d, "block.txt")
    open(f, "w").write(ok + "--pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method block "
                            "--recompute-num-layers 3")
    rc, out, err = run(["simulate", "--megatron-args", f, "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    check(rc == 0 and json.loads(out)["layout"]["recompute"] == "full (block 3)",
          f"--recompute-method block --recompute-num-layers 3 is Megatron's block method ({err.strip()[-150:]})")
    open(f, "w").write(ok + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params")
    rc, out, err = run(["simulate", "--megatron-args", f, "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    check(rc == 0 and json.loads(out)["layout"]["fsdp"] is True, "--use-megatron-fsdp is the twin's --fsdp")
    refused(ok + "--use-megatron-fsdp --data-parallel-sharding-strategy no_shard", ["optim_grads_params"])
    open(f, "w").write(ok + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2")
    rc, out, err = run(["simulate", "--megatron-args", f, "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    check(rc == 0 and json.loads(out)["layout"]["recompute"] == "full (uniform 2)",
          f"--recompute-method uniform --recompute-num-layers 2 is Megatron's uniform method ({err.strip()[-150:]})")
    # Fine-grained activation offloading: the modules when the switch is on, as the typed flag.
    open(f, "w").write(ok + "--fine-grained-activation-offloading --offload-modules core_attn attn_proj expert_fc1")
    rc, out, err = run(["simulate", "--megatron-args", f, "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    rc2, out2, _ = run(["simulate", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--mbs", "1", "--gbs", "64",
                        "--no-overlap", "--no-delay-wgrad", "--no-distributed-optimizer", "--no-overlap-grad-reduce",
                        "--offload-modules", "core_attn,attn_proj,expert_fc1", "--json"])
    check(rc == 0 and rc2 == 0 and json.loads(out)["layout"]["offload"] == "core_attn,attn_proj,expert_fc1"
          and json.loads(out)["step_time_s"] == json.loads(out2)["step_time_s"],
          f"--fine-grained-activation-offloading --offload-modules is the twin's --offload-modules ({err.strip()[-150:]})")
    open(f, "w").write(ok + "--offload-modules core_attn")
    rc, out, err = run(["simulate", "--megatron-args", f, "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    check(rc == 0 and json.loads(out)["layout"]["offload"] == "none" and "--offload-modules" in summary(err)[1],
          "--offload-modules without the switch offloads nothing, as in Megatron, and is listed ignored")
    refused(ok + "--fine-grained-activation-offloading --offload-modules core_attn --activation-offload-fraction 0.5",
            ["--activation-offload-fraction"])
    refused(ok + "--fine-grained-activation-offloading --offload-modules attn_proj", ["attn_proj needs core_attn"])
    refused(ok + "--tensor-model-parallel-size ${TP}", ["--tensor-model-parallel-size", "unexpanded"])
    refused(ok + "--tensor-model-parallel-size 2", ["--sequence-parallel"])
    refused(ok + "--moe-expert-capacity-factor 1.0", ["--moe-expert-capacity-factor"])
    refused("--num-layers 48", ["--bf16"])
    refused(ok + "--moe-layer-freq [1]*47", ["--moe-layer-freq", "47", "48"])
    refused(ok + "--tensor-model-parallel-size two --sequence-parallel", ["'two' is not an integer"])
    refused(ok + "--fp8-format e5m2", ["--fp8-format"])
    refused("--bf16 'unclosed", ["quote"])
    # Recomputing uniform units of 0 layers: Megatron's loop never advances; refused as the typed
    # --recompute-num-layers 0 is, naming the argument and the rule.
    small = ("--bf16 --num-layers 4 --hidden-size 1024 --num-attention-heads 4 --vocab-size 128 "
             "--recompute-granularity full ")
    for method in ("--recompute-method uniform ", ""):
        open(f, "w").write(small + method + "--recompute-num-layers 0")
        rc, out, err = run(["simulate", "--megatron-args", f])
        check(rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("error:")
              and "--recompute-num-layers = 0" in err and "N >= 1" in err,
              f"--recompute-num-layers 0 ({method or 'no method'}) is refused in one line: {err.strip()[:200]}")
    # An attention-only model has no Mamba mixer: Megatron's derived Mamba heads (2 x 2880 / 64 = 90)
    # need not divide into its 8 default groups, and the Mamba arguments are reported ignored.
    gpt = ("--bf16 --num-layers 4 --hidden-size 2880 --num-attention-heads 64 --kv-channels 64 "
           "--group-query-attention --num-query-groups 8 --vocab-size 201088 --seq-length 4096 "
           "--micro-batch-size 1 --global-batch-size 8 --swiglu --ffn-hidden-size 2880 ")
    open(f, "w").write(gpt)
    rc, out, err = run(["simulate", "--megatron-args", f, "--json"])
    check(rc == 0 and json.loads(out)["step_time_s"] > 0,
          f"an attention-only run is not refused for Mamba dimensions ({err.strip()[-200:]})")
    open(f, "w").write(gpt + "--mamba-num-groups 8 --mamba-head-dim 64")
    rc, out, err = run(["simulate", "--megatron-args", f, "--json"])
    used, ignored = summary(err)
    check(rc == 0 and "--mamba-num-groups" in ignored and "--mamba-head-dim" in ignored,
          f"without a Mamba layer the Mamba arguments are reported ignored ({err.strip()[-200:]})")
    # With a Mamba layer (the file's hybrid pattern, or a typed --pattern) the rule still holds.
    open(f, "w").write(gpt.replace("--num-layers 4 ", "--hybrid-override-pattern M*M* "))
    rc, out, err = run(["simulate", "--megatron-args", f])
    check(rc == 2 and "mamba_num_heads = 90 must be a multiple of mamba_groups = 8" in err,
          f"a hybrid pattern keeps Megatron's Mamba defaults and their rule: {err.strip()[:200]}")
    open(f, "w").write(gpt)
    rc, out, err = run(["simulate", "--megatron-args", f, "--pattern", "M*M*"])
    check(rc == 2 and "mamba_num_heads = 90 must be a multiple of mamba_groups = 8" in err,
          f"a typed --pattern with Mamba layers keeps Megatron's Mamba defaults: {err.strip()[:200]}")
    rc, _, err = run(["pattern", "M*", "--megatron-args", ds])
    check(rc == 2 and "plan, simulate and search" in err, "other commands refuse --megatron-args")
    rc, _, err = run(["simulate", "--megatron-args", os.path.join(d, "missing.txt")])
    check(rc == 2 and "missing.txt" in err, "a missing file is named")

checks.exit()
