"""bench/sustained.py without a GPU or torch: its variants and its usage errors, which it reports before it
imports torch.

Usage: python3 tests/cli/test_sustained.py
"""
import importlib.util
import subprocess
import sys
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "sustained.py"
sys.path.insert(0, str(SCRIPT.parent))  # it imports compare.py from beside itself
spec = importlib.util.spec_from_file_location("sustained", SCRIPT)
sustained = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sustained)


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


class Variants(unittest.TestCase):
    def test_names(self):
        self.assertEqual(sustained.parse_variant("cudnn"), ("sdpa", "cudnn"))
        self.assertEqual(sustained.parse_variant("flash"), ("sdpa", "flash"))
        self.assertEqual(sustained.parse_variant("default"), ("flashrtc", None))
        self.assertEqual(sustained.parse_variant("192,80,16,3"), ("flashrtc", (192, 80, 16, 3)))

    def test_bad_names(self):
        for name in ("efficient", "192,80,16", "192,80,16,3,1", "192,x,16,3", "0,80,16,3", ""):
            self.assertIsNone(sustained.parse_variant(name), name)


class Usage(unittest.TestCase):
    def test_errors_exit_2_before_torch(self):
        for args in ([], ["cudnn"], ["--shape", "2,16,8192", "cudnn"], ["--shape", "2,16,0,128", "cudnn"],
                     ["--shape", "2,16,8192,128", "--seconds", "1", "cudnn"],
                     ["--shape", "2,16,8192,128", "--rounds", "0", "cudnn"],
                     ["--shape", "2,16,8192,128", "cudnn", "nonsense"]):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertNotIn("Traceback", r.stderr)

    def test_help(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("power cap", r.stdout)


if __name__ == "__main__":
    unittest.main()
