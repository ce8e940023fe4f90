#!/usr/bin/env python3
"""Whole-model PyTorch oracle for the hybrid-twin engine.

Reads the dumps of oracle_model_dump (one per pattern and dtype: pattern text, configuration,
tokens, targets, every parameter and gradient under its checkpoint key, the loss terms), builds
the model from the pattern text alone and recomputes the loss and every gradient with autograd.

Written from the reference (megatron-hybrid.md), not from the engine: its own pattern parser
(groups, pipes, MTP depths), its own checkpoint-key rules (a group's members share the logical
prefix decoder.layers.<L>. and own disjoint namespaces; decoder.final_layernorm when the pattern
has groups, else decoder.final_norm; mtp.layers.<d>.{enorm,hnorm,eh_proj,final_layernorm} and
mtp.layers.<d>.mtp_model_layer.layers.<j>.), its own wiring: embedding, pre-norm residual
blocks member by member, final norm, output layer, mean cross-entropy; MTP depth d reads the
tokens and targets rolled d+1 steps left (freed positions 0), h_d = final_layernorm_d(inner_d(
eh_proj(cat(enorm(emb(ids_d)), hnorm(h_{d-1}))))) with h_{-1} the decoder output after its final
norm, the shared embedding and output layer, a loss of mtp_loss_scaling / depths times the mean
cross-entropy over the positions whose target exists, and MoE router losses inside MTP divided
by the number of depths. The layer math comes from torch_oracle.py.

Usage: torch_model_oracle.py <dump_dir> [--plant skip-group-residual|mtp-scale-per-depth]

Error measure per tensor: max|engine - ref| / max|ref| (torch_oracle.rel), the worst tensor of a
model counted. Bounds:
  float64 models: engine vs torch float64                                   <= 1e-9
  float32 models: engine vs torch float64 on the same weights  <= 8 x (torch float32 vs torch
                  float64 on that model), and never less than 1e-6
A whole model's float32 error depends on its conditioning (PyTorch's own float32 run of these
models is off by 8e-7 to 5e-4), so the float32 bound is relative to PyTorch's own float32 error
on the same model: the engine may be at most 8 times less accurate than PyTorch. --plant builds
the reference with a wiring fault and passes only if every model the fault applies to disagrees
with the engine beyond these bounds.
"""
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_oracle as layers  # noqa: E402  (the layer definitions and the dump reader)

BOUND_F64 = 1e-9
F32_FACTOR, F32_FLOOR = 8.0, 1e-6

# Top-level checkpoint namespaces each symbol owns inside its layer prefix, and its pre-norm.
NAMESPACES = {"M": ("mixer",), "G": ("self_attention",), "*": ("self_attention",),
              "+": ("input_layernorm", "self_attention"), "W": ("input_layernorm", "self_attention"),
              "-": ("mlp",), "E": ("pre_mlp_layernorm", "mlp")}
PRENORM = {"M": "mixer.in_proj.layer_norm_weight", "G": "self_attention.in_proj.layer_norm_weight",
           "*": "self_attention.linear_qkv.layer_norm_weight", "+": "input_layernorm.weight",
           "W": "input_layernorm.weight", "-": "mlp.linear_fc1.layer_norm_weight", "E": "pre_mlp_layernorm.weight"}


class OracleError(Exception):
    pass


def parse(text):
    """'M[*E]|-/ME/ME' -> (['M', '*E', '-'], grouped=True, mtp='ME', depths=2)."""
    main, *mtps = text.split("/")
    if any(m != mtps[0] for m in mtps):
        raise OracleError(f"MTP depths differ in {text!r}")
    items, grouped, i = [], False, 0
    main = main.replace("|", "")
    while i < len(main):
        if main[i] == "[":
            j = main.index("]", i)
            items.append(main[i + 1:j])
            grouped, i = True, j + 1
        else:
            items.append(main[i])
            i += 1
    return items, grouped, (mtps[0] if mtps else ""), len(mtps)


def roll_left(x):
    y = torch.zeros_like(x)
    y[:, :-1] = x[:, 1:]
    return y


