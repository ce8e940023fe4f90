#!/usr/bin/env python3
"""Bad-input corpus of hybrid-twin (issue 22): hostile or careless input must end in its expected
exit code with a one-line reason, never a signal, a hang, runaway memory, a partial file or a lost
checkpoint.

Every case runs the real executable in a fresh folder, under the harness's safety limits (these
are bounds of the harness, not performance assertions): RLIMIT_AS 4 GiB and a 60 s timeout. A
case passes when the exit code is the expected one (a negative code, i.e. death by a signal,
never is), stderr holds the expected words, and the folder holds no temporary file of an output
('*.tmp-*') afterwards; some cases check more (a file left intact, a checkpoint still loadable).
Interrupt and full-disk cases need Linux and root (tmpfs mounts); elsewhere they are skipped with
the reason printed.

usage: run_corpus.py HYBRID_TWIN SOURCE_DIR [NAME_FILTER]
"""
import concurrent.futures
import json
import os
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

BIN, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
FILTER = sys.argv[3] if len(sys.argv) > 3 else ""
MEMORY_LIMIT = 4 << 30
TIMEOUT_S = 60
IS_ROOT = os.geteuid() == 0 and sys.platform.startswith("linux")


def limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(argv, cwd, timeout=TIMEOUT_S):
    p = subprocess.run([BIN] + argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       errors="replace", timeout=timeout, preexec_fn=limits)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- file helpers for setups
def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def counterexample(prop, case):
    return json.dumps({"format": "hybrid-twin-counterexample/1", "property": prop, "seed": 1, "input": case})


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def make_checkpoint(d, name="ck"):
    rc, _, err = run(["train", "--steps", "1", "--batch", "2", "--seq", "16", "--quiet", "--checkpoint", name], d)
    assert rc == 0, err
    return os.path.join(d, name)


def manifest(ck):
    with open(os.path.join(ck, "manifest.json")) as f:
        return json.load(f)


