"""bench/compile_time.py: the ptxas time read from a compile log, the summary, the cases, and one real cold
compile through the flashrtc command ($FLASHRTC_CLI; no GPU needed).

Usage: FLASHRTC_CLI=build/host/flashrtc/flashrtc python3 tests/cli/test_compile_time.py
"""
import importlib.util
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compile_time.py"
spec = importlib.util.spec_from_file_location("compile_time", SCRIPT)
compile_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compile_time)

LOG = """ptxas info    : 13 bytes gmem
ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'
ptxas info    : Function properties for _Z1kv
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
ptxas info    : Compile time = 348.074 ms
"""


class Parsing(unittest.TestCase):
    def test_ptxas_time_is_read_from_the_log(self):
        self.assertAlmostEqual(compile_time.ptxas_ms(LOG), 348.074)

    def test_a_log_without_the_line_has_no_ptxas_time(self):
        self.assertIsNone(compile_time.ptxas_ms(LOG.replace("Compile time = 348.074 ms", "")))

    def test_the_times_of_several_entries_add_up(self):
        self.assertAlmostEqual(compile_time.ptxas_ms(LOG + LOG.replace("348.074", "1.5")), 349.574)

    def test_summary_is_median_and_minimum(self):
        samples = [{"compile_ms": c, "ptxas_ms": None, "cpu_ms": 1.0} for c in (5.0, 1.0, 3.0)]
        summary = compile_time.summarize(samples)
        self.assertEqual(summary["compile_ms"], (3.0, 1.0))
        self.assertNotIn("ptxas_ms", summary)  # missing in some samples: not summarized as zero


class Cases(unittest.TestCase):
    def setUp(self):
        os.environ.setdefault("FLASHRTC_CLI", sys.executable)  # parse_args only checks that it exists

    def test_default_cases_are_three_head_dims_and_one_mma_row(self):
        labels = [label for label, _ in compile_time.cases(compile_time.parse_args([]))]
        self.assertEqual(labels, ["bf16 d=64 none default", "bf16 d=128 none default", "bf16 d=256 none default",
                                  "bf16 d=128 none mma 128x32 w4 s2"])

    def test_every_mask_gets_its_rows(self):
        args = compile_time.parse_args(["--head-dim", "128", "--mask", "none,causal", "--mma-head-dim", "0"])
        self.assertEqual([opts for _, opts in compile_time.cases(args)],
                         [["--head-dim", "128", "--mask", "none"], ["--head-dim", "128", "--mask", "causal"]])

    def test_a_length_goes_to_every_row(self):
        args = compile_time.parse_args(["--head-dim", "64", "--mask", "causal", "--seqlen", "1024"])
        self.assertEqual(compile_time.cases(args),
                         [("bf16 d=64 causal N=1024 default", ["--head-dim", "64", "--mask", "causal", "--seqlen", "1024"]),
                          ("bf16 d=128 causal mma 128x32 w4 s2",
                           ["--head-dim", "128", "--mask", "causal", *compile_time.MMA_TILE])])

    def test_reps_below_one_is_a_usage_error(self):
        with self.assertRaises(SystemExit):
            compile_time.parse_args(["--reps", "0"])


@unittest.skipUnless(os.environ.get("FLASHRTC_CLI", "").endswith("flashrtc"), "FLASHRTC_CLI names no flashrtc command")
class ColdCompile(unittest.TestCase):
    def test_one_cold_compile_splits_into_ptxas_and_the_rest(self):
        done = subprocess.run([sys.executable, str(SCRIPT), "--head-dim", "64", "--mma-head-dim", "0", "--reps", "1",
                               "--json"], capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr)
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertEqual(row["family"], "wgmma")
        compile_ms, ptxas_ms, rest_ms = row["compile_ms"][0], row["ptxas_ms"][0], row["rest_ms"][0]
        self.assertGreater(ptxas_ms, 0)
        self.assertLess(ptxas_ms, compile_ms)
        self.assertAlmostEqual(rest_ms, compile_ms - ptxas_ms, places=6)
        self.assertGreater(row["cpu_ms"][0], 0)
        self.assertGreaterEqual(row["wall_ms"][0], compile_ms)


if __name__ == "__main__":
    unittest.main()
