#!/usr/bin/env python3
"""PyTorch side of bench_engine_step: loads the checkpoint and batch the C++ bench wrote, and
times forward + backward + AdamW of the same hybrid model in float32 on THREADS threads, plus
fwd+bwd of each layer type's branch alone. Prints one JSON object.

Usage: torch_train_step.py DIR STEPS THREADS [DEVICE]
DEVICE (default cpu) may be cuda: the same model on the GPU, float32 with TF32 off, every timing
taken after torch.cuda.synchronize(); "fwdbwd_ms" is forward + backward without the optimizer.

The model is tests/engine/model_oracle.py's composition of tests/oracle/torch_oracle.py's layers
(the judge of the engine's math), with four layer functions swapped for the fastest eager forms
of the same math, so that the peer is PyTorch at its best rather than a textbook oracle:
  M  Mamba2: dA = exp(dt A) and dt x B for all steps as whole-tensor ops, then one addcmul per
     step for h_t = dA_t h_{t-1} + dt x B_t, and y = C . h for all steps in one einsum;
  G  Gated DeltaNet: S_t = a S + beta (v - a S k) k^T per step with batched matmuls (the
     oracle's explicit (I - beta k k^T) matrix is a dk x dk product per step);
  E  MoE: each expert runs only on the tokens routed to it (the oracle evaluates every expert
     densely and gathers);
  *  attention: grouped-query products without repeating k and v, one additive causal mask.
MLP (-) is the oracle's (x @ fc1^T, silu * up, @ fc2^T). Each swapped layer is checked against
the oracle layer on the benchmark's input (relative error reported as "peer_check").

BLAS: Debian's torch calls whatever libblas.so.3 the system selects (update-alternatives
libblas.so.3-<arch>); the reference BLAS is ~28x slower on GEMMs than OpenBLAS. The script reports
the library actually mapped into this process and pins OpenBLAS's own pool to THREADS as well.
"""
import ctypes
import json
import os
import resource
import sys
import time
from pathlib import Path

THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
DEVICE = sys.argv[4] if len(sys.argv) > 4 else "cpu"
# OpenBLAS sizes its pool when it is loaded (with torch): set it before the import.
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "engine"))
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
import model_oracle as M  # noqa: E402
import torch_oracle as L  # noqa: E402


# ---------------------------------------------------------------- the fast eager layers

