#!/usr/bin/env python3
"""Writes that fail are failures (issue 30 item 7): an unchanged hybrid-twin runs with
write_fault.so preloaded, which fails the system calls of the atomic writer's temporary files as a
full disk (short write, then ENOSPC), a file system that takes no bytes, a device that loses the
data (fsync or close EIO) or a rename across devices (EXDEV) would. For a plain output (`plan -o`)
and for a checkpoint (`train --checkpoint`, durable: three files switched by the manifest), each
fault must end the command with exit 2 (a signal or a hang fails the test), print one error line
naming the file, and leave the folder exactly as it was: the old output or the old checkpoint
generation byte for byte, no temporary file, no file of the failed generation. The old checkpoint
then still resumes. A fault that does not apply (fsync of a file that is not durable) changes
nothing. The injector reports every fault it makes, so a fault that never fired fails the test.

usage: write_fault_test.py HYBRID_TWIN WRITE_FAULT_SO
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.path.abspath(sys.argv[1])
SHIM = os.path.abspath(sys.argv[2])
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(args, fault=None, at=None, cwd=None):
    env = dict(os.environ)
    env.pop("HT_WRITE_FAULT", None)
    env.pop("HT_WRITE_FAULT_AT", None)
    if fault:
        env["LD_PRELOAD"] = SHIM + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["HT_WRITE_FAULT"] = fault
        if at:
            env["HT_WRITE_FAULT_AT"] = str(at)
        # A sanitizer build wants its runtime first in the library list; the injector comes before it.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    p = subprocess.run([BIN] + args, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    fired = [l for l in p.stderr.splitlines() if l.startswith("write_fault: ")]
    rest = [l for l in p.stderr.splitlines() if not l.startswith("write_fault: ")]
    return p.returncode, p.stdout, rest, fired


def snapshot(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = fh.read()
    return out


def expect_failure(label, rc, err, fired, before, after, names):
    check(len(fired) >= 1, "%s: the fault fired (%d)" % (label, len(fired)))
    check(rc == 2, "%s: exit 2, no signal (%d)" % (label, rc))
    errors = [l for l in err if l.startswith("error:")]
    check(len(errors) == 1, "%s: one error line (%s)" % (label, err[-3:]))
    check(any(n in errors[0] for n in names) if errors else False,
          "%s: the error names the file (%s)" % (label, errors[:1]))
    check(after == before, "%s: the folder is as it was (%s)" %
          (label, sorted(set(after) ^ set(before)) or "same names, other bytes"))


PLAIN_KINDS = ["write-short", "write-enospc", "write-zero", "close", "rename"]
DURABLE_KINDS = PLAIN_KINDS + ["fsync"]

with tempfile.TemporaryDirectory(prefix="ht-write-fault-") as tmp:
    # --- a plain output: `plan -o` over an existing file ---
    out = os.path.join(tmp, "plain")
    os.mkdir(out)
    target = os.path.join(out, "plan.json")
    with open(target, "w") as fh:
        fh.write("the old plan\n")
    plan = ["plan", "[M*E]M-", "--ep", "2", "-o", target]
    for kind in PLAIN_KINDS:
        before = snapshot(out)
        rc, _, err, fired = run(plan, kind)
        expect_failure("plan -o under %s" % kind, rc, err, fired, before, snapshot(out), ["plan.json"])
    rc, _, err, fired = run(plan, "fsync")
    check(rc == 0 and not fired, "plan -o under fsync: a plain output is not synced, the write succeeds (%d %s)" % (rc, err[-1:]))
    with open(target) as fh:
        check(json.load(fh).get("ranks") is not None, "plan -o wrote a plan after all that")
    rc, _, err, fired = run(plan)
    check(rc == 0 and not fired, "plan -o without the injector succeeds")

    # --- a checkpoint: model, optimizer and the manifest that switches them ---
    ckpt = os.path.join(tmp, "ckpt")
    base = ["--batch", "2", "--seq", "24", "--json", "--quiet"]
    rc, first, err, _ = run(["train", "--pattern", "M[*E]*", "--steps", "1", "--checkpoint", ckpt] + base)
    check(rc == 0, "train writes a checkpoint (%s)" % err[-1:])
    rc, resumed, err, _ = run(["train", "--resume", ckpt, "--steps", "1"] + base)
    check(rc == 0, "the checkpoint resumes (%s)" % err[-1:])
    want = json.loads(resumed)["losses"] if rc == 0 else None
    again = ["train", "--resume", ckpt, "--steps", "1", "--checkpoint", ckpt] + base
    # Every temporary file, then each file of the generation on its own: the model (1), the
    # optimizer state (2), the manifest (3), whose rename is the switch.
    cases = [(k, None) for k in DURABLE_KINDS] + [(k, n) for k in ("write-enospc", "fsync", "rename") for n in (1, 2, 3)]
    for kind, at in cases:
        before = snapshot(ckpt)
        rc, _, err, fired = run(again, kind, at)
        label = "train --checkpoint under %s%s" % (kind, "" if at is None else " of file %d" % at)
        expect_failure(label, rc, err, fired, before, snapshot(ckpt), ["model", "optimizer", "manifest"])
    rc, resumed, err, _ = run(["train", "--resume", ckpt, "--steps", "1"] + base)
    check(rc == 0 and json.loads(resumed)["losses"] == want,
          "after every fault the old checkpoint resumes to the same loss (%s)" % (err[-1:] if rc else ""))
    rc, _, err, fired = run(again)
    check(rc == 0 and not fired, "without the injector the next generation is written (%s)" % err[-1:])
    names = sorted(snapshot(ckpt))
    check(len(names) == 3 and all(".tmp-" not in n for n in names), "one generation is kept (%s)" % names)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
