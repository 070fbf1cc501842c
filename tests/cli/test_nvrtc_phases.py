"""bench/nvrtc_phases.cpp ($FLASHRTC_NVRTC_PHASES): a dumped program (the layout FLASHRTC_DUMP_SOURCES writes)
compiled to PTX and to a cubin, its CPU time split into front end + NVVM and ptxas; extra options reach
NVRTC; usage errors. No GPU needed.

Usage: FLASHRTC_NVRTC_PHASES=build/bench/flashrtc_nvrtc_phases python3 tests/cli/test_nvrtc_phases.py
"""
import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

TOOL = os.environ.get("FLASHRTC_NVRTC_PHASES", "")
KERNEL = """#include "toy/scale.cuh"
template <int kFactor>
__global__ void toy_scale(float* x) { x[threadIdx.x] = toy::scale<kFactor>(x[threadIdx.x]); }
"""
HEADER = """#pragma once
namespace toy { template <int k> __device__ float scale(float v) { return k * v; } }
"""


def dump(root, options="--gpu-architecture=sm_90a --std=c++17 -Xptxas=-v"):
    """One program in FLASHRTC_DUMP_SOURCES's layout: <key>/<program>.cu, its headers, nvrtc_options.txt."""
    key = Path(root) / "0123abcd"
    (key / "toy").mkdir(parents=True)
    (key / "toy_scale.cu").write_text(KERNEL)
    (key / "toy" / "scale.cuh").write_text(HEADER)
    (key / "nvrtc_options.txt").write_text(options + "\nname expression: toy_scale<3>\n")
    return key


@unittest.skipUnless(TOOL and Path(TOOL).exists(), "FLASHRTC_NVRTC_PHASES names no flashrtc_nvrtc_phases")
class Phases(unittest.TestCase):
    def run_tool(self, *args):
        return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120)

    def test_a_dumped_program_is_split_into_front_end_nvvm_and_ptxas(self):
        with tempfile.TemporaryDirectory() as root:
            key = dump(root)
            done = self.run_tool("--rounds", "2", str(key))
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("min of 2 rounds", done.stdout)
            line = re.search(r"0123abcd: total (\d+), front end \+ NVVM (\d+), ptxas (-?\d+); (\d+) registers, "
                             r"cubin (\d+) bytes", done.stdout)
            self.assertIsNotNone(line, done.stdout)
            total, front, ptxas, registers, cubin = map(int, line.groups())
            self.assertLessEqual(abs(total - (front + ptxas)), 1)  # each printed rounded
            self.assertGreater(registers, 0)  # read from the -Xptxas=-v report
            self.assertGreater(cubin, 0)
            self.assertRegex(done.stdout, r"--time: CUDA C\+\+ Frontend \d+, NVVM Optimizer \d+, PTX Translation \d+")

    def test_extra_options_reach_nvrtc(self):
        with tempfile.TemporaryDirectory() as root:
            done = self.run_tool("--rounds", "1", str(dump(root)), "--", "--no-such-option")
            self.assertEqual(done.returncode, 1)
            self.assertIn("NVRTC_ERROR_INVALID_OPTION", done.stderr)

    def test_a_directory_without_a_dump_is_an_error(self):
        with tempfile.TemporaryDirectory() as root:
            done = self.run_tool(root)
            self.assertEqual(done.returncode, 1)
            self.assertIn("nvrtc_options.txt", done.stderr)

    def test_no_directory_is_a_usage_error(self):
        self.assertEqual(self.run_tool().returncode, 2)
        self.assertEqual(self.run_tool("--bogus", "x").returncode, 2)


if __name__ == "__main__":
    unittest.main()
