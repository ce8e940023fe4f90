#!/usr/bin/env python3
"""PyTorch autograd oracle for the hybrid-twin CPU engine's layers.

Reads the safetensors dumps written by oracle_dump (one per layer and dtype: weights, input,
upstream gradient, the engine's output and gradients), recomputes every layer from its
mathematical definition with torch autograd, and compares. Each layer is written here
independently of the C++ code (textbook forms where they differ: the GDN state update uses the
explicit matrix (I - beta k k^T), attention uses a masked score matrix, MoE evaluates every
expert densely and gathers).

Usage: torch_oracle.py <dump_dir>      exit 0 when every comparison is within its bound.

Error measure, per tensor: normwise relative error  max|engine - ref| / max|ref|.
Bounds:
  float64 dumps: engine vs torch float64                   <= 1e-10
  float32 dumps: engine vs torch float64 on the same inputs <= 1e-5   (the brief's float32 bound)
  and, reported for context, torch float32 vs torch float64 (PyTorch's own float32 error).
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

BOUND_F64 = 1e-10
BOUND_F32 = 1e-5

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32}


def read_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        arr = np.frombuffer(raw[base + a:base + b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name] = torch.from_numpy(arr.copy())
    return meta, tensors


# ---------------------------------------------------------------- shared pieces

def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """Rotate-half rotary embedding; x is (B, T, ..., d), position = index along dim 1."""
    T, d = x.shape[1], x.shape[-1]
    half = d // 2
    i = torch.arange(half, dtype=torch.float64)
    freq = theta ** (-2.0 * i / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]  # (T, half)
    shape = [1, T] + [1] * (x.dim() - 3) + [half]
    cos = torch.cos(ang).to(x.dtype).reshape(shape)
    sin = torch.sin(ang).to(x.dtype).reshape(shape)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def causal_depthwise_conv(x, w, b):
    """x (B, T, Ch), w (Ch, K): out[t] = b + sum_k w[:, k] x[t - (K-1) + k]."""
    T, K = x.shape[1], w.shape[1]
    y = F.conv1d(x.transpose(1, 2), w.unsqueeze(1), b, padding=K - 1, groups=x.shape[2])
    return y[..., :T].transpose(1, 2)


def swiglu(x, fc1, fc2):
    f = fc1.shape[0] // 2
    h = x @ fc1.T
    return (F.silu(h[..., :f]) * h[..., f:]) @ fc2.T


# ---------------------------------------------------------------- layers

def mamba2(P, x, cfg, meta):
    H, Pd, N, G = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["mamba_state_dim"], cfg["mamba_num_groups"]
    B, T, _ = x.shape
    DI = H * Pd
    CD = DI + 2 * G * N
    zxbcdt = x @ P["mixer.in_proj.weight"].T
    z, xbc, dt = torch.split(zxbcdt, [DI, CD, H], dim=-1)
    xbc = F.silu(causal_depthwise_conv(xbc, P["mixer.conv1d.weight"], P["mixer.conv1d.bias"]))
    xs, Bm, Cm = torch.split(xbc, [DI, G * N, G * N], dim=-1)
    dt = F.softplus(dt + P["mixer.dt_bias"])
    A = -torch.exp(P["mixer.A_log"])
    xs = xs.reshape(B, T, H, Pd)
    Bh = Bm.reshape(B, T, G, N).repeat_interleave(H // G, dim=2)
    Ch = Cm.reshape(B, T, G, N).repeat_interleave(H // G, dim=2)
    h = torch.zeros(B, H, Pd, N, dtype=x.dtype)
    ys = []
    for t in range(T):
        a = torch.exp(dt[:, t] * A)
        h = a[..., None, None] * h + dt[:, t, :, None, None] * xs[:, t, :, :, None] * Bh[:, t, :, None, :]
        ys.append((h * Ch[:, t, :, None, :]).sum(-1) + P["mixer.D"][:, None] * xs[:, t])
    y = torch.stack(ys, dim=1).reshape(B, T, DI)
    # RMSNormGated(norm_before_gate=False, group_size=DI/G): gate first, then per-group norm.
    g = (y * F.silu(z)).reshape(B, T, G, DI // G)
    normed = (g * torch.rsqrt((g * g).mean(-1, keepdim=True) + cfg["norm_eps"])).reshape(B, T, DI)
    normed = normed * P["mixer.norm.weight"]
    return normed @ P["mixer.out_proj.weight"].T, {}


def gdn(P, x, cfg, meta):
    Hk, Hv, dk, dv = cfg["gdn_num_heads"], cfg["gdn_num_v_heads"], cfg["gdn_head_dim_qk"], cfg["gdn_head_dim_v"]
    B, T, _ = x.shape
    KD, VD = Hk * dk, Hv * dv
    proj = x @ P["self_attention.in_proj.weight"].T
    q, k, v, z, b, a = torch.split(proj, [KD, KD, VD, VD, Hv, Hv], dim=-1)
    qkv = F.silu(causal_depthwise_conv(torch.cat([q, k, v], dim=-1), P["self_attention.conv1d.weight"], None))
    q, k, v = torch.split(qkv, [KD, KD, VD], dim=-1)

    def l2(u):
        u = u.reshape(B, T, Hk, dk)
        return (u / torch.sqrt((u * u).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(Hv // Hk, dim=2)

    q, k = l2(q), l2(k)
    v = v.reshape(B, T, Hv, dv)
    beta = torch.sigmoid(b)
    g = -torch.exp(P["self_attention.A_log"]) * F.softplus(a + P["self_attention.dt_bias"])
    eye = torch.eye(dk, dtype=x.dtype)
    S = torch.zeros(B, Hv, dv, dk, dtype=x.dtype)
    os_ = []
    for t in range(T):
        kt, bt = k[:, t], beta[:, t, :, None, None]
        M = eye - bt * kt[..., :, None] * kt[..., None, :]
        S = torch.exp(g[:, t])[..., None, None] * S @ M + bt * v[:, t, :, :, None] * kt[..., None, :]
        os_.append((S @ q[:, t, :, :, None]).squeeze(-1) / math.sqrt(dk))
    o = torch.stack(os_, dim=1)  # (B, T, Hv, dv)
    o = rmsnorm(o, P["self_attention.out_norm.weight"], cfg["norm_eps"]) * F.silu(z.reshape(B, T, Hv, dv))
    return o.reshape(B, T, VD) @ P["self_attention.out_proj.weight"].T, {}


def mla(P, x, cfg, meta):
    H = cfg["num_heads"]
    kvr, dn, dr, dv = cfg["mla_kv_lora_rank"], cfg["mla_qk_head_dim"], cfg["mla_qk_pos_head_dim"], cfg["mla_v_head_dim"]
    B, T, _ = x.shape
    eps = cfg["norm_eps"]
    if "self_attention.linear_q_proj.weight" in P:  # mla_q_lora_rank == 0: direct projection
        q = (x @ P["self_attention.linear_q_proj.weight"].T).reshape(B, T, H, dn + dr)
    else:
        cq = rmsnorm(x @ P["self_attention.linear_q_down_proj.weight"].T,
                     P["self_attention.linear_q_up_proj.layer_norm_weight"], eps)
        q = (cq @ P["self_attention.linear_q_up_proj.weight"].T).reshape(B, T, H, dn + dr)
    ckv = x @ P["self_attention.linear_kv_down_proj.weight"].T
    lat, kpe = torch.split(ckv, [kvr, dr], dim=-1)
    kv = (rmsnorm(lat, P["self_attention.linear_kv_up_proj.layer_norm_weight"], eps)
          @ P["self_attention.linear_kv_up_proj.weight"].T).reshape(B, T, H, dn + dv)
    k_nope, v = torch.split(kv, [dn, dv], dim=-1)
    q_nope, q_pe = torch.split(q, [dn, dr], dim=-1)
    if cfg["rope"] and dr > 0:
        q_pe = rope(q_pe, cfg["rope_theta"])
        kpe = rope(kpe, cfg["rope_theta"])
    Q = torch.cat([q_nope, q_pe], dim=-1)
    K = torch.cat([k_nope, kpe[:, :, None, :].expand(B, T, H, dr)], dim=-1)
    scores = torch.einsum("bthd,bshd->bhts", Q, K) / math.sqrt(dn + dr)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    o = torch.einsum("bhts,bshd->bthd", att, v).reshape(B, T, H * dv)
    return o @ P["self_attention.linear_proj.weight"].T, {}


def attention(P, x, cfg, meta):
    H, G, D = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    window = int(meta.get("window", "0"))
    B, T, C = x.shape
    hpg = H // G
    qkv = (x @ P["self_attention.linear_qkv.weight"].T).reshape(B, T, G, hpg + 2, D)
    q = qkv[:, :, :, :hpg].reshape(B, T, H, D)
    k, v = qkv[:, :, :, hpg], qkv[:, :, :, hpg + 1]
    if cfg["rope"]:
        q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
    k, v = k.repeat_interleave(hpg, dim=2), v.repeat_interleave(hpg, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
    t_idx, s_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = s_idx <= t_idx
    if window > 0:
        allowed = allowed & (s_idx > t_idx - window)
    att = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    o = torch.einsum("bhts,bshd->bthd", att, v).reshape(B, T, H * D)
    return o @ P["self_attention.linear_proj.weight"].T, {}


def mlp(P, x, cfg, meta):
    return swiglu(x, P["mlp.linear_fc1.weight"], P["mlp.linear_fc2.weight"]), {}


def moe(P, x, cfg, meta):
    E, k = cfg["num_experts"], cfg["moe_topk"]
    s = float(meta["loss_scale"])
    B, T, C = x.shape
    n = B * T
    xs = x.reshape(n, C)
    logits = xs @ P["mlp.router.weight"].T
    probs = torch.softmax(logits, dim=-1)
    vals, idx = torch.topk(logits, k, dim=-1)
    w = torch.softmax(vals, dim=-1)
    dense = torch.stack([swiglu(xs, P[f"mlp.experts.local_experts.{e}.linear_fc1.weight"],
                                P[f"mlp.experts.local_experts.{e}.linear_fc2.weight"]) for e in range(E)])
    rows = torch.arange(n)
    y = sum(w[:, j:j + 1] * dense[idx[:, j], rows] for j in range(k))
    if "mlp.shared_experts.linear_fc1.weight" in P:
        y = y + swiglu(xs, P["mlp.shared_experts.linear_fc1.weight"], P["mlp.shared_experts.linear_fc2.weight"])
    tokens = torch.bincount(idx.reshape(-1), minlength=E).to(x.dtype)
    aux = s * E * cfg["moe_aux_loss_coeff"] / (k * n * n) * (probs.sum(0) * tokens).sum()
    z = s * cfg["moe_z_loss_coeff"] * (torch.logsumexp(logits, dim=-1) ** 2).mean()
    return y.reshape(B, T, C), {"aux_loss": aux, "z_loss": z}


def rmsnorm_layer(P, x, cfg, meta):
    return rmsnorm(x, P["weight"], cfg["norm_eps"]), {}


def output_layer(P, x, cfg, meta):
    return x @ P["weight"].T, {}


LAYERS = {"mamba2": mamba2, "gdn": gdn, "mla": mla, "mla_direct_q": mla, "attention": attention,
          "attention_window": attention, "mlp": mlp, "moe": moe, "rmsnorm": rmsnorm_layer,
          "output": output_layer}


def run(layer, meta, ts, dtype):
    """Returns {name: tensor} of output, extra scalars and gradients, computed in `dtype`."""
    cfg = json.loads(meta["config"])
    P = {k[len("param/"):]: v.to(dtype).requires_grad_() for k, v in ts.items() if k.startswith("param/")}
    res = {}
    if layer == "embedding":
        out = P["weight"][ts["tokens"].long()]
        out.backward(ts["dout"].to(dtype))
        res["out"] = out
    elif layer == "cross_entropy":
        logits = ts["input"].to(dtype).requires_grad_()
        ce = torch.logsumexp(logits, -1) - logits.gather(1, ts["targets"].long()[:, None])[:, 0]
        loss = (ts["weights"].to(dtype) * ce).sum()
        loss.backward()
        res["out"] = loss
        res["grad/input"] = logits.grad
    else:
        x = ts["input"].to(dtype).requires_grad_()
        out, scalars = LAYERS[layer](P, x, cfg, meta)
        total = (out * ts["dout"].to(dtype)).sum() + sum(scalars.values())
        total.backward()
        res["out"] = out
        res.update(scalars)
        res["grad/input"] = x.grad
    for k, v in P.items():
        res["grad/" + k] = v.grad if v.grad is not None else torch.zeros_like(v)
    return {k: v.detach() for k, v in res.items()}


def rel(a, ref):
    a, ref = a.double(), ref.double()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    diff = (a - ref).abs().max().item() if ref.numel() else 0.0
    return diff / scale if scale > 0 else diff


def main():
    if len(sys.argv) != 2:
        print("usage: torch_oracle.py <dump_dir>", file=sys.stderr)
        return 2
    files = sorted(Path(sys.argv[1]).glob("*.safetensors"))
    if not files:
        print(f"error: no dumps in {sys.argv[1]}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    failures = []
    print(f"{'layer':18} {'dtype':5} {'tensors':>7} {'engine vs torch64':>18} {'torch32 vs torch64':>19} {'worst tensor'}")
    for path in files:
        meta, ts = read_safetensors(path)
        layer, dt = meta["layer"], meta["dtype"]
        ref64 = run(layer, meta, ts, torch.float64)
        names = [k for k in ts if k == "out" or k.startswith("grad/") or k in ("aux_loss", "z_loss")]
        missing = sorted(set(ref64) - set(names))
        if missing:
            failures.append(f"{path.name}: engine dump lacks {missing}")
        errs = {n: rel(ts[n], ref64[n]) for n in names}
        worst_name = max(errs, key=errs.get)
        worst = errs[worst_name]
        t32 = ""
        if dt == "f32":
            ref32 = run(layer, meta, ts, torch.float32)
            t32 = f"{max(rel(ref32[n], ref64[n]) for n in names):.2e}"
        bound = BOUND_F32 if dt == "f32" else BOUND_F64
        status = "ok" if worst <= bound else "FAIL"
        print(f"{layer:18} {dt:5} {len(names):7d} {worst:18.2e} {t32:>19} {worst_name} [{status}]")
        if worst > bound:
            failures.append(f"{path.name}: {worst_name} relative error {worst:.3e} > {bound:.0e}")
    for f in failures:
        print("FAIL " + f)
    print(f"{len(files)} dumps, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