def mamba2_fast(P, x, cfg, meta):
    H, Pd, N, G = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["mamba_state_dim"], cfg["mamba_num_groups"]
    B, T, _ = x.shape
    DI = H * Pd
    CD = DI + 2 * G * N
    zxbcdt = F.linear(x, P["mixer.in_proj.weight"])
    z, xbc, dt = torch.split(zxbcdt, [DI, CD, H], dim=-1)
    xbc = F.silu(L.causal_depthwise_conv(xbc, P["mixer.conv1d.weight"], P["mixer.conv1d.bias"]))
    xs, Bm, Cm = torch.split(xbc, [DI, G * N, G * N], dim=-1)
    dt = F.softplus(dt + P["mixer.dt_bias"])
    dA = torch.exp(dt * -torch.exp(P["mixer.A_log"]))  # (B, T, H)
    xs = xs.reshape(B, T, H, Pd)
    Bh = Bm.reshape(B, T, G, N).repeat_interleave(H // G, dim=2)
    Ch = Cm.reshape(B, T, G, N).repeat_interleave(H // G, dim=2)
    dBx = (dt[..., None] * xs)[..., None] * Bh[:, :, :, None, :]  # (B, T, H, Pd, N)
    # unbind, not dBx[:, t]: autograd turns each indexed slice into a full-size zero gradient
    a = torch.unbind(dA[..., None, None], dim=1)
    dbx = torch.unbind(dBx, dim=1)
    h = dbx[0]
    hs = [h]
    for t in range(1, T):
        h = torch.addcmul(dbx[t], a[t], h)
        hs.append(h)
    y = torch.einsum("bthpn,bthn->bthp", torch.stack(hs, dim=1), Ch) + P["mixer.D"][:, None] * xs
    g = (y.reshape(B, T, DI) * F.silu(z)).reshape(B, T, G, DI // G)
    normed = (g * torch.rsqrt((g * g).mean(-1, keepdim=True) + cfg["norm_eps"])).reshape(B, T, DI)
    return F.linear(normed * P["mixer.norm.weight"], P["mixer.out_proj.weight"]), {}


def gdn_fast(P, x, cfg, meta):
    Hk, Hv, dk, dv = cfg["gdn_num_heads"], cfg["gdn_num_v_heads"], cfg["gdn_head_dim_qk"], cfg["gdn_head_dim_v"]
    B, T, _ = x.shape
    KD, VD = Hk * dk, Hv * dv
    proj = F.linear(x, P["self_attention.in_proj.weight"])
    q, k, v, z, b, a = torch.split(proj, [KD, KD, VD, VD, Hv, Hv], dim=-1)
    qkv = F.silu(L.causal_depthwise_conv(torch.cat([q, k, v], dim=-1), P["self_attention.conv1d.weight"], None))
    q, k, v = torch.split(qkv, [KD, KD, VD], dim=-1)

    def l2(u):
        u = u.reshape(B, T, Hk, dk)
        u = u / torch.sqrt((u * u).sum(-1, keepdim=True) + 1e-6)
        return u.repeat_interleave(Hv // Hk, dim=2).transpose(1, 2).reshape(B * Hv, T, dk)

    q, k = l2(q), l2(k)
    v = v.reshape(B, T, Hv, dv).transpose(1, 2).reshape(B * Hv, T, dv)
    beta = torch.sigmoid(b).transpose(1, 2).reshape(B * Hv, T, 1)
    decay = torch.exp(-torch.exp(P["self_attention.A_log"]) * F.softplus(a + P["self_attention.dt_bias"]))
    decay = decay.transpose(1, 2).reshape(B * Hv, T, 1)
    # Per-step operands by unbind (one gradient stack in backward, not one full-size zero
    # gradient per indexed slice).
    kc, qc = torch.unbind(k[..., None], dim=1), torch.unbind(q[..., None], dim=1)  # (BH, dk, 1)
    kr = torch.unbind(k[:, :, None, :], dim=1)  # (BH, 1, dk)
    vc = torch.unbind(v[..., None], dim=1)  # (BH, dv, 1)
    bt = torch.unbind(beta[..., None], dim=1)  # (BH, 1, 1)
    at = torch.unbind(decay[..., None], dim=1)  # (BH, 1, 1)
    S = x.new_zeros(B * Hv, dv, dk)
    os_ = []
    for t in range(T):
        aS = at[t] * S
        u = bt[t] * (vc[t] - torch.bmm(aS, kc[t]))  # (BH, dv, 1)
        S = torch.baddbmm(aS, u, kr[t])
        os_.append(torch.bmm(S, qc[t]))
    o = torch.stack(os_, dim=1).reshape(B, Hv, T, dv).transpose(1, 2) / (dk ** 0.5)  # (B, T, Hv, dv)
    o = L.rmsnorm(o, P["self_attention.out_norm.weight"], cfg["norm_eps"]) * F.silu(z.reshape(B, T, Hv, dv))
    return F.linear(o.reshape(B, T, VD), P["self_attention.out_proj.weight"]), {}


def swiglu_linear(x, fc1, fc2):
    f = fc1.shape[0] // 2
    h = F.linear(x, fc1)
    return F.linear(F.silu(h[..., :f]) * h[..., f:], fc2)


def moe_fast(P, x, cfg, meta):
    E, k = cfg["num_experts"], cfg["moe_topk"]
    s = float(meta["loss_scale"])
    B, T, C = x.shape
    n = B * T
    xs = x.reshape(n, C)
    logits = F.linear(xs, P["mlp.router.weight"])
    probs = torch.softmax(logits, dim=-1)
    vals, idx = torch.topk(logits, k, dim=-1)
    w = torch.softmax(vals, dim=-1)
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)  # expert-major, token order within an expert
    counts = torch.bincount(flat, minlength=E)
    rows = order // k  # token of each routed row
    xin = xs.index_select(0, rows)
    wr = w.reshape(-1).index_select(0, order)[:, None]
    outs, start = [], 0
    for e, c in enumerate(counts.tolist()):
        if c:
            outs.append(swiglu_linear(xin[start:start + c], P[f"mlp.experts.local_experts.{e}.linear_fc1.weight"],
                                      P[f"mlp.experts.local_experts.{e}.linear_fc2.weight"]))
        start += c
    y = xs.new_zeros(n, C).index_add(0, rows, torch.cat(outs) * wr)
    if "mlp.shared_experts.linear_fc1.weight" in P:
        y = y + swiglu_linear(xs, P["mlp.shared_experts.linear_fc1.weight"], P["mlp.shared_experts.linear_fc2.weight"])
    tokens = counts.to(x.dtype)
    aux = s * E * cfg["moe_aux_loss_coeff"] / (k * n * n) * (probs.sum(0) * tokens).sum()
    z = s * cfg["moe_z_loss_coeff"] * (torch.logsumexp(logits, dim=-1) ** 2).mean()
    return y.reshape(B, T, C), {"aux_loss": aux, "z_loss": z}


_MASKS = {}


def attention_fast(P, x, cfg, meta):
    H, G, D = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    window = int(meta.get("window", "0"))
    B, T, C = x.shape
    hpg = H // G
    qkv = F.linear(x, P["self_attention.linear_qkv.weight"]).reshape(B, T, G, hpg + 2, D)
    q, k, v = qkv[:, :, :, :hpg], qkv[:, :, :, hpg], qkv[:, :, :, hpg + 1]
    if cfg["rope"]:
        q, k = L.rope(q.reshape(B, T, H, D), cfg["rope_theta"]).reshape(B, T, G, hpg, D), L.rope(k, cfg["rope_theta"])
    key = (T, window, x.dtype)
    if key not in _MASKS:
        t_idx, s_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = s_idx <= t_idx
        if window > 0:
            allowed = allowed & (s_idx > t_idx - window)
        _MASKS[key] = torch.zeros(T, T, dtype=x.dtype).masked_fill(~allowed, float("-inf"))
    # (B, G, hpg*T, D) queries against (B, G, T, D) keys: no repeat of k and v per head.
    qg = q.permute(0, 2, 3, 1, 4).reshape(B, G, hpg * T, D)
    kg, vg = k.transpose(1, 2), v.transpose(1, 2)
    scores = torch.matmul(qg, kg.transpose(-1, -2)).reshape(B, G, hpg, T, T) * (D ** -0.5)
    att = torch.softmax(scores + _MASKS[key], dim=-1).reshape(B, G, hpg * T, T)
    o = torch.matmul(att, vg).reshape(B, G, hpg, T, D).permute(0, 3, 1, 2, 4).reshape(B, T, H * D)
    return F.linear(o, P["self_attention.linear_proj.weight"]), {}


FAST = {"M": mamba2_fast, "G": gdn_fast, "E": moe_fast, "*": attention_fast, "W": attention_fast}


# ---------------------------------------------------------------- environment report

def blas_report():
    """BLAS torch was built against, the library mapped into this process, OpenBLAS threads."""
    cfg = torch.__config__.show()
    built = next((ln.split("=", 1)[1].strip().rstrip(",") for ln in cfg.replace(",", "\n").splitlines()
                  if "BLAS_INFO" in ln), "?")
    torch.ones(64, 64) @ torch.ones(64, 64)  # make sure the BLAS is loaded
    libs = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and "blas" in Path(parts[5]).name.lower():
            libs.add(os.path.realpath(parts[5]))
    loaded = sorted(libs)
    threads = None
    for lib in loaded:
        try:
            so = ctypes.CDLL(lib)
            if hasattr(so, "openblas_set_num_threads"):
                so.openblas_set_num_threads(THREADS)
                threads = so.openblas_get_num_threads()
        except OSError:
            pass
    kind = ("OpenBLAS" if any("openblas" in p for p in loaded) or threads is not None
            else "reference BLAS" if any("/blas/" in p for p in loaded) else "unknown")
    return {"torch": torch.__version__, "built_with": built, "loaded": loaded, "kind": kind,
            "openblas_threads": threads}


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def sync():
    if DEVICE != "cpu":
        torch.cuda.synchronize()


def timed(reps, f):
    """Fastest of reps calls after a warm-up, in ms (as the C++ side: load only adds time)."""
    f()
    sync()
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        sync()
        ms = (time.perf_counter() - t0) * 1000.0
        best = ms if best is None else min(best, ms)
    return best


def main():
    torch.set_num_threads(THREADS)
    blas = blas_report()
    if DEVICE != "cpu":
        # The engine's GEMMs are FP32 without TF32 (cuBLAS pedantic): the peer computes the same.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_default_device(DEVICE)
    d, steps = Path(sys.argv[1]), int(sys.argv[2])
    manifest = json.loads((d / "ckpt" / "manifest.json").read_text())
    cfg, pattern = manifest["config"], manifest["pattern"]
    _, W = L.read_safetensors(d / "ckpt" / manifest["files"]["model"]["file"])
    _, Bt = L.read_safetensors(d / "batch.safetensors")
    W = {k: v.to(DEVICE) for k, v in W.items()}
    tokens, targets = Bt["tokens"].long().to(DEVICE), Bt["targets"].long().to(DEVICE)

    # Per layer type: the residual branch alone (no pre-norm), forward + backward on (B, T, C).
    g = torch.Generator(device="cpu").manual_seed(3)
    B, T, C = tokens.shape[0], tokens.shape[1], cfg["hidden"]
    x = torch.randn(B, T, C, generator=g, device="cpu").to(DEVICE).requires_grad_()
    dout = torch.randn(B, T, C, generator=g, device="cpu").to(DEVICE)
    layer_ms, check = {}, {}
    for sym, logical in M.physical_layers(pattern.split("/")[0]):
        if sym in layer_ms:
            continue
        prefix = f"decoder.layers.{logical}."
        sub = {k[len(prefix):]: v.detach().clone().requires_grad_() for k, v in W.items()
               if k.startswith(prefix) and k[len(prefix):].split(".")[0] in M.NS[sym]}
        sub.pop(M.PRENORM[sym])
        meta = {"window": str(cfg["window"]) if sym == "W" else "0", "loss_scale": "1"}
        fn = FAST.get(sym, M.FN[sym])
        if sym in FAST:  # same math as the oracle layer, checked on this input
            with torch.no_grad():
                check[sym] = rel(fn(sub, x, cfg, meta)[0], M.FN[sym](sub, x, cfg, meta)[0])

        def fb():
            y, _ = fn(sub, x, cfg, meta)
            y.backward(dout)

        layer_ms[sym] = timed(steps, fb)

    M.FN.update(FAST)  # the whole model with the fast layers
    P = {k: v.clone().requires_grad_() for k, v in W.items()}
    # The engine's AdamW: decoupled weight decay on matrices only, global-norm clipping at 1.
    groups = [{"params": [p for p in P.values() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in P.values() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    first = []

    def step():
        opt.zero_grad()
        total, _ = M.forward(P, cfg, pattern, tokens, targets)
        first.append(total.item())
        total.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()

    step_ms = timed(steps, step)

    def fwdbwd():
        opt.zero_grad()
        total, _ = M.forward(P, cfg, pattern, tokens, targets)
        total.backward()

    fwdbwd_ms = timed(steps, fwdbwd)
    out = {"step_ms": step_ms, "fwdbwd_ms": fwdbwd_ms, "first_loss": first[0], "layer_ms": layer_ms,
           "peer_check": check, "device": DEVICE if DEVICE == "cpu" else torch.cuda.get_device_name(),
           "threads": torch.get_num_threads(), "blas": blas,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
