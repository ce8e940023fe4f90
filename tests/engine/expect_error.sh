#!/bin/sh
# Runs a command that must fail with a given exit code and a given text on stderr.
# Usage: expect_error.sh EXIT_CODE TEXT COMMAND [ARGS...]
want_rc=$1; want_text=$2; shift 2
err=$("$@" 2>&1 >/dev/null); rc=$?
printf '%s\n' "$err"
[ "$rc" -eq "$want_rc" ] || { echo "exit code $rc, expected $want_rc"; exit 1; }
printf '%s' "$err" | grep -qF -- "$want_text" || { echo "stderr lacks: $want_text"; exit 1; }
