"""bench/compare.py without a GPU or torch: the grid it runs, the ratio table and its summary, the
tolerance rule, --from-json, and its messages for a missing peers script or matplotlib; --op decode's grid,
bytes, table and --from-json; --op varlen's lengths, FLOPs, table and arguments (compare_varlen.py).

Usage: python3 tests/cli/test_compare.py
"""
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compare.py"
spec = importlib.util.spec_from_file_location("compare", SCRIPT)
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def row(provider, tflops=None, dtype="bfloat16", d=128, causal=False, n=4096, **extra):
    r = dict(provider=provider, mode="fwd", dtype=dtype, B=16384 // n, H=2048 // d, N=n, d=d, causal=causal)
    if tflops is None:
        r["error"] = "RuntimeError: refused"
    else:
        r.update(ms=100.0 / tflops, tflops=tflops)
    r.update(extra)
    return r


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


class Grid(unittest.TestCase):
    def test_default_is_the_standard_grid_plus_d96_and_d256(self):
        a = compare.parse_args([])
        points = compare.grid(a.dtypes, a.head_dims, a.seqlens, a.causals, a.shapes)
        self.assertEqual(len(points), 2 * 4 * 2 * 6)
        self.assertEqual(points[0], ("bfloat16", 32, 32, 512, 64, False))
        self.assertEqual({p[0] for p in points}, {"bfloat16", "float16"})
        for dtype, b, h, n, d, causal in points:
            self.assertEqual(b * n, 16384)
            self.assertEqual(h, {64: 32, 128: 16, 96: 21, 256: 8}[d])
        order = [(p[4], p[5], p[3]) for p in points if p[0] == "bfloat16"]
        self.assertEqual(order, sorted(order, key=lambda x: ([64, 128, 96, 256].index(x[0]), x[1], x[2])))

    def test_restrictions_and_shapes(self):
        a = compare.parse_args(["--dtype", "fp16", "--head-dim", "128", "--seqlen", "2048", "--causal", "yes"])
        self.assertEqual(compare.grid(a.dtypes, a.head_dims, a.seqlens, a.causals, a.shapes),
                         [("float16", 8, 16, 2048, 128, True)])
        a = compare.parse_args(["--shape", "2,16,4096,128", "--shape", "1,8,100,64", "--dtype", "bf16"])
        self.assertEqual(compare.grid(a.dtypes, a.head_dims, a.seqlens, a.causals, a.shapes),
                         [("bfloat16", 2, 16, 4096, 128, False), ("bfloat16", 2, 16, 4096, 128, True),
                          ("bfloat16", 1, 8, 100, 64, False), ("bfloat16", 1, 8, 100, 64, True)])

    def test_bad_arguments(self):
        for args in (["--dtype", "fp8"], ["--shape", "1,2,3"], ["--seqlen", "x"], ["--causal", "maybe"]):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stderr)


