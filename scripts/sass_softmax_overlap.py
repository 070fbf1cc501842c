#!/usr/bin/env python3
"""Where the Hopper forward's softmax runs against its own P V, read off the SASS (`cuobjdump -sass kernel.cubin`).

In the main loop a consumer group issues S = Q K^T and O += P V, waits for S (WARPGROUP.DEPBAR.LE gsb0, 0x1),
runs the softmax, and waits for P V (WARPGROUP.DEPBAR.LE gsb0, 0x0). For each such pair of waits this prints
how many exponentials (MUFU.EX2) stand between them, i.e. run while P V may still run, and how many follow
the second wait before the next product. docs/measurements/forward-hopper/softmax_under_pv.md explains why it matters.

    cuobjdump -sass $FLASHRTC_CACHE_DIR/v3/sm_90a/<key>/kernel.cubin > k.sass   # on the GPU machine, or with
    python3 scripts/sass_softmax_overlap.py k.sass                              # Triton's bundled cuobjdump
"""
import re
import sys

INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")


def instructions(path):
    with open(path) as f:
        return [m.group(1) for line in f if (m := INSTRUCTION.match(line))]


def waits(ins):
    """(exponentials between the S wait and the P V wait, instructions between, exponentials after it)."""
    found = []
    i = 0
    while i < len(ins):
        if "DEPBAR.LE gsb0, 0x1" in ins[i]:
            j = i + 1
            while j < len(ins) and "DEPBAR.LE gsb0, 0x0" not in ins[j]:
                j += 1
            under = sum("MUFU.EX2" in x for x in ins[i + 1:j])
            k = j + 1
            while k < len(ins) and "HGMMA" not in ins[k] and "DEPBAR" not in ins[k]:
                k += 1
            after = sum("MUFU.EX2" in x for x in ins[j + 1:k])
            found.append((under, j - i - 1, after))
            i = j
        i += 1
    return found


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        ins = instructions(path)
        hgmma = sum("HGMMA" in x for x in ins)
        print(f"{path}: {len(ins)} instructions, {hgmma} HGMMA")
        for under, between, after in waits(ins):
            print(f"  exponentials under P V: {under} ({between} instructions between the waits), after its wait: {after}")


if __name__ == "__main__":
    main(sys.argv[1:])