class Model:
    """The reference model over the dumped parameters (a dict key -> leaf tensor)."""

    def __init__(self, text, cfg, params, plant=None):
        self.items, self.grouped, self.mtp, self.depths = parse(text)
        self.cfg, self.P, self.plant = cfg, params, plant
        self.claimed = set()

    def take(self, key):
        if key not in self.P:
            raise OracleError(f"the engine has no parameter {key}")
        self.claimed.add(key)
        return self.P[key]

    def member_params(self, prefix, layer_keys, symbol):
        """The parameters under `prefix` in the namespaces `symbol` owns, keyed relative to it."""
        own = {k[len(prefix):]: v for k, v in layer_keys.items() if k[len(prefix):].split(".")[0] in NAMESPACES[symbol]}
        for k in own:
            key = prefix + k
            if key in self.claimed:
                raise OracleError(f"{key} is claimed by two members of one layer")
            self.claimed.add(key)
        if PRENORM[symbol] not in own:
            raise OracleError(f"{prefix}{PRENORM[symbol]} (the pre-norm of '{symbol}') is missing")
        return own

    def block(self, h, symbol, prefix, layer_keys, loss_scale, residual=True):
        Pm = self.member_params(prefix, layer_keys, symbol)
        x = layers.rmsnorm(h, Pm[PRENORM[symbol]], self.cfg["norm_eps"])
        meta = {}
        if symbol == "W":
            meta["window"] = str(self.cfg["window"])
        if symbol == "E":
            meta["loss_scale"] = str(loss_scale)
        fn = {"M": layers.mamba2, "G": layers.gdn, "*": layers.attention, "W": layers.attention, "+": layers.mla,
              "-": layers.mlp, "E": layers.moe}[symbol]
        out, scalars = fn(Pm, x, self.cfg, meta)
        self.aux = self.aux + scalars.get("aux_loss", 0.0)
        self.z = self.z + scalars.get("z_loss", 0.0)
        return h + out if residual else out

    def under(self, prefix):
        return {k: v for k, v in self.P.items() if k.startswith(prefix)}

    def forward(self, tokens, targets):
        cfg = self.cfg
        eps = cfg["norm_eps"]
        tokens, targets = tokens.long(), targets.long()
        self.aux = self.z = 0.0
        wte = self.take("embedding.word_embeddings.weight")
        out_w = self.take("output_layer.weight")
        h = wte[tokens]
        for logical, item in enumerate(self.items):
            prefix = f"decoder.layers.{logical}."
            keys = self.under(prefix)
            for m, symbol in enumerate(item):
                skip = self.plant == "skip-group-residual" and m > 0
                h = self.block(h, symbol, prefix, keys, 1.0, residual=not skip)
        final = "decoder.final_layernorm.weight" if self.grouped else "decoder.final_norm.weight"
        hf = layers.rmsnorm(h, self.take(final), eps)
        V = cfg["vocab_size"]
        losses = {"lm": F.cross_entropy((hf @ out_w.T).reshape(-1, V), targets.reshape(-1))}
        prev, ids, tgt = hf, tokens, targets
        B, T = tokens.shape
        for d in range(self.depths):
            pre = f"mtp.layers.{d}."
            ids, tgt = roll_left(ids), roll_left(tgt)
            en = layers.rmsnorm(wte[ids], self.take(pre + "enorm.weight"), eps)
            hn = layers.rmsnorm(prev, self.take(pre + "hnorm.weight"), eps)
            x = torch.cat([en, hn], dim=-1) @ self.take(pre + "eh_proj.weight").T
            for j, symbol in enumerate(self.mtp):
                inner = f"{pre}mtp_model_layer.layers.{j}."
                x = self.block(x, symbol, inner, self.under(inner), 1.0 / self.depths)
            hout = layers.rmsnorm(x, self.take(pre + "final_layernorm.weight"), eps)
            valid = T - (d + 1)
            scale = cfg["mtp_loss_scaling"] / (1 if self.plant == "mtp-scale-per-depth" else self.depths)
            if valid > 0:
                logits = (hout @ out_w.T)[:, :valid].reshape(-1, V)
                losses[f"mtp.{d}"] = scale * F.cross_entropy(logits, tgt[:, :valid].reshape(-1))
            else:
                losses[f"mtp.{d}"] = hout.sum() * 0.0
            prev = hout
        losses["aux"] = self.aux if torch.is_tensor(self.aux) else torch.zeros((), dtype=h.dtype)
        losses["z"] = self.z if torch.is_tensor(self.z) else torch.zeros((), dtype=h.dtype)
        losses["total"] = sum(losses.values())
        unclaimed = sorted(set(self.P) - self.claimed)
        if unclaimed:
            raise OracleError(f"the engine has parameters the pattern does not call for: {unclaimed[:4]}")
        return losses