class Table(unittest.TestCase):
    def test_ratios_missing_peers_and_summary(self):
        rows = [row("flashrtc", 400.0, max_abs_err=1e-3, sdpa_max_abs_err=2e-3), row("sdpa-flash", 200.0),
                row("sdpa-cudnn", 500.0), row("triton-fa2"), row("sdpa-efficient", 100.0),
                row("flashrtc", 300.0, n=8192, max_abs_err=1e-3, sdpa_max_abs_err=1e-3),
                row("sdpa-flash", 150.0, n=8192), row("sdpa-cudnn", 600.0, n=8192)]
        heading, lines, summary = compare.table(rows, list(compare.DEFAULT_PEERS))
        self.assertIn("flashrtc / peer", heading[0])
        self.assertEqual(len(lines), 2)
        cells = lines[0].split("|")
        self.assertEqual(cells[1].split(), ["400.0", "200.0", "500.0", "error", "100.0"])
        self.assertEqual(cells[2].split(), ["2.00", "0.80", "-"])  # flash, cudnn, triton (refused)
        self.assertIn("1.0e-03 (2.0e-03)", cells[3])
        self.assertIn("bf16: flashrtc / sdpa-cudnn: geometric mean %.2f over 2 shapes, 2 below 1"
                      % math.sqrt(0.8 * 0.5), summary)
        self.assertIn("bf16: flashrtc / sdpa-flash: geometric mean 2.00 over 2 shapes, 0 below 1", summary)

    def test_backward_rows_get_a_mode_column_and_their_own_summary(self):
        errors = dict(max_abs_err=1e-3, sdpa_max_abs_err=1e-3)
        rows = [row("flashrtc", 300.0, mode="bwd", **errors), row("sdpa-flash", 250.0, mode="bwd"),
                row("sdpa-cudnn", 500.0, mode="bwd"), row("flashrtc", 330.0, mode="fwd+bwd", **errors),
                row("sdpa-flash", 300.0, mode="fwd+bwd")]
        heading, lines, summary = compare.table(rows, list(compare.BACKWARD_PEERS))
        self.assertTrue(heading[1].startswith("mode"))
        self.assertEqual([line.split()[0] for line in lines], ["bwd", "fwd+bwd"])
        self.assertEqual(lines[0].split("|")[2].split(), ["1.20", "0.60"])
        self.assertIn("bf16 bwd: flashrtc / sdpa-flash: geometric mean 1.20 over 1 shapes, 0 below 1", summary)
        self.assertIn("bf16 fwd+bwd: flashrtc / sdpa-flash: geometric mean 1.10 over 1 shapes, 0 below 1", summary)

    def test_op_and_its_default_peers(self):
        a = compare.parse_args([])
        self.assertEqual((a.op, a.peer_names), ("fwd", list(compare.DEFAULT_PEERS)))
        a = compare.parse_args(["--op", "bwd"])
        self.assertEqual(a.peer_names, ["sdpa-flash", "sdpa-cudnn"])
        self.assertEqual(compare.MODES[a.op], ("bwd", "fwd+bwd"))
        self.assertEqual(compare.parse_args(["--op", "bwd", "--providers", "sdpa-cudnn"]).peer_names, ["sdpa-cudnn"])
        self.assertEqual(run("--op", "backward").returncode, 2)

    def test_a_mismatch_shows(self):
        rows = [row("flashrtc", None, mismatch=True, max_abs_err=0.5, sdpa_max_abs_err=1e-3), row("sdpa-flash", 200.0)]
        _, lines, summary = compare.table(rows, ["sdpa-flash"])
        self.assertIn("MISMATCH", lines[0])
        self.assertEqual(summary, [])

    def test_tolerance_rule(self):
        self.assertAlmostEqual(compare.allowed_error(1e-3, 2.0, 2 ** -7), 2e-3 + 2.0 * 2 ** -7)
        self.assertAlmostEqual(compare.allowed_error(0.0, 0.0, 2 ** -10), 1e-3 * 2 ** -10)  # floor on max|o|


def decode_row(provider, us=None, b=8, hq=32, hkv=8, nk=32768, d=128, **extra):
    r = dict(provider=provider, mode="decode", dtype="bfloat16", B=b, H=hq, Hkv=hkv, N=1, Nk=nk, d=d)
    r["bytes"] = compare.decode_bytes("bfloat16", b, hq, hkv, 1, nk, d)
    if provider == "copy":
        r["bytes"] = 2 * compare.kv_bytes("bfloat16", b, hkv, nk, d)
    if us is None:
        r["error"] = "RuntimeError: refused"
    else:
        r.update(us=us, gbps=round(r["bytes"] / (us * 1e-6) / 1e9, 1))
    r.update(extra)
    return r


