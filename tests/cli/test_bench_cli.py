"""`flashrtc bench` without a GPU: the plan it would run (--dry-run) and its usage errors.

Usage: FLASHRTC_CLI=<path to the flashrtc command> python3 test_bench_cli.py
"""
import json
import os
import subprocess
import unittest

CLI = os.environ.get("FLASHRTC_CLI", "flashrtc")


def bench(*args):
    return subprocess.run([CLI, "bench", *args], capture_output=True, text=True, timeout=120)


def plan(*args):
    r = bench("--dry-run", "--json", *args)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()]


def flops(row):
    return 4.0 * row["B"] * row["H"] * row["N"] * row["Nk"] * row["d"] * (0.5 if row["causal"] else 1.0)


class StandardGrid(unittest.TestCase):
    def test_default_is_perf_md_grid_in_the_peers_order(self):
        rows = plan()
        self.assertEqual(len(rows), 2 * 2 * 2 * 6)  # dtypes x head dims x masks x seqlens
        expected = [(dt, d, causal, n)
                    for dt in ("bfloat16", "float16") for d in (64, 128) for causal in (False, True)
                    for n in (512, 1024, 2048, 4096, 8192, 16384)]
        self.assertEqual([(r["dtype"], r["d"], r["causal"], r["N"]) for r in rows], expected)
        for r in rows:
            self.assertEqual(r["B"] * r["N"], 16384)
            self.assertEqual(r["H"] * r["d"], 2048)
            self.assertEqual((r["Hkv"], r["Nk"]), (r["H"], r["N"]))
            self.assertEqual(r["provider"], "flashrtc")
            self.assertEqual(r["layout"], "bhnd")
            self.assertAlmostEqual(r["gflop"], flops(r) / 1e9, places=6)
            self.assertNotIn("ms", r)

    def test_restrictions(self):
        rows = plan("--dtype", "fp16", "--head-dim", "128", "--seqlen", "1024,4096", "--mask", "causal")
        self.assertEqual([(r["dtype"], r["d"], r["N"], r["B"], r["H"], r["mask"]) for r in rows],
                         [("float16", 128, 1024, 16, 16, "causal"), ("float16", 128, 4096, 4, 16, "causal")])

    def test_head_dims_outside_the_grid_round_heads_down(self):
        rows = plan("--dtype", "bf16", "--head-dim", "96,256", "--seqlen", "2048", "--mask", "none")
        self.assertEqual([(r["d"], r["H"], r["B"]) for r in rows], [(96, 21, 8), (256, 8, 8)])

    def test_shapes_with_kv_length_and_kv_heads(self):
        rows = plan("--shape", "2,16,1000,64,3000,4", "--shape", "1,8,17,128", "--dtype", "fp32",
                    "--mask", "causal-br", "--layout", "bnhd")
        self.assertEqual([(r["B"], r["H"], r["Hkv"], r["N"], r["Nk"], r["d"]) for r in rows],
                         [(2, 16, 4, 1000, 3000, 64), (1, 8, 8, 17, 17, 128)])
        self.assertTrue(all(r["mask"] == "causal-br" and r["layout"] == "bnhd" for r in rows))
        self.assertAlmostEqual(rows[0]["gflop"], flops(rows[0]) / 1e9, places=6)

    def test_explicit_tile_is_the_planned_tile(self):
        rows = plan("--shape", "1,8,256,64", "--dtype", "fp32", "--mask", "none",
                    "--block-m", "32", "--block-n", "32", "--warps", "4", "--stages", "1")
        self.assertEqual(rows[0]["tile"], {"block_m": 32, "block_n": 32, "warps": 4, "stages": 1})

    def test_table_has_a_row_per_point(self):
        r = bench("--dry-run", "--dtype", "bf16", "--head-dim", "64", "--mask", "none")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("6 points", lines[0])
        self.assertIn("TFLOP/s", lines[1])
        self.assertEqual(len(lines), 2 + 6)


class UsageErrors(unittest.TestCase):
    def check_usage(self, args, *fragments):
        r = bench(*args)
        self.assertEqual(r.returncode, 2, f"{args}: {r.stdout} {r.stderr}")
        for fragment in fragments:
            self.assertIn(fragment, r.stderr)

    def test_bad_shapes_name_the_problem(self):
        self.check_usage(["--shape", "1,2,3"], "4 to 6 fields")
        self.check_usage(["--shape", "2,x,3,64"], "'x' is not an integer from 1 to 2147483647")
        self.check_usage(["--shape", "2,0,3,64"], "'0' is not an integer from 1 to 2147483647")
        self.check_usage(["--shape", "2,3,64,64,64,2"], "H=3 Hkv=2", "heads_q=3 is not a multiple of heads_kv=2")
        self.check_usage(["--shape", "2,16,4096,100"], "head_dim=100")

    def test_bad_options(self):
        self.check_usage(["--shape", "2,16,512,64", "--seqlen", "512"], "excludes")
        self.check_usage(["--dtype", "fp8"], "fp8")
        self.check_usage(["--mask", "none,bogus"], "bogus")
        self.check_usage(["--head-dim", "100"], "head dim 100")
        self.check_usage(["--iters", "0"], "--iters")
        self.check_usage(["--block-m", "12", "--dry-run"], "block_m")


class WithoutGpu(unittest.TestCase):
    def test_running_needs_a_gpu_and_says_so(self):
        if subprocess.run([CLI, "info", "--has-gpu"], capture_output=True).returncode == 0:
            self.skipTest("a GPU is present")
        r = bench("--shape", "2,16,256,64", "--dtype", "bf16")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("no GPU", r.stderr)
        self.assertIn("--dry-run", r.stderr)


if __name__ == "__main__":
    unittest.main()
