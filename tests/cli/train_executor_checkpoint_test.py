#!/usr/bin/env python3
"""train's checkpoints under the executors (--ep, --dp, --pp, --microbatches; CPU and the device
executor on the host emulation): the one-model checkpoint format, each parameter and its AdamW
moments from an owner, every holder taking them on --resume. The oracle is the uninterrupted run:
4 steps against 2 + a resume of 2, losses bit for bit; a checkpoint written by the device
executor resumes on the CPU executor with the CPU's own continuation (a pattern without SwiGLU,
where the two backends agree bitwise), and one model (no executor flags) reads it; --import-gpt
places a GPT's weights as one model does.

usage: train_executor_checkpoint_test.py HYBRID_TWIN
"""
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run
work = tempfile.mkdtemp(prefix="exec-ckpt-")
small = ["--batch", "2", "--seq", "16", "--json", "--quiet"]


def losses(args):
    rc, out, err = run(["train"] + args + small)
    check(rc == 0, f"train {' '.join(args)} runs ({err.strip()[-300:]})")
    return json.loads(out) if rc == 0 else {"losses": [], "start_step": -1}


for name, flags in [("ep 2 dp 4", ["--pattern", "M*E", "--ep", "2", "--dp", "4", "--no-overlap"]),
                    ("ep 2 overlap", ["--pattern", "M[*E]-", "--ep", "2", "--overlap"]),
                    ("pp 2", ["--pattern", "M*M*", "--pp", "2", "--microbatches", "2"]),
                    ("mtp dp 2", ["--pattern", "M*E/*E", "--dp", "2"])]:
    ck = os.path.join(work, name.replace(" ", "-"))
    whole = losses(flags + ["--steps", "4"])["losses"]
    first = losses(flags + ["--steps", "2", "--checkpoint", ck])
    check(os.path.exists(os.path.join(ck, "manifest.json")), f"{name}: the checkpoint is written")
    again = losses(flags + ["--steps", "2", "--resume", ck])
    check(again["start_step"] == 2, f"{name}: the resumed run starts at step 2 ({again['start_step']})")
    check(first["losses"] + again["losses"] == whole,
          f"{name}: 2 steps + resume 2 equal 4 uninterrupted bit for bit ({first['losses'] + again['losses']} vs {whole})")

# Written by the device executor, resumed by the CPU executor and by one model.
flags = ["--pattern", "[*]*", "--dp", "2"]
ck = os.path.join(work, "device")
whole = losses(flags + ["--steps", "4"])["losses"]
first = losses(flags + ["--backend", "cuda-host", "--steps", "2", "--checkpoint", ck])
check(first["losses"] == whole[:2], f"device executor: the CPU executor's first 2 losses ({first['losses']})")
cpu = losses(flags + ["--steps", "2", "--resume", ck])
check(cpu["losses"] == whole[2:], f"device checkpoint resumed on the CPU executor: {cpu['losses']} vs {whole[2:]}")
dev = losses(flags + ["--backend", "cuda-host", "--steps", "2", "--resume", ck])
check(dev["losses"] == whole[2:], f"device checkpoint resumed on the device executor: {dev['losses']} vs {whole[2:]}")
one = losses(["--steps", "1", "--resume", ck])
check(one.get("start_step") == 2 and len(one["losses"]) == 1, "one model resumes the executor's checkpoint at step 2")

# A checkpoint of another model is refused in one line, nothing trained.
rc, _, err = run(["train", "--pattern", "M*", "--dp", "2", "--steps", "1", "--resume", ck] + small)
check(rc != 0 and len(err.strip().splitlines()) == 1, f"another pattern's checkpoint is refused in one line ({err.strip()})")



def read_safetensors(path):
    """{name: raw bytes} and the header of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}, header


def model_file(ck):
    return os.path.join(ck, next(f for f in sorted(os.listdir(ck)) if f.startswith("model-")))


# --import-gpt under an executor places the GPT's attention and MLP weights as one model does: a
# GPT file made from a '*-*-' model (GPT layer k = physical layers 2k and 2k + 1), imported into
# 'M*-M*-' with no step, gives the one-model run's checkpoint tensor for tensor.
src = os.path.join(work, "gpt-src")
rc, _, err = run(["train", "--pattern", "*-*-", "--steps", "0", "--checkpoint", src, "--quiet"])
check(rc == 0, f"a '*-*-' model to import from ({err.strip()})")
tensors, header = read_safetensors(model_file(src))
renamed, meta, offset, blob = {}, {}, 0, b""
for key in sorted(tensors):
    new = key.replace("decoder.final_norm.", "decoder.final_layernorm.")
    for phys in range(4):
        pre = f"decoder.layers.{phys}."
        if key.startswith(pre):
            new = f"decoder.layers.{phys // 2}." + key[len(pre):]
    meta[new] = {"dtype": header[key]["dtype"], "shape": header[key]["shape"],
                 "data_offsets": [offset, offset + len(tensors[key])]}
    offset += len(tensors[key])
    blob += tensors[key]
head = json.dumps(meta).encode()
gpt = os.path.join(work, "gpt.safetensors")
with open(gpt, "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + blob)
imported = {}
for name, flags in [("one model", []), ("executor dp 2", ["--dp", "2"]), ("device executor dp 2",
                                                                         ["--dp", "2", "--backend", "cuda-host"])]:
    ck = os.path.join(work, "imported-" + name.replace(" ", "-"))
    rc, _, err = run(["train", "--pattern", "M*-M*-", "--import-gpt", gpt, "--steps", "0", "--checkpoint", ck,
                      "--quiet"] + flags)
    check(rc == 0, f"{name}: --import-gpt ({err.strip()})")
    imported[name] = read_safetensors(model_file(ck))[0] if rc == 0 else {}
fresh = os.path.join(work, "not-imported")
run(["train", "--pattern", "M*-M*-", "--steps", "0", "--checkpoint", fresh, "--quiet", "--dp", "2"])
check(imported["one model"] != read_safetensors(model_file(fresh))[0], "the import changes the model (not a no-op)")
for name in ("executor dp 2", "device executor dp 2"):
    check(imported[name] == imported["one model"], f"{name}: the imported model equals one model's, tensor for tensor")

shutil.rmtree(work)
checks.exit()
