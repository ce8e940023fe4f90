#!/usr/bin/env python3
"""PyTorch side of bench_engine_step: loads the checkpoint and batch the C++ bench wrote, and
times forward + backward + AdamW of the same hybrid model (tests/engine/model_oracle.py's
composition of tests/oracle/torch_oracle.py's layers) in float32 on one thread, plus fwd+bwd of
each layer type's branch alone. Prints one JSON object. Usage: torch_train_step.py DIR STEPS"""
import json
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "engine"))
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
import model_oracle as M  # noqa: E402
import torch_oracle as L  # noqa: E402


def timed(reps, f):
    f()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t0) * 1000.0 / reps


def main():
    torch.set_num_threads(1)
    d, steps = Path(sys.argv[1]), int(sys.argv[2])
    manifest = json.loads((d / "ckpt" / "manifest.json").read_text())
    cfg, pattern = manifest["config"], manifest["pattern"]
    _, W = L.read_safetensors(d / "ckpt" / "model.safetensors")
    _, Bt = L.read_safetensors(d / "batch.safetensors")
    tokens, targets = Bt["tokens"].long(), Bt["targets"].long()
    P = {k: v.clone().requires_grad_() for k, v in W.items()}
    opt = torch.optim.AdamW(list(P.values()), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    first = []

    def step():
        opt.zero_grad()
        total, _ = M.forward(P, cfg, pattern, tokens, targets)
        first.append(total.item())
        total.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()

    step_ms = timed(steps, step)
    out = {"step_ms": step_ms, "first_loss": first[0], "layer_ms": {}}

    g = torch.Generator().manual_seed(3)
    B, T, C = tokens.shape[0], tokens.shape[1], cfg["hidden"]
    x = torch.randn(B, T, C, generator=g).requires_grad_()
    dout = torch.randn(B, T, C, generator=g)
    for sym, logical in M.physical_layers(pattern.split("/")[0]):
        if sym in out["layer_ms"]:
            continue
        prefix = f"decoder.layers.{logical}."
        sub = {k[len(prefix):]: v.detach().clone().requires_grad_() for k, v in W.items()
               if k.startswith(prefix) and k[len(prefix):].split(".")[0] in M.NS[sym]}
        sub.pop(M.PRENORM[sym])
        meta = {"window": str(cfg["window"]) if sym == "W" else "0", "loss_scale": "1"}

        def fb():
            y, _ = M.FN[sym](sub, x, cfg, meta)
            y.backward(dout)

        out["layer_ms"][sym] = timed(steps, fb)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
