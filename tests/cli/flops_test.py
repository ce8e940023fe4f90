#!/usr/bin/env python3
"""Model FLOPs, TFLOP/s and MFU (issue 30 item 4) against a plain count written here from
megatron-parallel.md 7.1 (hybrid path: '*' 'W' '-' 'E' 'M' 'G', logits, MTP depths) and 7.2
(the GPT path's MLA term for '+'), with every symbol at its own sizes (the twin does not
hard-code Mamba's inner width to 2h as Megatron's hybrid path does). For shipped cards covering
GQA with an output gate, sliding windows, MLA, Mamba-2, Gated DeltaNet, MoE with shared experts
and latent-free routing, and MTP: simulate --json's model TFLOP/s per GPU must equal
3 x forward x tokens / (step x GPUs) and its MFU that over the H100's 989 TFLOP/s, to rounding.

usage: flops_test.py HYBRID_TWIN
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run


def forward_per_token(symbol, d, s):
    """Forward FLOPs of one layer for one token of a sequence of s tokens."""
    h = d["hidden"]
    x = 3 if d["gated_ffn"] else 2
    if symbol in "*W":
        q, kv = d["num_heads"] * d["head_dim"], d["num_kv_heads"] * d["head_dim"]
        keys = min(d["window"], s / 2) if symbol == "W" else s / 2
        return 4 * h * (q + kv) + 4 * keys * q  # 4 Nt h (q + kv) + 2 S2 q over the causal half
    if symbol in "+DCH":
        a, qk, r = d["num_heads"], d["head_dim"], d["mla_rope_head_dim"]
        v = d["mla_v_head_dim"] or d["head_dim"]
        ql, kl = d["q_lora_rank"], d["kv_lora_rank"]
        macs = ql * (h + a * (qk + r) + 1) + kl * (h + a * (qk + v) + 1) + h * r + a * v * h
        keys = {"+": s / 2, "D": min(d["window"], s / 2), "C": s / 8, "H": s / 256}[symbol]
        return 2 * macs + 2 * keys * a * (qk + r + v)
    if symbol == "M":
        heads = d["mamba_num_heads"]
        di, gn, n = heads * d["mamba_head_dim"], d["mamba_groups"] * d["mamba_state"], d["mamba_state"]
        return 2 * h * (2 * di + 2 * gn + heads) + 7 * di * n + 2 * di * h
    if symbol == "G":
        hv, dv = d["gdn_num_heads"], d["gdn_head_dim"]
        qk = (d["gdn_key_heads"] or hv) * (d["gdn_key_head_dim"] or dv)
        v = hv * dv
        p = 2 * qk + 2 * v + 2 * hv
        return 2 * (h * p + d["conv_kernel"] * (2 * qk + v) + 4 * hv * dv * dv + h * v)
    if symbol == "-":
        return 2 * x * h * d["ffn_hidden"]
    if symbol == "E":
        width = d["moe_latent_size"] or h
        latent = 4 * h * d["moe_latent_size"] if d["moe_latent_size"] else 0
        return 2 * x * width * d["moe_ffn_hidden"] * d["top_k"] + latent + 2 * x * h * d["shared_expert_ffn"]
    raise ValueError(symbol)


def step_flops(pattern, d, tokens, s):
    main, *mtp = pattern.split("/")
    layers = [c for c in main if c not in "[]|"]
    forward = sum(forward_per_token(c, d, s) for c in layers)
    for depth in mtp:
        forward += sum(forward_per_token(c, d, s) for c in depth if c not in "[]|")
    forward += 2 * d["hidden"] * d["vocab"] * (1 + len(mtp))
    return 3 * forward * tokens


runs = {
    "qwen3-30b-a3b": ["--gpus", "16", "--ep", "8", "--gbs", "32"],                  # GQA + MoE
    "qwen3-next-80b-a3b": ["--gpus", "32", "--ep", "8", "--pp", "4", "--gbs", "64"],  # GDN, gate, shared, MTP
    "deepseek-v3": ["--gpus", "16", "--ep", "16", "--gbs", "16", "--seq-len", "1024"],  # MLA, MTP
    "nemotron-h-8b": ["--gpus", "8", "--gbs", "16"],                                 # Mamba-2, MLP
    "nemotron-3-nano": ["--gpus", "8", "--ep", "8", "--gbs", "16"],                  # Mamba-2 + MoE, squared ReLU
}
# Symbols no shipped card holds, on a card's dimensions: a sliding window, DeepSeek's sparse and
# compressed attention kinds.
patterns = {"qwen3-30b-a3b": "[WE][W-][WE][WE]", "deepseek-v3": "[+-][DE][CE][HE]"}
for name, layout in list(runs.items()) + [(n + " " + p, ["--pattern", p, "--gpus", "8", "--ep", "8", "--gbs", "16",
                                                        "--seq-len", "4096", "--no-overlap", "--no-delay-wgrad"])
                                          for n, p in patterns.items()]:
    name = name.split()[0]
    card = json.loads(run(["models", name, "--json"])[1])
    if "--pattern" in layout:
        card["pattern"] = layout[layout.index("--pattern") + 1]
        name += " " + card["pattern"]
    rc, out, err = run(["simulate", "--model", name.split()[0], "--platform", "dgx-h100", "--json"] + layout)
    if rc != 0:
        check(False, f"{name}: simulate runs ({err.strip()[-200:]})")
        continue
    r = json.loads(out)
    s = r["layout"]["seq_len"]
    tokens = r["layout"]["gbs"] * s
    want = step_flops(card["pattern"], card["dims"], tokens, s)
    got = r["model_tflops_per_gpu"] * 1e12 * r["step_time_s"] * r["gpus"]
    check(abs(got - want) <= 1e-9 * want, f"{name}: model FLOPs per step {got:.6e} = the plain count {want:.6e}")
    check(abs(r["mfu"] - r["model_tflops_per_gpu"] / 989) <= 1e-12, f"{name}: MFU = TFLOP/s per GPU / 989 ({r['mfu']:.4f})")
checks.exit()