def save_manifest(ck, m):
    write(os.path.join(ck, "manifest.json"), json.dumps(m))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_safetensors(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def patch_checkpoint(ck, role, header_edit=None, value=None):
    """Edits the checkpoint's `role` file (a header edit, or the first float set to `value`) and
    rewrites the manifest's size and hash, so only the edit itself is wrong."""
    m = manifest(ck)
    path = os.path.join(ck, m["files"][role]["file"])
    header, body = read_safetensors(path)
    if header_edit:
        header_edit(header)
    if value is not None:
        first = min((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")[0]
        body = body[:first] + struct.pack("<f", value) + body[first + 4:]
    write_safetensors(path, header, body)
    with open(path, "rb") as f:
        data = f.read()
    m["files"][role]["bytes"], m["files"][role]["fnv1a64"] = len(data), fnv1a64(data)
    save_manifest(ck, m)


XML_HEAD = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\">\n"
XML_NOROUTE = XML_HEAD + """<zone id="z" routing="Full"><host id="gpu0" speed="1Gf"/><host id="gpu1" speed="1Gf"/>
<link id="l" bandwidth="10GBps" latency="1us"/></zone></platform>"""
XML_ZEROBW = XML_HEAD + """<zone id="z" routing="Full"><host id="gpu0" speed="1Gf"/><host id="gpu1" speed="1Gf"/>
<link id="l" bandwidth="0Bps" latency="1us"/><route src="gpu0" dst="gpu1"><link_ctn id="l"/></route></zone></platform>"""
XML_HUGE = XML_HEAD + """<cluster id="c" prefix="gpu" suffix="" radical="0-99999999" speed="1Gf" bw="10GBps" lat="1us"/></platform>"""
XML_GOOD = XML_HEAD + """<cluster id="c" prefix="gpu" suffix="" radical="0-3" speed="1Gf" bw="10GBps" lat="1us"/></platform>"""


def trace_with_metadata(d, **meta):
    rc, _, err = run(["train", "--ep", "2", "--steps", "2", "--batch", "1", "--seq", "8", "--quiet", "--trace", "t.json"], d)
    assert rc == 0, err
    with open(os.path.join(d, "t.json")) as f:
        t = json.load(f)
    t["otherData"]["metadata"].update(meta)
    write(os.path.join(d, "t.json"), json.dumps(t))


def long_name_trace(d, name):
    ev = [{"ph": "X", "name": name, "cat": "kernel", "ts": 0, "dur": 1, "pid": 0, "tid": 7}]
    write(os.path.join(d, "t.json"), json.dumps({"traceEvents": ev}))


def symlink(target, name):
    return lambda d: os.symlink(target, os.path.join(d, name))


def fifo(name):
    return lambda d: os.mkfifo(os.path.join(d, name))


def files(**contents):
    def setup(d):
        for name, text in contents.items():
            path = os.path.join(d, name.replace("__", "/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write(path, text)
    return setup


def all_of(*setups):
    def setup(d):
        for s in setups:
            s(d)
    return setup


def still_symlink(name, target):
    def check(d):
        p = os.path.join(d, name)
        return None if os.path.islink(p) and os.readlink(p) == target else f"{name} is no longer the symlink to {target}"
    return check


def loads(ck, step):
    def check(d):
        rc, out, err = run(["train", "--resume", ck, "--steps", "0", "--json"], d)
        if rc != 0:
            return f"checkpoint {ck} does not load: {err.strip()}"
        return None if json.loads(out)["start_step"] == step else f"checkpoint {ck} is not at step {step}"
    return check


def no_step_ran(d, out, err):
    return "step " not in err


# A simulate --json result as merge reads it (the keys it checks).
RESULT = {"step_time_s": 1.5, "tokens_per_s": 1000.0, "mfu": 0.3, "memory_gib": 40.0, "a2a_hidden_fraction": 0.5,
          "memory_fits": True, "gpus": 8, "schedule": "sequential", "model": "m", "pattern": "[*E]",
          "platform": "platform dgx-h100", "layout": {"tp": 1, "cp": 1, "pp": 1, "vpp": 1, "ep": 8, "etp": 1, "dp": 8,
                                                     "mbs": 1, "microbatches": 2, "gbs": 16, "seq_len": 4096,
                                                     "recompute": "none"}}


FID = '{"format":"hybrid-twin-fidelity","version":1,"runs":[{"id":"a","source":"s","args":ARGS,"measured":{"step_time_s":1}}]}'


# ---------------------------------------------------------------- the corpus
# (name, issue class, expected exit code, argv, words in stderr, setup, extra check)
CASES = [
    # 1. replay files
    ("replay-router-topk-exceeds-experts", 1, 2, ["fuzz", "--replay", "r.json"], "exceeds 'experts'",
     files(**{"r.json": counterexample("engine.router", {"tokens": 12, "experts": 8, "topk": 9, "hidden": 4,
                                                         "loss_scale": 1.0, "x": [1, 2], "router": [1]})}), None),
    ("replay-router-sizes-disagree", 1, 2, ["fuzz", "--replay", "r.json"], "'x' must hold tokens x hidden",
     files(**{"r.json": counterexample("engine.router", {"tokens": 12, "experts": 8, "topk": 3, "hidden": 4,
                                                         "loss_scale": 1.0, "x": [1, 2], "router": [1]})}), None),
    ("replay-deep-nesting", 1, 2, ["fuzz", "--replay", "r.json"], "deeper than 64 levels",
     files(**{"r.json": '{"format":"hybrid-twin-counterexample/1","property":"engine.router","seed":1,"input":'
                        + "[" * 100000 + "]" * 100000 + "}"}), None),
    ("replay-unknown-field", 1, 2, ["fuzz", "--replay", "r.json"], "unknown field 'patern'",
     files(**{"r.json": counterexample("pattern.roundtrip", {"patern": "M"})}), None),
    ("replay-missing-field", 1, 2, ["fuzz", "--replay", "r.json"], "r.json: input:",
     files(**{"r.json": counterexample("pattern.roundtrip", {})}), None),
    ("replay-wrong-type", 1, 2, ["fuzz", "--replay", "r.json"], "'pattern' = 5 must be a string",
     files(**{"r.json": counterexample("pattern.roundtrip", {"pattern": 5})}), None),
    ("replay-engine-case-too-big", 1, 2, ["fuzz", "--replay", "r.json"], "'batch' = 100000",
     files(**{"r.json": counterexample("engine.matches_model", {"pattern": "M*E", "ep": 1, "microbatches": 1, "batch": 100000,
                                                                "seq": 8, "data_seed": 1, "weight_seed": 1,
                                                                "model": {"hidden": 8}})}), None),
    ("replay-not-json", 1, 2, ["fuzz", "--replay", "r.json"], "not valid JSON", files(**{"r.json": "{"}), None),
    ("replay-unknown-property", 1, 2, ["fuzz", "--replay", "r.json"], "does not have",
     files(**{"r.json": counterexample("pattern.nope", {"pattern": "M"})}), None),
    ("replay-good-case-passes", 1, 0, ["fuzz", "--replay", "r.json"], "",
     files(**{"r.json": counterexample("pattern.roundtrip", {"pattern": "M[*E]M[*E]-"})}), None),
    # 2. --comm-regex
    ("comm-regex-long-name", 2, 0, ["trace", "summary", "t.json", "--comm-regex", ".*nccl.*"], "",
     lambda d: long_name_trace(d, "a" * 50000), None),
    ("comm-regex-catastrophic", 2, 0, ["trace", "summary", "t.json", "--comm-regex", "(a+)+$"], "",
     lambda d: long_name_trace(d, "a" * 41 + "!"), None),
    ("comm-regex-backreference", 2, 2, ["trace", "summary", "t.json", "--comm-regex", "(a)\\1"], "invalid comm regex",
     lambda d: long_name_trace(d, "aa"), None),
    ("comm-regex-too-long", 2, 2, ["trace", "summary", "t.json", "--comm-regex", "a" * 2000], "more than the limit",
     lambda d: long_name_trace(d, "aa"), None),
    ("comm-regex-unbalanced", 2, 2, ["trace", "summary", "t.json", "--comm-regex", "("], "invalid comm regex",
     lambda d: long_name_trace(d, "aa"), None),
    # 3. platforms
    ("platform-xml-no-route", 3, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--platform", "p.xml"],
     "has no route from gpu0 to gpu1", files(**{"p.xml": XML_NOROUTE}), None),
    ("platform-xml-zero-bandwidth", 3, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--platform", "p.xml"],
     "a link needs a bandwidth > 0", files(**{"p.xml": XML_ZEROBW}), None),
    ("platform-xml-good", 3, 0, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--platform", "p.xml"], "",
     files(**{"p.xml": XML_GOOD}), None),
    ("platform-many-spare-nodes", 3, 0, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--platform",
                                         "dgx-h200:nodes=10000"], "", None, None),
    ("platform-gpu-count-overflow", 3, 2, ["simulate", "--pattern", "M*E", "--platform",
                                           "dgx-h200:nodes=65537,gpus_per_node=65535"], "4294967295 GPUs, more than the limit",
     None, None),
    ("platform-bad-value", 3, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:nvlink_gbps=abc"],
     "is not a number", None, None),
    ("platform-unknown-preset", 3, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-z9"], "unknown platform preset",
     None, None),
    # 4. sizes with no upper bound
    ("size-microbatches", 4, 2, ["simulate", "--pattern", "M*E", "--microbatches", "100000000"], "more than the limit of 4000000",
     None, None),
    ("size-dp", 4, 2, ["simulate", "--pattern", "M*E", "--dp", "1000000"], "more than the limit", None, None),
    ("size-dp-unfolded", 4, 2, ["simulate", "--pattern", "M*E", "--dp", "100000", "--no-fold"], "more than the limit",
     None, None),
    ("size-layers", 4, 2, ["simulate", "--pattern", "M-" * 50000, "--microbatches", "8"], "nodes, more than the limit",
     None, None),
    ("size-ep-experts", 4, 2, ["simulate", "--pattern", "M*E", "--ep", "65536", "--dp", "65536", "--num-experts", "65536"],
     "more than the limit of 16384 GPUs", None, None),
    ("size-xml-hosts", 4, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--platform", "p.xml"],
     "more than 1048576 hosts", files(**{"p.xml": XML_HUGE}), None),
    ("size-calibrate-metadata-microbatches", 4, 2, ["calibrate", "t.json"], "the trace's metadata",
     lambda d: trace_with_metadata(d, microbatches="100000000"), None),
    ("size-train-hidden", 4, 2, ["train", "--hidden", "1000000000", "--steps", "1"], "needs about", None, None),
    ("merge-not-a-result", 4, 2, ["merge", "r.json"], "not the JSON of", files(**{"r.json": '{"hello": 1}'}), None),
    ("search-jobs-zero", 4, 2, ["search", "--model", "qwen3-30b-a3b", "--gpus", "16", "--gbs", "32", "-j", "0"],
     "-j must be between", None, None),
    ("size-sweep-combinations", 4, 2, ["simulate", "--pattern", "M*E", "--sweep", "ep=" + ",".join(["1"] * 200),
                                       "--sweep", "microbatches=" + ",".join(["1"] * 200)], "more than the limit of 10000",
     None, None),
    # 5. special files as input
    ("special-model-dev-zero", 5, 2, ["simulate", "--pattern", "M*E", "--model", "/dev/zero"], "character device", None, None),
    ("special-costs-fifo", 5, 2, ["simulate", "--pattern", "M*E", "--costs", "f"], "a FIFO", fifo("f"), None),
    ("special-replay-fifo", 5, 2, ["fuzz", "--replay", "f"], "a FIFO", fifo("f"), None),
    ("special-replay-dev-zero", 5, 2, ["fuzz", "--replay", "/dev/zero"], "character device", None, None),
    ("special-trace-fifo", 5, 2, ["trace", "summary", "f"], "a FIFO", fifo("f"), None),
    ("special-trace-directory", 5, 2, ["trace", "summary", "."], "a directory", None, None),
    ("special-data-fifo", 5, 2, ["train", "--steps", "1", "--data", "f"], "a FIFO", fifo("f"), None),
    ("special-data-dev-zero", 5, 2, ["train", "--steps", "1", "--data", "/dev/zero"], "character device", None, None),
    ("special-platform-fifo", 5, 2, ["simulate", "--pattern", "M*E", "--platform", "f.xml"], "a FIFO", fifo("f.xml"), None),
    ("special-import-gpt-directory", 5, 2, ["train", "--pattern", "*-", "--steps", "1", "--import-gpt", "."], "a directory", None, None),
    ("special-checkpoint-file-dev-zero", 5, 2, ["train", "--resume", "ck", "--steps", "1"], "not a regular file",
     lambda d: (lambda ck: (os.remove(os.path.join(ck, manifest(ck)["files"]["model"]["file"])),
                            os.symlink("/dev/zero", os.path.join(ck, manifest(ck)["files"]["model"]["file"]))))(make_checkpoint(d)),
     None),
    ("special-model-too-large", 5, 2, ["simulate", "--pattern", "M*E", "--model", "big.json"], "more than the limit of 64 MiB",
     lambda d: open(os.path.join(d, "big.json"), "wb").truncate(100 << 20), None),
    # 6. outputs
    ("output-plan-symlink-to-device", 6, 2, ["plan", "--pattern", "M*E", "-o", "out.json"], "refusing to replace it",
     symlink("/dev/null", "out.json"), still_symlink("out.json", "/dev/null")),
    ("output-simulate-trace-fifo", 6, 2, ["simulate", "--pattern", "M*E", "--trace", "f"], "a FIFO", fifo("f"), None),
    ("output-simulate-svg-directory", 6, 2, ["simulate", "--pattern", "M*E", "--svg", "d"], "a directory",
     lambda d: os.mkdir(os.path.join(d, "d")), None),
    ("output-trace-svg-symlink-to-device", 6, 2, ["trace", "svg", "t.json", "-o", "o.svg"], "refusing to replace it",
     all_of(lambda d: long_name_trace(d, "gemm"), symlink("/dev/full", "o.svg")), still_symlink("o.svg", "/dev/full")),
    ("output-calibrate-symlink-to-device", 6, 2, ["calibrate", "t.json", "-o", "c.json"], "refusing to replace it",
     all_of(lambda d: trace_with_metadata(d), symlink("/dev/null", "c.json")), still_symlink("c.json", "/dev/null")),
    ("output-train-trace-symlink-to-device", 6, 2, ["train", "--ep", "2", "--steps", "3", "--trace", "t.json"],
     "refusing to replace it", symlink("/dev/null", "t.json"), no_step_ran),
    ("output-missing-folder", 6, 2, ["plan", "--pattern", "M*E", "-o", "no/such/dir/p.json"], "does not exist", None, None),
    ("output-through-symlink-to-file", 6, 0, ["plan", "--pattern", "M*E", "-o", "link.json"], "",
     all_of(files(**{"real.json": "old"}), symlink("real.json", "link.json")),
     lambda d: still_symlink("link.json", "real.json")(d) or
     (None if open(os.path.join(d, "real.json")).read().startswith("{") else "the link's target was not written")),
    # 8. resume accepts what cannot train
    ("resume-nan-weight", 8, 2, ["train", "--resume", "ck", "--steps", "1"], "holds NaN",
     lambda d: patch_checkpoint(make_checkpoint(d), "model", value=float("nan")), None),
    ("resume-nan-weight-under-executor", 8, 2, ["train", "--resume", "ck", "--steps", "1", "--ep", "2"], "holds NaN",
     lambda d: patch_checkpoint(make_checkpoint(d), "model", value=float("nan")), None),
    ("resume-nan-weight-on-device-executor", 8, 2,
     ["train", "--backend", "cuda-host", "--resume", "ck", "--steps", "1", "--dp", "2"], "holds NaN",
     lambda d: patch_checkpoint(make_checkpoint(d), "model", value=float("nan")), None),
    ("resume-inf-weight", 8, 2, ["train", "--resume", "ck", "--steps", "1"], "holds an infinity",
     lambda d: patch_checkpoint(make_checkpoint(d), "model", value=float("inf")), None),
    ("resume-huge-weight", 8, 2, ["train", "--resume", "ck", "--steps", "1"], "beyond the bound",
     lambda d: patch_checkpoint(make_checkpoint(d), "model", value=3e38), None),
    ("resume-negative-optimizer-step", 8, 2, ["train", "--resume", "ck", "--steps", "1"], "optimizer step",
     lambda d: patch_checkpoint(make_checkpoint(d), "optimizer",
                                header_edit=lambda h: h["__metadata__"].update(step="-3")), None),
    ("resume-negative-manifest-step", 8, 2, ["train", "--resume", "ck", "--steps", "1"], "outside [0, 2^53]",
     lambda d: (lambda ck: save_manifest(ck, {**manifest(ck), "step": -1}))(make_checkpoint(d)), None),
    ("resume-good", 8, 0, ["train", "--resume", "ck", "--steps", "1", "--quiet"], "", lambda d: make_checkpoint(d), None),
    # 9. integer overflow
    ("overflow-seq", 9, 2, ["train", "--seq", "2147483647", "--steps", "1"], "tokens per step, more than the limit", None, None),
    ("overflow-hidden-cap-named", 9, 2, ["simulate", "--pattern", "M*E", "--hidden", "2147483647"],
     "'hidden' = 2147483647 must be in [1, 1073741824]", None, None),
    ("overflow-manifest-step", 9, 2, ["train", "--resume", "ck", "--steps", "1"], "outside [0, 2^53]",
     lambda d: (lambda ck: save_manifest(ck, {**manifest(ck), "step": 2**63 - 1}))(make_checkpoint(d)), None),
    ("overflow-link-latency", 9, 2, ["train", "--ep", "2", "--steps", "1", "--link-latency-us", "1e300"],
     "--link-latency-us", None, None),
    ("overflow-link-bandwidth", 9, 2, ["train", "--ep", "2", "--steps", "1", "--link-gbps", "1e-300"], "--link-gbps",
     None, None),
    ("overflow-cost-value", 9, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"], "in [0, 1e12], got 1e+300",
     files(**{"c.json": '{"launch_overhead_us": 1e300}'}), lambda d, out, err: len(err) < 200),
    ("overflow-cost-override", 9, 2, ["simulate", "--pattern", "M*E", "--cost", "interference_factor=-1e300"],
     "in [1, 1e12], got -1e+300", None, lambda d, out, err: len(err) < 200),
    # 10. messages
    ("message-dash-pattern", 10, 2, ["pattern", "-M-"], "put '--' before a pattern", None, None),
    ("message-dash-pattern-after-double-dash", 10, 0, ["pattern", "--", "-M-"], "", None, None),
    ("message-dash-pattern-equals", 10, 0, ["simulate", "--pattern=-M-"], "", None, None),
    ("message-costs-names-file", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"], "c.json",
     files(**{"c.json": "{not json"}), None),
    ("message-model-names-file-and-field", 10, 2, ["simulate", "--pattern", "M*E", "--model", "m.json"], "m.json",
     files(**{"m.json": '{"hiden": 5}'}), None),
    ("message-out-of-memory-not-bad-alloc", 10, 2, ["train", "--hidden", "1000000000"], "GiB", None,
     lambda d: None),
    # 11. validated too late
    ("late-sweep-value", 11, 2, ["simulate", "--pattern", "M*E", "--sweep", "ep=1,2,abc"], "'abc' is not an integer",
     None, lambda d, out, err: out == ""),
    ("late-sweep-plan-too-large", 11, 2, ["simulate", "--pattern", "M*E", "--sweep", "microbatches=1,100000000"],
     "--sweep microbatches=100000000", None, lambda d, out, err: out == ""),
    ("late-simulate-trace-folder", 11, 2, ["simulate", "--pattern", "M*E", "--microbatches", "8", "--trace", "no/t.json"],
     "does not exist", None, None),
    ("late-train-checkpoint-not-a-folder", 11, 2, ["train", "--steps", "30", "--checkpoint", "file"], "not a directory",
     files(**{"file": "x"}), no_step_ran),
    # what held up before and must keep holding
    ("kept-unknown-flag", 0, 2, ["simulate", "--pattern", "M*E", "--no-such-flag"], "", None, None),
    ("kept-bad-pattern-caret", 0, 2, ["pattern", "M[[*E]]"], "^", None, None),
    ("kept-parallel-range", 0, 2, ["simulate", "--pattern", "M*E", "--ep", "0"], "ep", None, None),
    ("kept-model-json-type", 0, 2, ["simulate", "--pattern", "M*E", "--model", "m.json"], "must be an integer",
     files(**{"m.json": '{"hidden": "big"}'}), None),
    ("kept-trace-nesting", 0, 2, ["trace", "summary", "t.json"], "nested deeper",
     files(**{"t.json": '{"x":' + "[" * 5000 + "]" * 5000 + "}"}), None),
    ("kept-truncated-checkpoint", 0, 2, ["train", "--resume", "ck", "--steps", "1"], "truncated",
     lambda d: (lambda ck: os.truncate(os.path.join(ck, manifest(ck)["files"]["model"]["file"]), 100))(make_checkpoint(d)),
     None),
    # issue 32's inputs: fidelity files, measured kernel tables, the step physics
    ("fidelity-not-a-fidelity-file", 10, 2, ["fidelity", "f.json"], "not a fidelity file",
     files(**{"f.json": '{"runs": []}'}), lambda d, out, err: out == ""),
    ("fidelity-duplicate-id", 10, 2, ["fidelity", "f.json"], "run id 'a' appears twice",
     files(**{"f.json": json.dumps({"format": "hybrid-twin-fidelity", "version": 1, "runs": [
         {"id": "a", "source": "s", "args": ["--pattern", "M*E"], "measured": {"step_time_s": 1}},
         {"id": "a", "source": "s", "args": ["--pattern", "M*E"], "measured": {"step_time_s": 1}}]})}), None),
    ("fidelity-row-without-source", 10, 2, ["fidelity", "f.json"], "has no \"source\"",
     files(**{"f.json": json.dumps({"format": "hybrid-twin-fidelity", "version": 1, "runs": [
         {"id": "a", "args": ["--pattern", "M*E"], "measured": {"step_time_s": 1}}]})}), None),
    ("fidelity-unknown-metric", 10, 2, ["fidelity", "f.json"], "unknown measured key 'speed'",
     files(**{"f.json": json.dumps({"format": "hybrid-twin-fidelity", "version": 1, "runs": [
         {"id": "a", "source": "s", "args": ["--pattern", "M*E"], "measured": {"speed": 1}}]})}), None),
    ("fidelity-negative-measurement", 10, 2, ["fidelity", "f.json"], "must be a positive number",
     files(**{"f.json": json.dumps({"format": "hybrid-twin-fidelity", "version": 1, "runs": [
         {"id": "a", "source": "s", "args": ["--pattern", "M*E"], "measured": {"step_time_s": -1}}]})}), None),
    ("fidelity-row-that-cannot-simulate", 10, 1, ["fidelity", "f.json"], "",
     files(**{"f.json": json.dumps({"format": "hybrid-twin-fidelity", "version": 1, "runs": [
         {"id": "a", "source": "s", "args": ["--pattern", "M*E", "--ep", "3"], "measured": {"step_time_s": 1}}]})}),
     lambda d, out, err: "error:" in out),
    ("costs-kernel-table-short", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"], "sizes^3 = 8 numbers",
     files(**{"c.json": '{"kernel_table": {"sizes": [256, 512], "gemm_bf16_tflops": [1, 2], "hbm_gbps": 3000}}'}), None),
    ("costs-kernel-table-descending", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"], "strictly ascending",
     files(**{"c.json": '{"kernel_table": {"sizes": [512, 256], "gemm_bf16_tflops": [1,1,1,1,1,1,1,1], "hbm_gbps": 3000}}'}),
     None),
    ("costs-kernel-table-grouped-short", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"],
     "experts x rows x shapes = 4 numbers",
     files(**{"c.json": '{"kernel_table": {"sizes": [256, 512], "gemm_bf16_tflops": [1,1,1,1,1,1,1,1], "hbm_gbps": 3000,'
                        ' "grouped": {"experts": [4, 8], "rows": [128, 512], "shapes": [[4096, 3072]], "seconds": [1, 1]}}}'}),
     None),
    ("costs-kernel-table-grouped-shape", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"], "[k, n] pairs",
     files(**{"c.json": '{"kernel_table": {"sizes": [256, 512], "gemm_bf16_tflops": [1,1,1,1,1,1,1,1], "hbm_gbps": 3000,'
                        ' "grouped": {"experts": [4], "rows": [128], "shapes": [4096], "seconds": [1]}}}'}),
     None),
    ("costs-kernel-table-grouped-launch", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"],
     "grouped_launch_us",
     files(**{"c.json": '{"kernel_table": {"sizes": [256, 512], "gemm_bf16_tflops": [1,1,1,1,1,1,1,1], "hbm_gbps": 3000,'
                        ' "grouped_launch_us": -3}}'}),
     None),
    ("costs-kernel-table-sustained-fraction", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"],
     "sustained.fraction",
     files(**{"c.json": '{"kernel_table": {"sizes": [256, 512], "gemm_bf16_tflops": [1,1,1,1,1,1,1,1], "hbm_gbps": 3000,'
                        ' "sustained": {"fraction": "fast"}}}'}),
     None),
    ("costs-kernel-table-sm-sharing", 10, 2, ["simulate", "--pattern", "M*E", "--costs", "c.json"], "sm_sharing",
     files(**{"c.json": '{"kernel_table": {"sizes": [256, 512], "gemm_bf16_tflops": [1,1,1,1,1,1,1,1], "hbm_gbps": 3000,'
                        ' "sm_sharing": {"sms": [8, 16], "speed": [0.9]}}}'}),
     None),
    ("calibrate-sustain-alone", 10, 2, ["calibrate", "--sustain", "5"], "--sustain goes with --gpu", None, None),
    ("calibrate-gpu-with-a-trace", 10, 2, ["calibrate", "--gpu", "--trace", "t.json"], "takes no trace", None, None),
    ("calibrate-emulate-alone", 10, 2, ["calibrate", "--emulate"], "--emulate goes with --gpu", None, None),
    ("grad-bf16-end-of-step", 10, 2, ["simulate", "--pattern", "M*E", "--grad-sync", "end-of-step",
                                      "--grad-reduce-in-bf16"], "--grad-reduce-in-bf16 needs --grad-sync megatron",
     None, None),
    ("platform-slow-gpu-spread", 10, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:slow_gpu_spread=0.9"],
     "slow_gpu_spread", None, None),
    ("simulate-mxfp8-on-hopper", 10, 2, ["simulate", "--pattern", "M*E", "--precision", "mxfp8"], "needs a GPU with MXFP8",
     None, None),
    ("simulate-unknown-dispatcher", 10, 2, ["simulate", "--pattern", "M*E", "--moe-dispatcher", "nccl"], "moe-dispatcher",
     None, None),
    # issue 29 (search, beside issue 32): a zero in a list divided the world by zero (SIGFPE);
    # emitted job lines must be one shell word per value, whatever the bytes
    ("search-zero-in-tp-list", 10, 2, ["search", "--pattern", "[*E]", "--preset", "tiny", "--gpus", "4", "--gbs", "8",
                                       "--tp-list", "0"], "--tp-list holds 0", None, None),
    ("search-zero-in-mbs-list", 10, 2, ["search", "--pattern", "[*E]", "--preset", "tiny", "--gpus", "4", "--gbs", "8",
                                        "--mbs-list", "0"], "--mbs-list holds 0", None, None),
    ("search-emit-jobs-hostile-names", 10, 0,
     ["search", "--pattern", "[*E]", "--preset", "tiny", "--gpus", "4", "--gbs", "8", "--emit-jobs", "jobs.txt",
      "--jobs-dir", "out'; touch PWNED; echo '$(touch PWNED2)", "--bin", "true", "--platform", "dgx-h100"],
     "", None,
     lambda d, out, err: subprocess.run(["sh", "-n", "jobs.txt"], cwd=d).returncode == 0
     and all(subprocess.run(["sh", "-c", line], cwd=d).returncode == 0
             for line in open(os.path.join(d, "jobs.txt")).read().splitlines()[:3])
     and not os.path.exists(os.path.join(d, "PWNED")) and not os.path.exists(os.path.join(d, "PWNED2"))
     and os.path.isdir(os.path.join(d, "out'; touch PWNED; echo '$(touch PWNED2)"))),
    ("model-router-groups-not-dividing", 10, 2, ["simulate", "--pattern", "M*E", "--router-groups", "5",
                                                 "--router-group-topk", "2"], "must divide num_experts", None, None),
    # issue 28/29: uneven pipeline stages, and number checks that name the bound (not a DBL_MAX range)
    ("simulate-uneven-stages-not-dividing", 10, 2,
     ["simulate", "--pattern", "*-*-*-*-*-", "--preset", "tiny", "--pp", "3", "--microbatches", "3", "--no-overlap",
      "--decoder-first-pipeline-num-layers", "3"], "do not divide evenly over the 2 middle ranks", None, None),
    ("simulate-uneven-stages-with-account-for", 10, 2,
     ["simulate", "--pattern", "*-*-*-*-*-", "--preset", "tiny", "--pp", "2", "--microbatches", "2", "--no-overlap",
      "--first-stage-layers", "4", "--account-for-loss"], "cannot be combined with counting", None, None),
    # issue 29: sentinels that swallowed bad values, sweeps where nothing ran, outputs that were
    # replaced or taken as "no output", platform magnitudes far outside any hardware
    ("simulate-mbs-zero", 10, 2, ["simulate", "--pattern", "M*E", "--mbs", "0"], "--mbs: Value 0 must be > 0", None, None),
    ("simulate-gbs-zero", 10, 2, ["simulate", "--pattern", "M*E", "--gbs", "0"], "--gbs: Value 0 must be > 0", None, None),
    # Numbers in decimal only: CLI11 reads hex, binary, octal, '+4' and hex floats.
    ("number-hex-whole", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "0x2", "--dp", "2"],
     "--ep = '0x2' is not a whole number in decimal digits", None, None),
    ("number-plus-sign", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "+2"],
     "--dp = '+2' is not a whole number in decimal digits", None, None),
    ("number-hex-seed", 10, 2, ["fuzz", "--seed", "0x10", "--cases", "1"],
     "--seed = '0x10' is not a whole number in decimal digits", None, None),
    ("number-hex-float", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--routing-skew", "0x1p1"],
     "--routing-skew = '0x1p1' is not a decimal number", None, None),
    ("expert-load-log-not-json", 10, 2, ["expert-load", ".", "--ep", "2"], "rank1.jsonl' line 1 is not valid JSON",
     files(**{"rank0.jsonl": '{"iter": 1, "block": "decoder", "layer": 0, "tpe": [[1, 2]]}\n', "rank1.jsonl": "{\n"}), None),
    ("expert-load-log-huge-iter", 10, 2, ["expert-load", ".", "--ep", "1"], "must be >= 0 and below 2^62",
     files(**{"rank0.jsonl": '{"iter": 18446744073709551615, "block": "decoder", "layer": 0, "tpe": [[1]]}\n'}), None),
    ("expert-load-log-fifo", 10, 2, ["expert-load", "rank0.jsonl", "--ep", "1"], "not a regular file",
     lambda d: os.mkfifo(os.path.join(d, "rank0.jsonl")), None),
    ("simulate-expert-node-load-above-rank", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2",
                                                     "--expert-load", "1.2", "--expert-node-load", "1.3"],
     "never above the busiest", None, None),
    ("simulate-expert-node-load-below-mean", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2",
                                                     "--expert-node-load", "0.3"],
     "--expert-node-load: Value 0.3 must be in [1, 1e+06]", None, None),
    ("simulate-expert-load-below-mean", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--expert-load", "0.5"],
     "--expert-load: Value 0.5 must be in [1, 1e+06]", None, None),
    ("simulate-expert-load-with-skew", 10, 2, ["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--expert-load", "1.2",
                                              "--routing-skew", "0.3"], "expert_load and routing_skew both set the expert load", None, None),
    ("simulate-memory-margin-negative", 10, 2, ["simulate", "--pattern", "M*E", "--memory-margin", "-2"],
     "--memory-margin: Value -2 must be in [0, 1e+06]", None, None),
    ("simulate-memory-margin-infinite", 10, 2, ["simulate", "--pattern", "M*E", "--memory-margin", "inf"],
     "Value inf must be in [0, 1e+06]", None, None),
    ("search-gpu-hour-price-infinite", 10, 2, ["search", "--pattern", "M*E", "--gpus", "2", "--train-tokens", "1B",
                                               "--gpu-hour-price", "1e999"], "Value 1e999 must be in [0, 1e+06]", None, None),
    ("simulate-recompute-empty", 10, 2, ["simulate", "--pattern", "M*E", "--recompute", ""], "--recompute was given an empty value",
     None, None),
    ("simulate-recompute-full-in-list", 10, 2, ["simulate", "--pattern", "M*E", "--recompute", "layernorm,full"],
     "'full' stands alone", None, None),
    ("sweep-every-row-fails", 10, 2, ["simulate", "--pattern", "M*E", "--sweep", "tp=0"],
     "every combination of the sweep failed", None, None),
    ("sweep-empty-item", 10, 2, ["simulate", "--pattern", "M*E", "--sweep", "ep=1,,2"], "empty value", None, None),
    ("sweep-key-twice", 10, 2, ["simulate", "--pattern", "M*E", "--sweep", "ep=1,2", "--sweep", "ep=4,8"],
     "given twice", None, None),
    ("output-read-only-kept", 10, 2, ["simulate", "--pattern", "M*E", "--trace", "t.json"], "is read-only",
     lambda d: (write(os.path.join(d, "t.json"), "keep"), os.chmod(os.path.join(d, "t.json"), 0o444)),
     lambda d, out, err: open(os.path.join(d, "t.json")).read() == "keep"),
    ("outputs-same-file", 10, 2, ["simulate", "--pattern", "M*E", "--trace", "x.out", "--svg", "./x.out"],
     "name the same file", None, lambda d, out, err: not os.path.exists(os.path.join(d, "x.out"))),
    ("output-empty-path", 10, 2, ["plan", "--pattern", "M*E", "-o", ""], "an empty path", None, None),
    ("platform-absurd-peak", 10, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:peak_tflops=1e-30"],
     "is outside [0.1, 1e+06] TFLOP/s", None, None),
    ("platform-overlap-clock-above-one", 10, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:overlap_clock=1.5"],
     "'overlap_clock' must be in (0, 1]", None, None),
    ("platform-delta-rule-scale-absurd", 10, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:delta_rule_scale=1e9"],
     "'delta_rule_scale' = 1e9 is outside", None, None),
    # issue 28: the new readers (Megatron arguments, Hugging Face configs) refuse by name
    ("megatron-args-unexpanded-variable", 10, 2, ["simulate", "--megatron-args", "a.sh", "--model", "qwen3-30b-a3b"],
     "unexpanded shell variable", files(**{"a.sh": "--bf16 --tensor-model-parallel-size ${TP} --sequence-parallel"}), None),
    ("megatron-args-not-a-file", 10, 2, ["simulate", "--megatron-args", "."], "not a regular file", None, None),
    # A translated run the layout rules refuse answers in one line (the used/ignored report follows
    # a run that ran, not a refusal).
    ("megatron-args-layout-refusal-one-line", 10, 2, ["simulate", "--megatron-args", "m.txt"],
     "num_heads = 4 must be a multiple of tp = 3",
     files(**{"m.txt": "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --bf16 "
                        "--micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --ffn-hidden-size 128 "
                        "--tensor-model-parallel-size 3 --sequence-parallel --foo 3\n"}),
     lambda d, out, err: err.count("\n") == 1),
    # found by fuzz_card_readers: the head size was hidden / 0
    ("megatron-args-zero-heads", 10, 2, ["simulate", "--megatron-args", "m.txt"],
     "--num-attention-heads = 0 must be at least 1",
     files(**{"m.txt": "--bf16 --num-layers 4 --hidden-size 64 --num-attention-heads 0"}), None),
    ("megatron-args-world-overflow", 10, 2, ["simulate", "--megatron-args", "m.sh", "--model", "qwen3-30b-a3b"],
     "more than the 524288 a plan holds",
     files(**{"m.sh": "torchrun --nnodes 896334497 --nproc-per-node 8 pretrain_gpt.py --bf16"}), None),
    ("megatron-args-launcher-negative", 10, 2, ["simulate", "--megatron-args", "m.sh", "--model", "qwen3-30b-a3b"],
     "--nnodes = -2 must be at least 1",
     files(**{"m.sh": "torchrun --nnodes -2 --nproc-per-node 8 pretrain_gpt.py --bf16"}), None),
    ("megatron-args-yaml-empty-value", 10, 2, ["simulate", "--megatron-args", "m.yaml"],
     "--tensor-model-parallel-size takes one value, got 0",
     files(**{"m.yaml": "--bf16 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100\n"
                        "--tensor-model-parallel-size:\n"}), None),
    # the same class, by reading: each was a SIGFPE before
    ("megatron-args-zero-pp", 10, 2, ["simulate", "--megatron-args", "m.txt"],
     "--pipeline-model-parallel-size = 0 must be at least 1",
     files(**{"m.txt": "--bf16 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 "
                       "--pipeline-model-parallel-size 0 --num-layers-per-virtual-pipeline-stage 2"}), None),
    ("megatron-args-zero-vocab-divisor", 10, 2, ["simulate", "--megatron-args", "m.txt"],
     "--make-vocab-size-divisible-by = 0 must be at least 1",
     files(**{"m.txt": "--bf16 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 1000 "
                       "--make-vocab-size-divisible-by 0"}), None),
    ("megatron-args-zero-mamba-head", 10, 2, ["simulate", "--megatron-args", "m.txt"],
     "--mamba-head-dim = 0 must be at least 1",
     files(**{"m.txt": "--bf16 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 "
                       "--mamba-head-dim 0 --hybrid-override-pattern M*M*"}), None),
    ("models-import-unknown-family", 10, 2, ["models", "import", "c.json", "-o", "card.json"], "model_type 'gpt_oss'",
     files(**{"c.json": '{"model_type": "gpt_oss", "hidden_size": 8}'}),
     lambda d, out, err: not os.path.exists(os.path.join(d, "card.json"))),
    # issue 29: messages are one line of text: no terminal escapes, no 100 KB echo
    ("message-escape-sequence-not-echoed", 10, 2, ["pattern", "M*\x1b[31mE"], "\\x1b[31m",
     None, lambda d, out, err: "\x1b" not in err),
    ("message-huge-argument-capped", 10, 2, ["simulate", "--model", "a" * 100000], "more bytes)",
     None, lambda d, out, err: len(err) < 4000),
    # issue 29: model cards (and every JSON input) say each thing once and only what they know
    ("card-duplicate-key", 10, 2, ["simulate", "--model", "c.json"], 'gives the key "hidden" twice',
     files(**{"c.json": '{"name": "x", "pattern": "M*E", "dims": {"hidden": 4096, "hidden": 8}}'}), None),
    ("card-nested-unknown-field", 10, 2, ["simulate", "--model", "c.json"], 'unknown field "published.total_parms"',
     files(**{"c.json": '{"pattern": "M*E", "dims": {"hidden": 64}, "published": {"total_parms": 5}}'}), None),
    ("card-without-pattern", 10, 2, ["simulate", "--model", "c.json"], 'the card lacks "pattern"',
     files(**{"c.json": '{"name": "x", "dims": {"hidden": 64}}'}), None),
    # models import: every refusal names the config; where the card goes is checked first
    ("import-family-rule-names-file", 10, 2, ["models", "import", "j.json"],
     'j.json: "attn_layer_offset" = 9 must be below "attn_layer_period"', files(**{"j.json": '{"model_type": "jamba", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "num_hidden_layers": 4, "attn_layer_period": 0, "attn_layer_offset": 9, "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 16}'}), None),
    ("import-pattern-names-file", 10, 2, ["models", "import", "n.json"],
     "n.json: the layer pattern 'MQ*-' is refused: R1", files(**{"n.json": '{"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "hybrid_override_pattern": "MQ*-", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}'}),
     lambda d, out, err: err.count("\n") == 1),
    ("import-output-folder-before-reading", 10, 2, ["models", "import", "n.json", "-o", "."],
     "is a directory", files(**{"n.json": '{"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "hybrid_override_pattern": "MQ*-", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}'}), None),
    ("import-output-is-the-config", 10, 2, ["models", "import", "n.json", "-o", "./n.json"],
     "is the config being imported", files(**{"n.json": '{"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "hybrid_override_pattern": "MQ*-", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}'}),
     lambda d: open(os.path.join(d, "n.json")).read() == '{"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "hybrid_override_pattern": "MQ*-", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}'),
    # issue 29: merge reads one schema and one run's results
    ("merge-different-runs", 10, 2, ["merge", "a.json", "b.json"], "results of different runs",
     files(**{"a.json": json.dumps(RESULT), "b.json": json.dumps(dict(RESULT, layout=dict(RESULT["layout"], gbs=64)))}),
     None),
    # The message shows what differs, here a platform setting past the platform's name and a long
    # pattern past its first 30 characters (both were cut before the difference).
    ("merge-different-settings-shown", 10, 2, ["merge", "a.json", "b.json"],
     "[*E][*-][*E][*E][*E][*E][*...' vs '...E][*E][*E][*E][*E][*E][*E][*E][*E][*E][*...'; platform 'platform dgx-h100 nodes 4 ib_gbps 200' vs",
     files(**{"a.json": json.dumps(dict(RESULT, platform="platform dgx-h100 nodes 4 ib_gbps 400", pattern="[*E]" * 20)),
              "b.json": json.dumps(dict(RESULT, platform="platform dgx-h100 nodes 4 ib_gbps 200", pattern="[*E]" * 11 + "[*-]" + "[*E]" * 8))}),
     None),
    ("merge-file-twice", 10, 2, ["merge", "a.json", "./a.json"], "given twice",
     files(**{"a.json": json.dumps(RESULT)}), None),
    ("merge-negative-step", 10, 2, ["merge", "a.json"], "step_time_s = -1; expected a number in (0, 1e+12]",
     files(**{"a.json": json.dumps(dict(RESULT, step_time_s=-1))}), None),
    ("merge-wrong-type", 10, 2, ["merge", "a.json"], "mfu = \"high\"; expected a number in [0, 1]",
     files(**{"a.json": json.dumps(dict(RESULT, mfu="high"))}), None),
    ("merge-huge-layout-value", 10, 2, ["merge", "a.json"], "layout.tp = 1e+300 is not a whole number >= 1",
     files(**{"a.json": json.dumps(dict(RESULT, layout=dict(RESULT["layout"], tp=1e300)))}), None),
    # issue 29, round three (a probe of about 990 inputs, 2026-12-06): values that ran silently,
    # results that ranked wrongly, job files that could not run, raw library text
    ("simulate-empty-number", 10, 2, ["simulate", "--pattern", "M*E", "--gated-ffn", ""],
     "--gated-ffn was given an empty value", None, None),
    ("search-list-value-twice", 10, 2, ["search", "--pattern", "M*E", "--gpus", "2", "--gbs", "4", "--tp-list", "1,1"],
     "--tp-list holds '1' twice", None, None),
    ("search-nothing-left", 10, 2, ["search", "--pattern", "M*E", "--gpus", "2", "--gbs", "4", "--ep-list", "3"],
     "no layout of the", None, None),
    ("search-jobs-dir-is-jobs-file", 10, 2, ["search", "--pattern", "M*E", "--gpus", "2", "--gbs", "4",
                                             "--emit-jobs", "j.txt", "--jobs-dir", "j.txt"],
     "--emit-jobs and --jobs-dir name the same file", None, None),
    ("search-jobs-dir-newline", 10, 2, ["search", "--pattern", "M*E", "--gpus", "2", "--gbs", "4",
                                        "--emit-jobs", "j.txt", "--jobs-dir", "a\nb"], "holds a control character", None, None),
    ("simulate-trace-to-stdout", 10, 2, ["simulate", "--pattern", "M*E", "--trace", "/dev/stdout"],
     "is a stream of this process", None, None),
    ("platform-key-twice", 10, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:nodes=2,nodes=4"],
     "platform key 'nodes' is given twice", None, None),
    ("simulate-memory-margin-overflows", 10, 2, ["simulate", "--pattern", "M*E", "--memory-margin", "1e300"],
     "must be in [0, 1e+06]", None, None),
    ("merge-same-layout-two-steps", 10, 2, ["merge", "a.json", "b.json"], "hold the same layout with different step times",
     files(**{"a.json": json.dumps(RESULT), "b.json": json.dumps(dict(RESULT, step_time_s=RESULT["step_time_s"] * 2))}),
     None),
    ("merge-no-results", 10, 2, ["merge", "a.json"], "hold no result", files(**{"a.json": '{"results": []}'}), None),
    ("merge-layout-zero", 10, 2, ["merge", "a.json"], "layout.pp = 0 is not a whole number >= 1",
     files(**{"a.json": json.dumps(dict(RESULT, layout=dict(RESULT["layout"], pp=0)))}), None),
    ("merge-fraction-above-one", 10, 2, ["merge", "a.json"], "a2a_hidden_fraction = 7; expected a number in [0, 1]",
     files(**{"a.json": json.dumps(dict(RESULT, a2a_hidden_fraction=7))}), None),
    ("fidelity-row-writes-a-file", 10, 2, ["fidelity", "f.json"], "'--trace' is not allowed",
     files(**{"f.json": FID.replace("ARGS", '["--pattern","M*E","--trace","t.json"]')}), None),
    ("fidelity-row-compare-grouping", 10, 2, ["fidelity", "f.json"], "'--compare-grouping' is not allowed",
     files(**{"f.json": FID.replace("ARGS", '["--pattern","M*E","--compare-grouping"]')}), None),
    ("fidelity-version-string", 10, 2, ["fidelity", "f.json"], "unsupported version",
     files(**{"f.json": FID.replace("ARGS", '["--pattern","M*E"]').replace('"version":1', '"version":"1"')}), None),
    ("fidelity-unknown-run-field", 10, 2, ["fidelity", "f.json"], "unknown field 'rnak'",
     files(**{"f.json": FID.replace("ARGS", '["--pattern","M*E"],"rnak":false')}), None),
    ("fidelity-extra-help", 10, 2, ["fidelity", "--extra", "--help"], "'--help' is not allowed", None, None),
    ("unknown-command", 10, 2, ["bogus"], "'bogus' is not a command (pattern, plan", None, None),
    ("search-offload-attn-proj-alone", 10, 2, ["search", "--pattern", "M*E", "--gpus", "2", "--gbs", "4",
                                               "--offload-modules", "attn_proj"], "attn_proj needs core_attn", None, None),
    ("simulate-offload-unknown-module", 10, 2, ["simulate", "--pattern", "M*E", "--offload-modules", "core_attn,,moe_act"],
     "unknown offload module ''", None, None),
    ("plan-offload-none-in-a-list", 10, 2, ["plan", "--pattern", "[*E]", "--offload-modules", "none,core_attn"],
     "offload 'none' stands alone", None, None),
    ("simulate-offload-with-full-recompute", 10, 2, ["simulate", "--pattern", "M*E", "--offload-modules", "core_attn",
                                                     "--recompute", "full"], "nothing to offload", None, None),
    ("simulate-host-link-zero", 10, 2, ["simulate", "--pattern", "M*E", "--platform", "dgx-h100:host_link_gbs=0"],
     "'host_link_gbs' = 0 is outside", None, None),
    ("search-gpus-negative", 10, 2, ["search", "--pattern", "M*E", "--gpus", "-16", "--gbs", "4"], "--gpus = -16", None,
     None),
    ("megatron-args-uniform-zero-layers", 14, 2, ["simulate", "--megatron-args", "m.txt"],
     "--recompute-num-layers = 0: needs --recompute-num-layers N >= 1",
     files(**{"m.txt": "--bf16 --num-layers 4 --hidden-size 1024 --num-attention-heads 4 --vocab-size 128 "
                       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 0"}), None),
    ("models-import-zero-sparse-step", 14, 2, ["models", "import", "c.json"],
     '"decoder_sparse_step" = 0 must be >= 1',
     files(**{"c.json": '{"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4, '
                        '"vocab_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, '
                        '"intermediate_size": 128, "num_hidden_layers": 4, "decoder_sparse_step": 0}'}), None),
    ("models-import-mlp-only-layer-outside", 14, 2, ["simulate", "--model", "c.json"],
     '"mlp_only_layers" = 1000 is not a layer',
     files(**{"c.json": '{"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4, '
                        '"vocab_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, '
                        '"intermediate_size": 128, "num_hidden_layers": 4, "mlp_only_layers": [1000]}'}), None),
    ("models-import-zero-moe-layer-freq", 14, 2, ["models", "import", "c.json"],
     '"moe_layer_freq" = 0 must be >= 1',
     files(**{"c.json": '{"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, '
                        '"vocab_size": 128, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, '
                        '"qk_rope_head_dim": 8, "v_head_dim": 16, "intermediate_size": 128, "n_routed_experts": 8, '
                        '"num_experts_per_tok": 2, "moe_intermediate_size": 32, "num_hidden_layers": 4, '
                        '"moe_layer_freq": 0}'}), None),
    ("megatron-args-attention-only-mamba-defaults", 14, 0, ["simulate", "--megatron-args", "m.txt"],
     "megatron-args: used",
     files(**{"m.txt": "--bf16 --num-layers 4 --hidden-size 2880 --num-attention-heads 64 --kv-channels 64 "
                       "--group-query-attention --num-query-groups 8 --vocab-size 201088 --seq-length 4096 "
                       "--micro-batch-size 1 --global-batch-size 8 --swiglu --ffn-hidden-size 2880"}), None),
    ("simulate-negative-stage-layers", 10, 2,
     ["simulate", "--pattern", "*-", "--pp", "2", "--first-stage-layers", "-3"], "must be >= 0",
     None, lambda d, out, err: "179769" not in err),
]


def temporary_files(d):
    found = []
    for root, _, names in os.walk(d):
        found += [os.path.join(root, n) for n in names if ".tmp-" in n]
    return found


def run_case(case):
    name, _, want, argv, words, setup, check = case
    d = tempfile.mkdtemp(prefix="ht-bad-")
    try:
        if setup:
            setup(d)
        try:
            rc, out, err = run(argv, d)
        except subprocess.TimeoutExpired:
            return f"still running after {TIMEOUT_S} s"
        if rc < 0:
            return f"died of signal {-rc}: {err.strip()[-300:]}"
        if rc != want:
            return f"exit {rc}, expected {want}: {err.strip()[-300:]}"
        if words and words not in err:
            return f"stderr lacks {words!r}: {err.strip()[-300:]}"
        if want == 2 and err.count("\n") > 4:
            return f"a refusal of {err.count(chr(10))} lines: {err.strip()[-300:]}"
        litter = temporary_files(d)
        if litter:
            return f"left temporary files: {litter}"
        if check:
            why = check(d, out, err) if check.__code__.co_argcount == 3 else check(d)
            if why is False:
                return "the extra check failed"
            if isinstance(why, str):
                return why
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------- interrupts and full disks
class Tmpfs:
    """A small tmpfs mounted for one case (root, Linux)."""

    def __init__(self, size, options=""):
        self.path = tempfile.mkdtemp(prefix="ht-tmpfs-")
        opts = f"size={size}" + ("," + options if options else "")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", self.path], capture_output=True, text=True)
        if r.returncode != 0:
            os.rmdir(self.path)
            raise OSError(r.stderr.strip() or "mount failed")

    def close(self):
        subprocess.run(["umount", self.path], capture_output=True)
        shutil.rmtree(self.path, ignore_errors=True)


def memory_cases():
    """A replay larger than the memory the process may use (here ulimit -v 1 GiB; the documented
    plan limits need about 3.7 GiB) is refused before the plan is built, with its estimate and the
    figure it was held against, not killed by the kernel part way through."""
    name = "size-replay-beyond-memory"
    if FILTER and FILTER not in name:
        return []
    def small():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    d = tempfile.mkdtemp(prefix="ht-bad-")
    try:
        start = time.time()
        p = subprocess.run([BIN, "simulate", "--model", "qwen3-30b-a3b", "--platform", "dgx-h100", "--gpus", "2048",
                            "--gbs", "4096", "--ep", "8", "--no-fold"], cwd=d, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=small)
        lines = p.stderr.strip().splitlines()
        ok = p.returncode == 2 and len(lines) == 1 and "this replay needs about" in lines[0] \
            and "this process may use" in lines[0] and time.time() - start < 30
        return [(name, None if ok else f"exit {p.returncode}: {p.stderr.strip()[-300:]}")]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def interrupt_cases():
    """SIGINT/SIGTERM while a long run writes a checkpoint after every step: the run stops with
    128 + signal (or finishes), the checkpoint folder holds exactly one generation that loads, and
    no temporary file is left."""
    results = []
    for k, (sig, delay) in enumerate([(signal.SIGINT, 0.0), (signal.SIGTERM, 0.0), (signal.SIGINT, 0.013),
                                      (signal.SIGTERM, 0.021), (signal.SIGINT, 0.034), (signal.SIGTERM, 0.055),
                                      (signal.SIGINT, 0.089), (signal.SIGTERM, 0.144)]):
        name = f"interrupt-checkpoint-{signal.Signals(sig).name}-{k}"
        if FILTER and FILTER not in name:
            continue
        d = tempfile.mkdtemp(prefix="ht-bad-")
        try:
            p = subprocess.Popen([BIN, "train", "--steps", "400", "--checkpoint-every", "1", "--checkpoint", "ck",
                                  "--hidden", "128", "--ffn", "512", "--experts", "8", "--moe-ffn", "256",
                                  "--batch", "1", "--seq", "8", "--quiet"],
                                 cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, preexec_fn=limits)
            deadline = time.time() + TIMEOUT_S
            while not os.path.exists(os.path.join(d, "ck", "manifest.json")) and p.poll() is None and time.time() < deadline:
                time.sleep(0.002)
            time.sleep(delay)
            p.send_signal(sig)
            try:
                _, err = p.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                results.append((name, "did not stop after the signal"))
                continue
            why = None
            if p.returncode not in (0, 128 + sig):
                why = f"exit {p.returncode}, expected {128 + sig}: {err.strip()[-300:]}"
            elif temporary_files(d):
                why = f"left temporary files: {temporary_files(d)}"
            else:
                names = sorted(os.listdir(os.path.join(d, "ck")))
                if len(names) != 3:
                    why = f"the checkpoint folder holds {names}"
                else:
                    rc, _, err2 = run(["train", "--resume", "ck", "--steps", "0", "--quiet"], d)
                    if rc != 0:
                        why = f"the checkpoint does not load after the signal: {err2.strip()[-300:]}"
            results.append((name, why))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return results


def mounted_cases():
    names = ["full-disk-checkpoint-keeps-previous", "full-disk-trace", "read-only-checkpoint-before-first-step"]
    names = [n for n in names if not FILTER or FILTER in n]
    if not names:
        return [], []
    if not IS_ROOT:
        return [], [(n, "needs root on Linux to mount a small tmpfs") for n in names]
    results, skipped = [], []
    for name in names:
        try:
            fs = Tmpfs("3m" if name != "read-only-checkpoint-before-first-step" else "1m",
                       "ro" if name == "read-only-checkpoint-before-first-step" else "")
        except OSError as e:
            skipped.append((name, f"cannot mount a tmpfs here: {e}"))
            continue
        d = tempfile.mkdtemp(prefix="ht-bad-")
        try:
            ck = os.path.join(fs.path, "ck")
            if name == "full-disk-checkpoint-keeps-previous":
                # One generation (model + optimizer, 1.8 MB) fits in 3 MB, the next cannot be written.
                rc, _, err = run(["train", "--steps", "3", "--checkpoint-every", "1", "--checkpoint", ck, "--quiet"], d)
                why = None
                if rc != 2 or "No space left on device" not in err:
                    why = f"exit {rc}, expected 2 with the OS's reason: {err.strip()[-300:]}"
                elif temporary_files(fs.path) or len(os.listdir(ck)) != 3:
                    why = f"left {sorted(os.listdir(ck))} in the checkpoint folder"
                else:
                    why = loads(ck, 1)(d)
            elif name == "full-disk-trace":
                with open(os.path.join(fs.path, "filler"), "wb") as f:
                    try:
                        f.write(b"\0" * (3 << 20))
                    except OSError:
                        pass
                rc, _, err = run(["simulate", "--pattern", "M*E", "--ep", "2", "--dp", "2", "--trace",
                                  os.path.join(fs.path, "t.json")], d)
                why = None if rc == 2 and "No space left on device" in err and not temporary_files(fs.path) \
                    and not os.path.exists(os.path.join(fs.path, "t.json")) else f"exit {rc}: {err.strip()[-300:]}"
            else:
                rc, _, err = run(["train", "--steps", "30", "--checkpoint", ck], d)
                why = None if rc == 2 and "Read-only file system" in err and "step " not in err \
                    else f"exit {rc}, expected 2 before the first step: {err.strip()[-300:]}"
            results.append((name, why))
        finally:
            fs.close()
            shutil.rmtree(d, ignore_errors=True)
    return results, skipped


def main():
    passed = failed = 0
    skipped = []
    chosen = [c for c in CASES if not FILTER or FILTER in c[0]]
    # Two cases at a time (each in its own folder): the machine has two cores.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(run_case, chosen))
    for case, why in zip(chosen, verdicts):
        print(("FAIL " if why else "ok   ") + f"[class {case[1]:2}] {case[0]}" + (f": {why}" if why else ""), flush=True)
        passed, failed = passed + (why is None), failed + (why is not None)
    for name, why in memory_cases():
        print(("FAIL " if why else "ok   ") + f"[class  4] {name}" + (f": {why}" if why else ""), flush=True)
        passed, failed = passed + (why is None), failed + (why is not None)
    for name, why in interrupt_cases():
        print(("FAIL " if why else "ok   ") + f"[class  7] {name}" + (f": {why}" if why else ""), flush=True)
        passed, failed = passed + (why is None), failed + (why is not None)
    results, skipped = mounted_cases()
    for name, why in results:
        print(("FAIL " if why else "ok   ") + f"[class  7] {name}" + (f": {why}" if why else ""), flush=True)
        passed, failed = passed + (why is None), failed + (why is not None)
    for name, why in skipped:
        print(f"skip [class  7] {name}: {why}", flush=True)
    print(f"{passed} passed, {failed} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
