#!/usr/bin/env python3
"""--train-tokens / --gpu-hour-price (issue 28 item 6) against the closed form: days = tokens /
(tokens per second) / 86400, GPU-hours = days x 24 x GPUs, cost = GPU-hours x price, for
simulate (line and JSON), search and merge (columns and JSON); merge --order gpu-hours ranks
results of different GPU counts by GPUs / (tokens per second), which step time does not; bad
budgets are refused in one line.

usage: train_budget_test.py HYBRID_TWIN
"""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

checks = Checks(sys.argv[1])
check, run = checks.check, checks.run


def close(a, b):
    return abs(a - b) <= 1e-9 * abs(b)


base = ["simulate", "--pattern", "[*E][*E]", "--preset", "tiny", "--gpus", "8", "--ep", "4", "--mbs", "1",
        "--gbs", "16"]
rc, out, err = run(base + ["--json", "--train-tokens", "2.5B", "--gpu-hour-price", "3"])
check(rc == 0, f"simulate --train-tokens 2.5B --gpu-hour-price 3 runs ({err.strip()[-200:]})")
r = json.loads(out)
t = r["train"]
days = 2.5e9 / r["tokens_per_s"] / 86400
check(t["tokens"] == 2.5e9 and close(t["days"], days), f"days = tokens / tokens_per_s / 86400 ({t['days']})")
check(close(t["gpu_hours"], days * 24 * r["gpus"]), "GPU-hours = days x 24 x GPUs")
check(close(t["cost"], days * 24 * r["gpus"] * 3) and t["gpu_hour_price"] == 3, "cost = GPU-hours x price")
rc, out, _ = run(base + ["--train-tokens", "2.5B", "--gpu-hour-price", "3"])
line = re.search(r"to train +2\.5e\+09 tokens in ([\d.]+) days on 8 GPUs, (\d+) GPU-hours, cost (\d+) at 3 per GPU-hour", out)
check(line is not None and abs(float(line.group(1)) - days) < 0.05 and int(line.group(2)) == round(days * 24 * 8),
      f"the report's line says the same ({line.group(0) if line else out[-300:]})")
rc, out, _ = run(base + ["--json", "--train-tokens", "1T"])
check(json.loads(out)["train"]["cost"] is None, "no price: the cost is null")
check(all(k not in json.loads(run(base + ["--json"])[1]) for k in ["train"]), "no budget: no train key")

for bad, words in [(["--train-tokens", ""], "--train-tokens was given an empty value"), (["--train-tokens", "1x"], "'1x'"),
                   (["--train-tokens", "0"], "from 1 to 1e18"), (["--train-tokens", "nan"], "'nan'"),
                   (["--gpu-hour-price", "2"], "needs --train-tokens"),
                   (["--train-tokens", "1T", "--sweep", "ep=2,4"], "applies to one run"),
                   (["--train-tokens", "1T", "--gpu-hour-price", "-1"], "must be in [0, 1e+06]")]:
    rc, out, err = run(base + bad)
    check(rc == 2 and words in err and out == "", f"{bad} refused: {err.strip()[:120]}")

with tempfile.TemporaryDirectory() as d:
    # Two results: B has the shorter step but more GPUs per token (twice the GPUs, 1.5x the rate).
    a = dict(r)
    b = json.loads(json.dumps(r))
    b["gpus"] = 2 * a["gpus"]
    b["tokens_per_s"] = 1.5 * a["tokens_per_s"]
    b["step_time_s"] = a["step_time_s"] / 1.5
    b["layout"]["dp"] = 2 * a["layout"]["dp"]
    for name, res in (("a.json", a), ("b.json", b)):
        json.dump(res, open(os.path.join(d, name), "w"))
    files = [os.path.join(d, "a.json"), os.path.join(d, "b.json")]
    rc, out, _ = run(["merge"] + files + ["--json", "--train-tokens", "1T"])
    by_step = json.loads(out)["results"]
    rc2, out2, _ = run(["merge"] + files + ["--json", "--train-tokens", "1T", "--order", "gpu-hours"])
    by_hours = json.loads(out2)["results"]
    check([x["gpus"] for x in by_step] == [b["gpus"], a["gpus"]], "merge ranks by step time by default")
    check([x["gpus"] for x in by_hours] == [a["gpus"], b["gpus"]]
          and by_hours[0]["train"]["gpu_hours"] < by_hours[1]["train"]["gpu_hours"],
          "merge --order gpu-hours ranks the layout that trains the budget in fewer GPU-hours first")
    rc, out, _ = run(["merge"] + files + ["--train-tokens", "1T", "--gpu-hour-price", "2"])
    check(rc == 0 and "GPU-hours" in out and "cost" in out, "merge's table shows days, GPU-hours and cost")
    del a["gpus"]
    json.dump(a, open(files[0], "w"))
    rc, out, err = run(["merge"] + files + ["--order", "gpu-hours"])
    check(rc == 2 and "gpus is missing" in err, "a result without gpus is refused for --order gpu-hours")

rc, out, err = run(["search", "--pattern", "[*E]", "--preset", "tiny", "--gpus", "4", "--gbs", "8", "--json",
                    "--train-tokens", "1B"])
rows = json.loads(out)["results"] if rc == 0 else []
check(rc == 0 and rows and all(close(x["train"]["days"], 1e9 / x["tokens_per_s"] / 86400) for x in rows),
      f"search --json carries each layout's days ({len(rows)} layouts)")
checks.exit()