class Decode(unittest.TestCase):
    def test_default_grid_skips_the_points_over_40_gb(self):
        a = compare.parse_args(["--op", "decode"])
        self.assertEqual((a.dtypes, a.head_dims, a.page_sizes, a.seqlen_q), (["bfloat16"], [128, 64], [0, 16, 64], 1))
        self.assertEqual(a.peer_names, ["sdpa-cudnn", "sdpa-flash"])
        points, skipped = compare.decode_grid(a.dtypes, a.head_dims, a.heads_pairs, a.batches, a.seqlens_kv,
                                              a.seqlen_q, a.max_kv_gb)
        self.assertEqual(len(points) + len(skipped), 1 * 2 * 4 * 4 * 4)
        self.assertEqual(points[0], ("bfloat16", 1, 32, 8, 1, 2048, 128))
        for (dtype, b, hq, hkv, nq, nk, d) in points + skipped:
            kv = 2 * b * hkv * nk * d * 2
            self.assertEqual(compare.kv_bytes(dtype, b, hkv, nk, d), kv)
            self.assertEqual((dtype, b, hq, hkv, nq, nk, d) in skipped, kv > 40e9)
        self.assertIn(("bfloat16", 128, 32, 32, 1, 131072, 128), skipped)  # 275 GB
        self.assertIn(("bfloat16", 128, 32, 8, 1, 32768, 128), points)   # 17 GB
        self.assertEqual(compare.decode_bytes("bfloat16", 8, 32, 8, 1, 32768, 128),
                         2 * 8 * 8 * 32768 * 128 * 2 + 2 * 8 * 32 * 128 * 2)

    def test_bad_decode_arguments(self):
        for args in (["--heads", "32/5"], ["--heads", "32"], ["--page-size", "12"], ["--batch", "0"],
                     ["--seqlen-kv", "x"]):
            with self.subTest(args=args):
                self.assertEqual(run("--op", "decode", *args).returncode, 2)

    def test_table_ratio_fraction_and_expanded_heads(self):
        rows = [decode_row("flashrtc", 250.0, page_size=0, max_abs_err=1e-3, sdpa_max_abs_err=2e-3),
                decode_row("flashrtc-paged", 270.0, page_size=16), decode_row("flashrtc-paged", 260.0, page_size=64),
                decode_row("sdpa-cudnn", 500.0, kv_expanded=True), decode_row("sdpa-flash"),
                decode_row("copy", 400.0),
                decode_row("flashrtc", 40.0, b=1, page_size=0), decode_row("sdpa-cudnn", 20.0, b=1)]
        heading, lines, summary = compare.decode_table(rows)
        self.assertEqual(heading[1].split("|")[1].split(),
                         ["flashrtc", "paged16", "paged64", "sdpa-cudnn", "sdpa-flash", "copy"])
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[0].split()[3] == "1")  # B=1 first
        cells = lines[1].split("|")
        self.assertEqual(cells[1].split(), ["250.0/4296", "270.0/3977", "260.0/4130", "500.0/2148*", "error",
                                            "400.0/5369"])
        self.assertEqual(cells[2].split(), ["2.00", "0.80"])  # cudnn's time over flashrtc's; of the copy's GB/s
        self.assertIn("1.0e-03 (2.0e-03)", cells[3])
        self.assertIn("bf16 decode: sdpa-cudnn / flashrtc time: geometric mean 1.00 over 2 points, 1 below 1",
                      summary)
        self.assertIn("bf16 decode: flashrtc's fraction of the copy's GB/s: median 0.80, lowest 0.80 over 1 points",
                      summary)


