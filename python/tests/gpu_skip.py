"""The gpu suites' skip: without torch (or another module a suite needs) or a CUDA device torch can see,
a suite prints a loud line naming the reason and exits 77, which ctest counts as skipped
(SKIP_RETURN_CODE), so a machine without a GPU reports the suite as skipped rather than passed.

    try:
        import torch
    except ImportError:
        torch = None
    ...
    if __name__ == "__main__":
        gpu_skip.exit_unless_runnable(torch)            # or (torch, transformers=transformers)
        unittest.main()

Staged copies of the gpu suites sit next to this file (scripts/stage_device_build.sh copies it with them).
"""
import sys
from typing import Optional

EXIT_SKIPPED = 77


def reason(torch, **needed) -> Optional[str]:
    """Why a gpu suite cannot run here, or None when it can. torch: the module, None when its import
    failed; needed: other modules by name, None when theirs failed."""
    missing = [name for name, module in (("torch", torch), *needed.items()) if module is None]
    if missing:
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


def exit_unless_runnable(torch, **needed) -> None:
    """Returns when the suite can run; otherwise prints "*** GPU TESTS SKIPPED: <reason> ***" and exits 77."""
    why = reason(torch, **needed)
    if why is not None:
        print(f"\n*** GPU TESTS SKIPPED: {why} ***\n", flush=True)
        sys.exit(EXIT_SKIPPED)
