"""The `flashrtc` command's inputs as a user types them, without a GPU: lengths and archs that must be usage
errors (exit 2) naming what is accepted, and tile options that mean the same tile in every command.

Usage: FLASHRTC_CLI=<path to the flashrtc command> python3 test_cli_inputs.py
"""
import json
import os
import re
import subprocess
import tempfile
import unittest

CLI = os.environ.get("FLASHRTC_CLI", "flashrtc")
RANGE = "from 1 to 2147483647"


def flashrtc(*args, env=None):
    # A hang is a failure: the timeout turns it into an exception.
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHRTC_") or k == "FLASHRTC_CACHE_DIR"}
    full_env.update(env or {})
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60, env=full_env)


class Lengths(unittest.TestCase):
    def test_config_with_a_huge_length_returns_at_once(self):
        r = flashrtc("config", "--dtype", "bf16", "--head-dim", "128", "--seqlen", "4611686018427387905")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--seqlen", r.stderr)
        self.assertIn(RANGE, r.stderr)

    def test_bench_seqlen_zero(self):
        r = flashrtc("bench", "--dry-run", "--seqlen", "0")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(RANGE, r.stderr)
        self.assertLess(len(r.stderr), 300)

    def test_lengths_in_range_whose_product_overflows_are_usage_errors(self):
        big = "2147483647"
        for args in (["run", "--batch", big, "--heads", big, "--seqlen", big, "--head-dim", "64", "--dtype", "bf16"],
                     ["bench", "--dry-run", "--shape", f"{big},{big},{big},64"],
                     ["tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", big, "--heads", big]):
            with self.subTest(command=args[0]):
                r = flashrtc(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("over the 64-bit index range", r.stderr)


class Archs(unittest.TestCase):
    COMMANDS = [
        ["config", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"],
        ["bench", "--dry-run", "--shape", "1,8,64,64"],
        ["tune", "--dry-run", "--dtype", "bf16", "--head-dim", "64", "--seqlen", "64"],
        ["compile", "--dtype", "bf16", "--head-dim", "64"],
    ]

    def test_bad_archs_are_usage_errors_in_every_command(self):
        for command in self.COMMANDS:
            for arch in ("sm_xx", "sm_1", "sm_999", "sm_" + "9" * 5000):
                with self.subTest(command=command[0], arch=arch[:10]):
                    r = flashrtc(*command, "--arch", arch)
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertIn("must be one of sm_80", r.stderr)
                    self.assertNotIn("stoi", r.stderr)


class TileOptions(unittest.TestCase):
    """--warps 8 over the tile resolved for sm_90a (FLASHRTC_CONFIG on top of the default): one tile."""

    def test_same_tile_in_config_bench_tune_and_compile(self):
        env = {"FLASHRTC_CONFIG": "stages=1"}
        tile_args = ["--arch", "sm_90a", "--warps", "8"]
        call = ["--dtype", "bf16", "--head-dim", "128", *tile_args]
        config = flashrtc("config", *call, "--seqlen", "4096", env=env)
        self.assertEqual(config.returncode, 0, config.stderr)
        tile = re.search(r"^config:\s+(\S+)", config.stdout, re.M).group(1)
        self.assertIn("warps=8", tile)
        self.assertIn("stages=1", tile)

        bench = flashrtc("bench", "--dry-run", "--json", "--shape", "1,16,4096,128", "--mask", "none", "--dtype", "bf16",
                         *tile_args, env=env)
        self.assertEqual(bench.returncode, 0, bench.stderr)
        for line in bench.stdout.splitlines():
            t = json.loads(line)["tile"]
            self.assertEqual(f"block_m={t['block_m']},block_n={t['block_n']},warps={t['warps']},stages={t['stages']}",
                             tile)

        tune = flashrtc("tune", "--dry-run", *call, "--seqlen", "4096", env=env)
        self.assertEqual(tune.returncode, 0, tune.stderr)
        self.assertRegex(tune.stdout, r"(?m)^base:\s+" + re.escape(tile) + " ")

        compile_ = flashrtc("compile", *call, "--seqlen", "4096", env=env)
        self.assertEqual(compile_.returncode, 0, compile_.stderr)
        self.assertRegex(compile_.stdout, r"(?m)^tile:\s+" + re.escape(tile) + "$")

    def test_malformed_flashrtc_config_is_refused_alike(self):
        env = {"FLASHRTC_CONFIG": "warps=eight"}
        for command in Archs.COMMANDS:
            with self.subTest(command=command[0]):
                r = flashrtc(*command, "--arch", "sm_80", env=env)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("FLASHRTC_CONFIG='warps=eight'", r.stderr)


class Help(unittest.TestCase):
    def test_top_level_help_lists_exit_codes(self):
        r = flashrtc("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for code in ("0 ok", "1 a check failed", "2 bad usage", "3 no GPU"):
            self.assertIn(code, r.stdout)

    def test_one_layout_default(self):
        for command in ("run", "bench"):
            with self.subTest(command=command):
                r = flashrtc(command, "--help")
                self.assertRegex(r.stdout, r"--layout \S*=bhnd")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as cache:
        os.environ.setdefault("FLASHRTC_CACHE_DIR", cache)
        unittest.main()
