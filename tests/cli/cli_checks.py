"""What the tests/cli/*_test.py scripts share: a check that prints ok/FAIL and counts failures,
and a runner of the hybrid-twin binary under test."""
import subprocess


class Checks:
    def __init__(self, binary):
        self.binary = binary
        self.failures = 0

    def check(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        self.failures += 0 if ok else 1

    def run(self, args):
        """(exit code, stdout, stderr) of hybrid-twin ARGS."""
        p = subprocess.run([self.binary] + args, capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def exit(self):
        print(f"{self.failures} failures")
        raise SystemExit(1 if self.failures else 0)