def reference(text, cfg, ts, plant=None, dtype=torch.float64):
    """Loss terms and gradients of the reference in `dtype`, on the dumped (rounded) weights."""
    params = {k[len("param/"):]: v.detach().to(dtype).clone().requires_grad_()
              for k, v in ts.items() if k.startswith("param/")}
    model = Model(text, cfg, params, plant)
    losses = model.forward(ts["tokens"], ts["targets"])
    losses["total"].backward()
    res = {"loss/" + k: v.detach() for k, v in losses.items()}
    for k, v in params.items():
        res["grad/" + k] = v.grad if v.grad is not None else torch.zeros_like(v)
    return res


def compare(ts, ref):
    names = sorted(n for n in ts if n.startswith("grad/") or n.startswith("loss/"))
    missing = sorted(set(ref) - set(names))
    if missing:
        raise OracleError(f"the engine dump lacks {missing[:4]}")
    extra = sorted(set(names) - set(ref))
    if extra:
        raise OracleError(f"the engine dumped {extra[:4]}, which the reference does not have")
    errs = {n: layers.rel(ts[n], ref[n]) for n in names}
    worst = max(errs, key=errs.get)
    return len(names), worst, errs[worst]


def main():
    args = sys.argv[1:]
    plant = None
    if len(args) == 3 and args[1] == "--plant" and args[2] in ("skip-group-residual", "mtp-scale-per-depth"):
        plant = args[2]
        args = args[:1]
    if len(args) != 1:
        print("usage: torch_model_oracle.py <dump_dir> [--plant skip-group-residual|mtp-scale-per-depth]",
              file=sys.stderr)
        return 2
    files = sorted(Path(args[0]).glob("model*.safetensors"))
    if not files:
        print(f"error: no model dumps in {args[0]}", file=sys.stderr)
        return 2
    failures, applicable, caught = [], 0, 0
    worst_by_dtype, ratios = {"f32": 0.0, "f64": 0.0}, {"f32": 0.0, "f64": 0.0}
    print(f"{'dump':22} {'pattern':28} {'tensors':>7} {'engine vs torch64':>18} {'bound':>9}  worst tensor")
    for path in files:
        meta, ts = layers.read_safetensors(path)
        text, dt, cfg = meta["pattern"], meta["dtype"], json.loads(meta["config"])
        items, _, mtp, depths = parse(text)
        try:
            if dt == "f64":
                bound = BOUND_F64
            else:  # PyTorch's own float32 error on this model, unplanted
                ref32, ref64 = reference(text, cfg, ts, None, torch.float32), reference(text, cfg, ts)
                bound = max(F32_FLOOR, F32_FACTOR * max(layers.rel(ref32[n], ref64[n]) for n in ref64))
            if plant is None:
                n, worst_name, worst = compare(ts, reference(text, cfg, ts))
                worst_by_dtype[dt] = max(worst_by_dtype[dt], worst)
                ratios[dt] = max(ratios[dt], worst / bound)
                status = "ok" if worst <= bound else "FAIL"
                print(f"{path.name:22} {text:28} {n:7d} {worst:18.2e} {bound:9.2e}  {worst_name} [{status}]")
                if worst > bound:
                    failures.append(f"{path.name} ({text}): {worst_name} relative error {worst:.3e} > {bound:.2e}")
            else:
                applies = any(len(i) > 1 for i in items) if plant == "skip-group-residual" else depths > 1
                if not applies:
                    continue
                applicable += 1
                n, worst_name, worst = compare(ts, reference(text, cfg, ts, plant))
                hit = worst > bound
                caught += hit
                print(f"{path.name:22} {text:28} {n:7d} {worst:18.2e} {bound:9.2e}  {worst_name} "
                      f"[{'caught' if hit else 'MISSED'}]")
        except (OracleError, KeyError, ValueError) as e:
            failures.append(f"{path.name} ({text}): {e}")
    for f in failures:
        print("FAIL " + f)
    if plant is not None:
        verdict = f"all {caught} caught" if applicable and caught == applicable else "NOT all caught"
        print(f"planted {plant}: {caught} of {applicable} applicable models disagree, {verdict}")
        return 0 if applicable and caught == applicable and not failures else 1
    print(f"{len(files)} dumps, worst float32 {worst_by_dtype['f32']:.2e} ({ratios['f32']:.2f} of its bound), "
          f"worst float64 {worst_by_dtype['f64']:.2e} (bound {BOUND_F64:.0e}), {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
