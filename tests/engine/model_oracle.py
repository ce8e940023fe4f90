#!/usr/bin/env python3
"""Model-level PyTorch oracle for the hybrid-twin engine.

Reads what engine_model_dump wrote (a checkpoint directory with manifest.json + the model file it names,
and engine.safetensors with the token batch, the engine's float32 losses, logits and parameter
gradients), rebuilds the whole hybrid model in float64 with torch autograd from the pattern in
the manifest, using the per-layer oracle functions of tests/oracle/torch_oracle.py, and compares.

Model math (reference megatron-hybrid.md 5.1): embedding -> per physical layer
h = h + layer(rmsnorm(h)) -> final norm -> output layer -> mean CE; MTP depth d rolls ids and
targets left d times (0-filled), h_d = final_norm_d(layers(eh_proj(cat(enorm(emb), hnorm(h_{d-1})))))
and adds mtp_loss_scaling / depths * mean CE over the T - d valid positions; MoE losses in MTP
are scaled by 1/depths.

Error: normwise relative max|engine - ref| / max|ref| per tensor, bound 1e-4 (float32 engine
against float64 autograd through a whole model). Usage: model_oracle.py DUMP_DIR
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracle"))
import torch_oracle as L  # noqa: E402

BOUND = 1e-4
NS = {"M": ["mixer"], "G": ["self_attention"], "*": ["self_attention"],
      "+": ["input_layernorm", "self_attention"], "W": ["input_layernorm", "self_attention"],
      "-": ["mlp"], "E": ["pre_mlp_layernorm", "mlp"]}
PRENORM = {"M": "mixer.in_proj.layer_norm_weight", "G": "self_attention.in_proj.layer_norm_weight",
           "*": "self_attention.linear_qkv.layer_norm_weight", "+": "input_layernorm.weight",
           "W": "input_layernorm.weight", "-": "mlp.linear_fc1.layer_norm_weight",
           "E": "pre_mlp_layernorm.weight"}
FN = {"M": L.mamba2, "G": L.gdn, "*": L.attention, "W": L.attention, "+": L.mla, "-": L.mlp, "E": L.moe}


def physical_layers(main):
    """[(symbol, logical index)] of the main pattern; groups share their logical index."""
    out, logical, in_group = [], 0, False
    for ch in main:
        if ch == "|":
            continue
        if ch == "[":
            in_group = True
        elif ch == "]":
            in_group = False
            logical += 1
        else:
            out.append((ch, logical))
            if not in_group:
                logical += 1
    return out


def block(P, prefix, sym, h, cfg, scale):
    sub = {k[len(prefix):]: v for k, v in P.items()
           if k.startswith(prefix) and k[len(prefix):].split(".")[0] in NS[sym]}
    norm_w = sub.pop(PRENORM[sym])
    meta = {"window": str(cfg["window"]) if sym == "W" else "0", "loss_scale": str(scale)}
    y, extra = FN[sym](sub, L.rmsnorm(h, norm_w, cfg["norm_eps"]), cfg, meta)
    return h + y, extra


def roll(x):
    y = torch.zeros_like(x)
    y[:, :-1] = x[:, 1:]
    return y


def forward(P, cfg, pattern, tokens, targets):
    """The hybrid model's losses from parameters P (checkpoint keys -> tensors) and a batch.
    Returns (total, parts) with parts holding logits, per-depth MTP logits and every loss term."""
    B, T = tokens.shape
    main_pat, *mtp_parts = pattern.split("/")
    eps = cfg["norm_eps"]
    dt = P["output_layer.weight"].dtype

    def ce(logits, tgt, weights):
        lp = torch.log_softmax(logits, dim=-1)
        return -(lp.gather(-1, tgt[..., None]).squeeze(-1) * weights).sum()

    aux = torch.zeros((), dtype=dt)
    z = torch.zeros((), dtype=dt)
    emb = P["embedding.word_embeddings.weight"]
    h = emb[tokens]
    for sym, logical in physical_layers(main_pat):
        h, extra = block(P, f"decoder.layers.{logical}.", sym, h, cfg, 1.0)
        aux, z = aux + extra.get("aux_loss", 0.0), z + extra.get("z_loss", 0.0)
    fn_key = "decoder.final_layernorm.weight" if "[" in main_pat else "decoder.final_norm.weight"
    hf = L.rmsnorm(h, P[fn_key], eps)
    out_w = P["output_layer.weight"]
    logits = hf @ out_w.T
    lm = ce(logits, targets, torch.full((B, T), 1.0 / (B * T), dtype=dt))
    ref = {"logits": logits, "loss.lm": lm}
    depths = len(mtp_parts)
    prev, ids, tgt = hf, tokens, targets
    for d in range(depths):
        pre = f"mtp.layers.{d}."
        ids, tgt = roll(ids), roll(tgt)
        en = L.rmsnorm(emb[ids], P[pre + "enorm.weight"], eps)
        hn = L.rmsnorm(prev, P[pre + "hnorm.weight"], eps)
        x = torch.cat([en, hn], dim=-1) @ P[pre + "eh_proj.weight"].T
        for j, sym in enumerate(mtp_parts[d]):
            x, extra = block(P, f"{pre}mtp_model_layer.layers.{j}.", sym, x, cfg, 1.0 / depths)
            aux, z = aux + extra.get("aux_loss", 0.0), z + extra.get("z_loss", 0.0)
        prev = L.rmsnorm(x, P[pre + "final_layernorm.weight"], eps)
        lg = prev @ out_w.T
        valid = max(0, T - (d + 1))
        w = torch.zeros((B, T), dtype=dt)
        if valid:
            w[:, :valid] = cfg["mtp_loss_scaling"] / depths / (B * valid)
        ref[f"loss.mtp.{d}"], ref[f"mtp_logits.{d}"] = ce(lg, tgt, w), lg
    total = lm + aux + z + sum(ref[f"loss.mtp.{d}"] for d in range(depths))
    ref["loss.total"], ref["loss.aux"], ref["loss.z"] = total, aux, z
    return total, ref


def main():
    dump = Path(sys.argv[1])
    manifest = json.loads((dump / "ckpt" / "manifest.json").read_text())
    cfg, pattern = manifest["config"], manifest["pattern"]
    _, W = L.read_safetensors(dump / "ckpt" / manifest["files"]["model"]["file"])
    _, E = L.read_safetensors(dump / "engine.safetensors")
    P = {k: v.to(torch.float64).requires_grad_() for k, v in W.items()}
    total, ref = forward(P, cfg, pattern, E["tokens"].long(), E["targets"].long())
    total.backward()
    for k, p in P.items():
        ref["grad/" + k] = p.grad if p.grad is not None else torch.zeros_like(p)

    worst, failed = 0.0, []
    for name, r in ref.items():
        e = E[name].to(torch.float64).reshape(r.shape)
        r = r.detach()
        err = ((e - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
        worst = max(worst, err)
        if err > BOUND:
            failed.append((name, err))
    missing = [k for k in E if k.startswith("grad/") and k not in ref]
    print(f"model oracle '{pattern}': {len(ref)} tensors compared, worst normwise rel err {worst:.3e} "
          f"(bound {BOUND:g}); loss engine {E['loss.total'].item():.6f} torch {ref['loss.total'].item():.6f}")
    for name, err in failed:
        print(f"  FAIL {name}: {err:.3e}")
    for k in missing:
        print(f"  FAIL engine gradient {k} has no parameter in the checkpoint")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
