#!/usr/bin/env python3
"""scripts/doc_examples.py: a stale output fails, excerpts and run-to-run values match, a command is never run
by a shell. Usage: test_doc_examples.py path/to/flashrtc"""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import doc_examples  # noqa: E402

FLASHRTC = sys.argv.pop(1) if len(sys.argv) > 1 else None


class Matching(unittest.TestCase):
    def test_a_changed_line_is_stale(self):
        self.assertFalse(doc_examples.matches(["a: 1", "b: 2"], ["a: 1", "b: 3"], {}))
        self.assertFalse(doc_examples.matches(["a: 1"], ["a: 1", "b: 2"], {}))

    def test_an_excerpt_stands_for_any_lines(self):
        self.assertTrue(doc_examples.matches(["a", "...", "z"], ["a", "b", "c", "z"], {}))
        self.assertTrue(doc_examples.matches(["a", "...", "z"], ["a", "z"], {}))
        self.assertFalse(doc_examples.matches(["a", "...", "z"], ["a", "b"], {}))

    def test_times_dates_sizes_and_keys_are_placeholders(self):
        keys = {}
        shown = ["compile:        770.9 ms", "entry: /c/v3/sm_80/2d82bcea4b2cb734328f41f14c0c0a37",
                 "2d82bcea4b2cb734 mma  230   771 ms 332.6 KiB  2026-11-28 15:25"]
        now = ["compile:        1201.5 ms", "entry: /c/v3/sm_80/" + "ab" * 16,
               "abababababababab mma  230  1201 ms 332.7 KiB  2026-11-29 02:00"]
        self.assertTrue(doc_examples.matches(shown, now, keys))
        self.assertEqual(keys, {"2d82bcea4b2cb734328f41f14c0c0a37": "ab" * 16, "2d82bcea4b2cb734": "ab" * 8})
        self.assertEqual(doc_examples.translated(["cache", "show", "2d82"], keys), ["cache", "show", "abab"])
        # Registers are no run-to-run value.
        self.assertFalse(doc_examples.matches(shown[2:], [now[2].replace(" 230 ", " 231 ")], {}))


class Commands(unittest.TestCase):
    def test_only_flashrtc_runs_and_no_shell_reads_the_words(self):
        env, argv = doc_examples.split_command("FLASHRTC_CONFIG='warps=8' flashrtc config --x \"a b\"", "/bin/fr")
        self.assertEqual(env, {"FLASHRTC_CONFIG": "warps=8"})
        self.assertEqual(argv, ["/bin/fr", "config", "--x", "a b"])
        for hostile in ["rm -rf /tmp/x", "FOO=1 sh -c 'touch x'", "", "X=1"]:
            with self.assertRaises(ValueError):
                doc_examples.split_command(hostile, "/bin/fr")
        _, argv = doc_examples.split_command("flashrtc info $(touch PWNED); touch PWNED", "/bin/fr")
        self.assertEqual(argv[1:], ["info", "$(touch", "PWNED);", "touch", "PWNED"])


@unittest.skipIf(FLASHRTC is None, "needs the flashrtc command's path as the first argument")
class EndToEnd(unittest.TestCase):
    def check(self, doc_text, *extra):
        with tempfile.TemporaryDirectory() as tmp:
            doc = Path(tmp) / "page.md"
            doc.write_text(doc_text)
            done = subprocess.run([sys.executable, str(ROOT / "scripts/doc_examples.py"), "--flashrtc", FLASHRTC,
                                   *extra, str(doc)], capture_output=True, text=True, check=False)
            return done, doc.read_text()

    def version(self):
        return subprocess.run([FLASHRTC, "--version"], capture_output=True, text=True, check=True).stdout.strip()

    def test_a_true_page_passes_and_a_stale_one_fails_naming_the_line(self):
        done, _ = self.check(f"text\n\n```\n$ flashrtc --version\n{self.version()}\n```\n")
        self.assertEqual(done.returncode, 0, done.stdout)
        done, _ = self.check("text\n\n```\n$ flashrtc --version\n0.0.0-stale\n```\n")
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("STALE", done.stdout)
        self.assertIn("page.md:4", done.stdout)

    def test_write_rewrites_a_whole_output_and_then_it_passes(self):
        done, text = self.check("```\n$ flashrtc --version\n0.0.0-stale\n```\n", "--write")
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(text, f"```\n$ flashrtc --version\n{self.version()}\n```\n")


if __name__ == "__main__":
    unittest.main()
