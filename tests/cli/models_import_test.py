#!/usr/bin/env python3
"""models import / --model config.json (issue 28) against the shipped cards: each public
Hugging Face config in tests/cli/hf-configs/ imports to its card's pattern, dimensions and
parameter counts (the cards were written from the same public configs, field by field, by hand;
the import is a second, independent reading). Every config field is reported, used or not; a
config of an unknown family or with a missing field is refused by name; --model config.json
simulates exactly as the card does.

usage: models_import_test.py HYBRID_TWIN SOURCE_DIR
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run
SRC = sys.argv[2]
FIX = os.path.join(SRC, "tests", "cli", "hf-configs")

cards = {"Qwen3-235B-A22B.json": "qwen3-235b-a22b", "Qwen3-30B-A3B.json": "qwen3-30b-a3b",
         "Mixtral-8x7B-v0.1.json": "mixtral-8x7b", "DeepSeek-V3.json": "deepseek-v3",
         "Qwen3-Next-80B-A3B-Instruct.json": "qwen3-next-80b-a3b",
         "Nemotron-H-8B-Base-8K.json": "nemotron-h-8b",
         "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json": "nemotron-3-nano",
         # One bracket per Jamba decoder layer (mixer + FFN): the grouped card; its published
         # counts are the flat card's (the same parameters).
         "AI21-Jamba-1.5-Mini.json": ("jamba-v0.1-grouped", "jamba-v0.1"),
         # Both carry Python's bare Infinity ("time_step_limit": [0.0, Infinity]), read as a string.
         "Nemotron-H-56B-Base-8K.json": "nemotron-h-56b",
         "NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json": "nemotron-3-super-mtp"}
with tempfile.TemporaryDirectory() as d:
    for config, name in cards.items():
        name, published_by = name if isinstance(name, tuple) else (name, name)
        path = os.path.join(FIX, config)
        out = os.path.join(d, name + ".json")
        rc, _, err = run(["models", "import", path, "-o", out, "--name", name])
        if rc != 0:
            check(False, f"{config} imports ({err.strip()[-200:]})")
            continue
        got = json.loads(run(["models", out, "--json"])[1])
        want = json.loads(run(["models", name, "--json"])[1])
        # The card of a config with no MTP field compares its decoder (the card adds its MTP depth).
        mtp = "/" in want["pattern"] and "/" not in got["pattern"]
        want_pattern = want["pattern"].split("/")[0] if mtp else want["pattern"]
        # A card whose MTP depths share one set of weights (its training recipe repeats the config's
        # one MTP layer: Nemotron 3 Super) compares its first depth; the count is the same, once.
        repeated = want["dims"].get("mtp_shared_weights") == 1 and got["pattern"].count("/") == 1
        if repeated:
            want_pattern = "/".join(want["pattern"].split("/")[:2])
        check(got["pattern"] == want_pattern, f"{config}: the pattern derived from the layer types is the card's")
        # seq_len is the card's published pre-training length, which no config states.
        skip = {"seq_len"} | ({"mtp_shared_weights"} if repeated else set())
        differ = {k: (got["dims"][k], want["dims"][k]) for k in got["dims"] if k not in skip and got["dims"][k] != want["dims"][k]}
        check(not differ and got["dims"].keys() == want["dims"].keys(),
              f"{config}: every dimension equals the card's {differ}")
        total = want["total_params"] - (want["mtp_params"] if mtp else 0)
        check(abs(got["total_params"] - total) <= 0 and abs(got["active_params"] - (want["active_params"] - (
              want["active_params"] - got["active_params"] if mtp else 0))) <= 0,
              f"{config}: parameter count {got['total_params'] / 1e9:.2f}B equals the card's {total / 1e9:.2f}B")
        published = json.loads(run(["models", published_by, "--json"])[1]).get("published", {})
        if published.get("total_params") and not mtp:
            pub = published["total_params"]
            check(abs(got["comparable_total_params"] - pub) / pub < 0.02,
                  f"{config}: within 2 % of the published total ({pub / 1e9:.2f}B)")
        used = [x for x in err.splitlines() if x.startswith("import: used ")]
        not_used = [x for x in err.splitlines() if x.startswith("import: not used ")]
        n_used = int(used[0].split()[2].rstrip(":")) if used else -1
        n_not = int(not_used[0].split()[3].rstrip(":")) if not_used else -1
        check(n_used + n_not == len(json.load(open(path))),
              f"{config}: every field is reported, {n_used} used and {n_not} not")

    # --model config.json is the card, wherever a card is read.
    base = ["simulate", "--platform", "dgx-h100", "--gpus", "16", "--ep", "8", "--gbs", "32", "--json"]
    a = run(base + ["--model", os.path.join(FIX, "Qwen3-30B-A3B.json")])
    b = run(base + ["--model", "qwen3-30b-a3b"])
    check(a[0] == 0 and b[0] == 0 and json.loads(a[1])["step_time_s"] == json.loads(b[1])["step_time_s"],
          "simulate --model config.json steps exactly as the card")

    # Refusals name the family or the field.
    def refused(cfg, words):
        f = os.path.join(d, "config.json")
        json.dump(cfg, open(f, "w"))
        rc, out, err = run(["models", "import", f])
        check(rc == 2 and all(w in err for w in words) and out == "", f"refused naming {words}: {err.strip()[:150]}")

    q = json.load(open(os.path.join(FIX, "Qwen3-30B-A3B.json")))
    refused(dict(q, model_type="gpt_oss"), ["model_type 'gpt_oss'", "known:"])
    refused({k: v for k, v in q.items() if k != "num_experts"}, ['"num_experts" is missing'])
    refused(dict(q, hidden_size=-4), ['"hidden_size" = -4'])
    refused(dict(q, mlp_only_layers="none"), ['"mlp_only_layers" must be a list'])
    jam = json.load(open(os.path.join(FIX, "AI21-Jamba-1.5-Mini.json")))
    refused(dict(jam, attn_layer_offset=8), ['"attn_layer_offset" = 8 must be below "attn_layer_period" = 8'])
    refused(dict(jam, mamba_expand=0), ["mamba_expand x hidden_size = 0"])
    # Jamba's layer rule moved: attention every 4th layer from 1, MoE on every layer.
    f = os.path.join(d, "jamba.json")
    json.dump(dict(jam, num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=1, expert_layer_period=1,
                   expert_layer_offset=0), open(f, "w"))
    rc, out, _ = run(["models", "import", f])
    check(rc == 0 and json.loads(out)["pattern"] == "[ME][*E][ME][ME][ME][*E][ME][ME]",
          "Jamba periods and offsets place the attention and MoE layers")
    # Dense layers named in mlp_only_layers become '-' layers with the dense FFN.
    f = os.path.join(d, "mixed.json")
    json.dump(dict(q, mlp_only_layers=[0, 1]), open(f, "w"))
    rc, out, _ = run(["models", "import", f])
    card = json.loads(out) if rc == 0 else {}
    check(card.get("pattern", "").startswith("[*-][*-][*E]") and card["dims"].get("ffn_hidden") == 6144,
          "mlp_only_layers [0, 1] gives two dense layers with intermediate_size")

    # A field that would silently move the MoE layers is refused in one line naming the file, the
    # field, the value and the rule (transformers divides by decoder_sparse_step and moe_layer_freq;
    # a listed layer the model lacks changes nothing there), by models import and by --model.
    def refused_one_line(cfg, words):
        f = os.path.join(d, "config.json")
        json.dump(cfg, open(f, "w"))
        for argv in (["models", "import", f], ["simulate", "--model", f, "--gpus", "16", "--ep", "8"]):
            rc, out, err = run(argv)
            check(rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("error:")
                  and f in err and all(w in err for w in words),
                  f"{argv[0]}: refused in one line naming {words}: {err.strip()[:200]}")

    refused_one_line(dict(q, decoder_sparse_step=0), ['"decoder_sparse_step" = 0', "must be >= 1"])
    refused_one_line(dict(q, mlp_only_layers=[1000]), ['"mlp_only_layers" = 1000', "[0, num_hidden_layers - 1 = 47]"])
    refused_one_line(dict(q, mlp_only_layers=[-1]), ['"mlp_only_layers" = -1', "[0, num_hidden_layers - 1 = 47]"])
    ds = json.load(open(os.path.join(FIX, "DeepSeek-V3.json")))
    refused_one_line(dict(ds, moe_layer_freq=0), ['"moe_layer_freq" = 0', "must be >= 1"])
    # Python's bare Infinity in a field the import reads is that field's refusal, not a JSON error
    # (json.dump writes float("inf") as Infinity); in a field it does not read it is listed unused.
    refused_one_line(dict(q, hidden_size=float("inf")), ['"hidden_size"'])
    f = os.path.join(d, "inf.json")
    json.dump(dict(q, time_step_limit=[0.0, float("inf")], rope_scaling_nan=float("nan")), open(f, "w"))
    rc, out, err = run(["models", "import", f])
    check(rc == 0 and "time_step_limit" in err and "rope_scaling_nan" in err,
          f"bare Infinity and NaN in unused fields import, listed as not used: {err.strip()[-200:]}")
    # decoder_sparse_step 2 is valid: every second layer MoE.
    f = os.path.join(d, "step2.json")
    json.dump(dict(q, decoder_sparse_step=2), open(f, "w"))
    rc, out, _ = run(["models", "import", f])
    check(rc == 0 and json.loads(out)["pattern"].startswith("[*-][*E][*-][*E]"),
          "decoder_sparse_step 2 makes every second layer MoE")
checks.exit()
