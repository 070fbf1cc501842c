"""The `flashrtc` command given hostile input, without a GPU: invalid UTF-8 under --json, usage errors under
--json, and `bench --from` files that never end or are too large.

Usage: FLASHRTC_CLI=<path to the flashrtc command> python3 test_cli_hostile.py
"""
import json
import os
import subprocess
import tempfile
import unittest

CLI = os.environ.get("FLASHRTC_CLI", "flashrtc")
BAD = b"\xff\xfe"  # never valid UTF-8
CALL = ["--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"]


def flashrtc(*args, env=None, timeout=60):
    """Runs the command with arguments and environment values as bytes; a hang is a failure (timeout)."""
    full_env = {k.encode(): v.encode() for k, v in os.environ.items() if not k.startswith("FLASHRTC_")}
    full_env[b"FLASHRTC_CACHE_DIR"] = os.environ["FLASHRTC_CACHE_DIR"].encode()
    for key, value in (env or {}).items():
        full_env[key.encode()] = value if isinstance(value, bytes) else value.encode()
    argv = [CLI.encode()] + [a if isinstance(a, bytes) else a.encode() for a in args]
    return subprocess.run(argv, capture_output=True, timeout=timeout, env=full_env)


class InvalidUtf8UnderJson(unittest.TestCase):
    """A string holding invalid UTF-8 reaches the JSON as U+FFFD: the command gives its documented exit
    code and one valid JSON document on stdout, never an abort or an "internal" error."""

    def document(self, r, exit_code):
        self.assertEqual(r.returncode, exit_code, r.stderr)
        text = r.stdout.decode("utf-8")  # raises on invalid UTF-8
        return json.loads(text)

    def test_environment_values_in_usage_errors(self):
        for name, value, command in (
                ("FLASHRTC_CONFIG", b"warps=" + BAD, ["config", "--json", *CALL, "--arch", "sm_80"]),
                ("FLASHRTC_ARCH", b"sm_" + BAD, ["config", "--json", *CALL]),
                ("FLASHRTC_ARCH", b"sm_" + BAD, ["compile", "--json", "--dtype", "bf16", "--head-dim", "64"])):
            with self.subTest(variable=name, command=command[0]):
                r = flashrtc(*command, env={name: value})
                error = self.document(r, 2)["error"]
                self.assertEqual(error["exit_code"], 2)
                self.assertNotEqual(error["kind"], "internal")
                self.assertIn("\ufffd", error["message"])

    def test_working_commands_stay_working(self):
        with tempfile.TemporaryDirectory() as work:
            cache = os.path.join(work.encode(), b"cache-" + BAD)
            doc = self.document(flashrtc("info", "--json", env={"FLASHRTC_CACHE_DIR": cache}), 0)
            self.assertTrue(doc["cache"]["dir"].startswith(work + "/cache-\ufffd\ufffd"), doc["cache"])
            doc = self.document(flashrtc("config", "--json", *CALL, "--arch", "sm_90", "--gpu-name", b"GPU " + BAD), 0)
            self.assertIn("GPU \ufffd\ufffd", doc["tuning_key"])
            # An entry folder whose name is not UTF-8 is listed (or skipped), never an abort.
            os.makedirs(os.path.join(cache, b"v3", b"sm_80", BAD))
            r = flashrtc("cache", "ls", "--json", env={"FLASHRTC_CACHE_DIR": cache})
            self.assertIsInstance(self.document(r, 0), list)

    def test_a_usage_error_naming_invalid_utf8(self):
        r = flashrtc("bench", "--json", "--dry-run", "--shape", b"1,2," + BAD)
        error = self.document(r, 2)["error"]
        self.assertEqual(error["kind"], "usage")


class UsageErrorsUnderJson(unittest.TestCase):
    """--json is a flag everywhere: a command line that does not parse still prints its error as JSON."""

    def test_parse_errors(self):
        for args in (["config", "--json", "--dtype", "bf16"],  # a missing option
                     ["config", "--json", *CALL, "--head-dim", "63"],  # a refused value
                     ["bench", "--json", "--no-such-option"],
                     ["nonsense", "--json"],  # an unknown command
                     ["tune", "--json", *CALL]):  # tune has no --json: its report is --output FILE
            with self.subTest(args=args):
                r = flashrtc(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                error = json.loads(r.stdout)["error"]
                self.assertEqual(error["kind"], "usage")
                self.assertEqual(error["exit_code"], 2)
                self.assertIn(error["message"], r.stderr.decode())

    def test_without_json_stdout_stays_empty(self):
        r = flashrtc("config", "--dtype", "bf16")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, b"")

    def test_tune_output_writes_the_report(self):
        with tempfile.TemporaryDirectory() as work:
            report = os.path.join(work, "tune.json")
            r = flashrtc("tune", "--dry-run", *CALL, "--arch", "sm_80", "--output", report)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(report) as f:
                self.assertEqual(json.load(f)["arch"], "sm_80")


class BoundedFrom(unittest.TestCase):
    """bench --from reads a regular file of at most 64 MiB, and says so at once otherwise."""

    def refused(self, path, problem):
        with tempfile.TemporaryDirectory() as work:
            r = flashrtc("bench", "--from", path, "--plot", os.path.join(work, "x.png"), timeout=20)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"--from " + os.fsencode(path) + b": " + problem, r.stderr)
        self.assertIn(b"at most 64.0 MiB", r.stderr)

    def test_endless_and_special_files(self):
        self.refused("/dev/zero", b"is not a regular file")
        with tempfile.TemporaryDirectory() as work:
            fifo = os.path.join(work, "rows.fifo")
            os.mkfifo(fifo)
            self.refused(fifo, b"is not a regular file")  # no writer: reading it would wait for ever
            link = os.path.join(work, "zero.jsonl")
            os.symlink("/dev/zero", link)
            self.refused(link, b"is not a regular file")

    def test_oversized_file(self):
        with tempfile.TemporaryDirectory() as work:
            big = os.path.join(work, "big.jsonl")
            with open(big, "wb") as f:
                f.truncate(64 * 1024 * 1024 + 1)  # sparse: no disk used
            self.refused(big, b"is larger than its limit of 67108864 bytes")

    def test_a_link_to_rows_is_followed(self):
        with tempfile.TemporaryDirectory() as work:
            rows = os.path.join(work, "rows.jsonl")
            with open(rows, "w") as f:
                f.write('{"dtype":"bfloat16","N":512,"d":128,"mask":"none","tflops":300.5}\n')
            os.symlink(rows, os.path.join(work, "link.jsonl"))
            r = flashrtc("bench", "--from", os.path.join(work, "link.jsonl"), "--plot", os.path.join(work, "x.gp"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(os.path.exists(os.path.join(work, "x.dat")))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as cache:
        os.environ.setdefault("FLASHRTC_CACHE_DIR", cache)
        unittest.main()
