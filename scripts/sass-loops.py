#!/usr/bin/env python3
"""The inner loops of kernels in a cubin, from its machine code (cuobjdump -sass).

Usage: sass-loops.py CUBIN KERNEL...  (CUOBJDUMP names cuobjdump; default: the one on PATH)

For each loop (a backward branch and the code it jumps back over) that holds dp4a
instructions (IDP), prints its instructions, its dp4a and its opcode mix: the decode
matvecs' cost a block, which step 61 of docs/perf.md found them sensitive to. Works on
tests/nvptx_build.rs's cubins (target/nvptx/, clang's build) and on the driver's PTX from
polycl's program cache assembled by ptxas (scripts/bench-gpu.sh `loops`).
"""
import collections
import os
import re
import subprocess
import sys


def loops(cubin, kernel):
    cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
    sass = subprocess.run([cuobjdump, "-sass", "-fun", kernel, cubin],
                          capture_output=True, text=True, check=True).stdout
    code = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            code.append((int(m.group(1), 16), m.group(2).strip()))
    index = {address: i for i, (address, _) in enumerate(code)}
    for i, (address, text) in enumerate(code):
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= address or int(m.group(1), 16) not in index:
            continue
        body = code[index[int(m.group(1), 16)]: i + 1]
        ops = collections.Counter(
            re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in body)
        if ops["IDP"]:
            mix = " ".join(f"{k}:{v}" for k, v in ops.most_common(12))
            yield f"{kernel} loop {m.group(1)}..{address:#x}: {len(body)} instructions, {ops['IDP']} dp4a; {mix}"


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for name in sys.argv[2:]:
        for line in loops(sys.argv[1], name):
            print(line)