class FromJson(unittest.TestCase):
    def write(self, rows):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
        f.close()
        self.addCleanup(Path(f.name).unlink)
        return f.name

    def test_table_from_an_earlier_run(self):
        path = self.write([row("flashrtc", 330.0, max_abs_err=1e-3, sdpa_max_abs_err=1e-3), row("sdpa-flash", 300.0)])
        r = run("--from-json", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1.10", r.stdout)
        self.assertIn("geometric mean 1.10 over 1 shapes", r.stdout)

    def test_decode_rows_beside_forward_rows(self):
        path = self.write([row("flashrtc", 330.0, max_abs_err=1e-3, sdpa_max_abs_err=1e-3), row("sdpa-flash", 300.0),
                           decode_row("flashrtc", 250.0, page_size=0), decode_row("sdpa-cudnn", 300.0),
                           decode_row("copy", 400.0)])
        r = run("--from-json", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("geometric mean 1.10 over 1 shapes", r.stdout)
        self.assertIn("bf16 decode: sdpa-cudnn / flashrtc time: geometric mean 1.20 over 1 points", r.stdout)
        self.assertIn("250.0/4296", r.stdout)

    def test_a_recorded_decode_mismatch_fails(self):
        path = self.write([decode_row("flashrtc-paged", None, page_size=16, mismatch=True, max_abs_err=0.5,
                                      sdpa_max_abs_err=1e-3)])
        r = run("--from-json", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("MISMATCH", r.stdout)
        self.assertIn("FAILED", r.stderr)

    def test_a_recorded_mismatch_fails(self):
        path = self.write([row("flashrtc", None, mismatch=True, max_abs_err=0.5, sdpa_max_abs_err=1e-3)])
        r = run("--from-json", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED", r.stderr)


def varlen_row(provider, ms=None, mode="fwd", causal=False, **extra):
    r = dict(provider=provider, mode=mode, dtype="bfloat16", d=128, causal=causal, B=3, H=16, Hkv=16, tokens=6000,
             lengths="1000..3000")
    if ms is None:
        r["error"] = "UnsupportedError: refused"
    else:
        r.update(ms=ms, mtok_s=round(6000 / ms / 1e3, 1), tflops=1.0)
    r.update(extra)
    return r


class Varlen(unittest.TestCase):
    varlen = compare.compare_varlen

    def test_uniform_lengths_fill_the_total_from_the_seed(self):
        lengths = self.varlen.lengths_of("uniform:128:8192", 65536, 0)
        self.assertEqual(sum(lengths), 65536)
        self.assertTrue(all(1 <= n <= 8192 for n in lengths))
        self.assertTrue(all(128 <= n for n in lengths[:-1]))  # the last one is cut to fit
        self.assertEqual(lengths, self.varlen.lengths_of("uniform:128:8192", 65536, 0))
        self.assertNotEqual(lengths, self.varlen.lengths_of("uniform:128:8192", 65536, 1))

    def test_equal_and_listed_lengths(self):
        self.assertEqual(self.varlen.lengths_of("equal:4096", 65536, 0), [4096] * 16)
        self.assertEqual(self.varlen.lengths_of("equal:5000", 12000, 0), [5000] * 2)
        self.assertEqual(self.varlen.lengths_of("1,17,300", 0, 0), [1, 17, 300])
        for spec in ("uniform:0:5", "uniform:9:5", "equal:0", "1,0", "uniform:5"):
            with self.subTest(spec=spec), self.assertRaises(ValueError):
                self.varlen.lengths_of(spec, 1000, 0)

    def test_flops_count_the_real_tokens(self):
        self.assertEqual(self.varlen.varlen_flops([10, 20], 2, 64, False), 4.0 * 2 * 64 * (100 + 400))
        self.assertEqual(self.varlen.varlen_flops([10, 20], 2, 64, True), 2.0 * 2 * 64 * (100 + 400))

    def test_arguments(self):
        a = compare.parse_args(["--op", "varlen", "--lengths", "equal:2048", "--total-tokens", "8192",
                                "--heads", "32/8"])
        self.assertEqual((a.varlen_lengths, a.varlen_heads), ([2048] * 4, (32, 8)))
        self.assertIsNone(compare.parse_args(["--op", "varlen"]).varlen_heads)
        for args in (["--heads", "32/8,16/16"], ["--lengths", "equal:0"], ["--providers", "sdpa-flash"]):
            with self.subTest(args=args):
                self.assertEqual(run("--op", "varlen", *args).returncode, 2)

    def test_table_ratios_errors_and_summary(self):
        rows = [varlen_row("flashrtc", 1.0, max_abs_err=1e-3, peer_max_abs_err=2e-3), varlen_row("sdpa-jagged", 1.5),
                varlen_row("sdpa-padded", 2.5), varlen_row("flashrtc", None, mode="fwd+bwd"),
                varlen_row("sdpa-jagged", 4.0, mode="fwd+bwd")]
        heading, lines, summary = self.varlen.varlen_table(rows, compare.SHORT)
        self.assertIn("3 sequences, 6000 tokens (lengths 1000..3000)", heading[0])
        self.assertEqual(len(lines), 2)
        self.assertRegex(lines[0], r"^fwd +bf16 +128 no .* 6/1 .* 1\.50 +2\.50 \| 1\.0e-03 \(2\.0e-03\)$")
        self.assertIn("error", lines[1])
        self.assertEqual(summary, ["varlen fwd bf16: sdpa-jagged's time / flashrtc's: geometric mean 1.50 over 1 "
                                   "points, 0 below 1",
                                   "varlen fwd bf16: sdpa-padded's time / flashrtc's: geometric mean 2.50 over 1 "
                                   "points, 0 below 1"])

    def test_from_json_and_a_recorded_mismatch(self):
        path = FromJson.write(self, [varlen_row("flashrtc", 1.0), varlen_row("sdpa-jagged", 1.3)])
        r = run("--from-json", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("geometric mean 1.30 over 1 points", r.stdout)
        path = FromJson.write(self, [varlen_row("flashrtc", None, mismatch=True, max_abs_err=0.5, peer_max_abs_err=1e-3)])
        r = run("--from-json", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("MISMATCH", r.stdout)


class Messages(unittest.TestCase):
    def test_missing_peers_script(self):
        with self.assertRaises(SystemExit) as caught:
            compare.find_peers("/nonexistent/sdpa_peers.py")
        self.assertIn("--peers", str(caught.exception))

    def test_peers_script_found_by_path(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "sdpa_peers.py"
            path.write_text("")
            self.assertEqual(compare.find_peers(str(path)), path)

    def test_plot_without_matplotlib(self):
        if importlib.util.find_spec("matplotlib"):
            self.skipTest("matplotlib is installed")
        r = run("--from-json", "/dev/null", "--plot", "out.png")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--plot needs matplotlib", r.stderr)


if __name__ == "__main__":
    unittest.main()
