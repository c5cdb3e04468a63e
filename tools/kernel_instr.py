#!/usr/bin/env python3
"""Instructions per output element per reduction step of the main GEMM and
depthwise kernels, read from the compiled release build of ferrite-kernels for
aarch64 (NEON, dot-product and portable code) and x86-64 (AVX2 and AVX-512).

With no ARM hardware to time on (qemu timings say nothing about a real core),
the kernels are compared by what their inner loops execute: the script builds
the library for each target, disassembles it, takes for each kernel the
innermost loop (a backward branch that encloses no other) with the most
multiply-accumulates, and counts its instructions, its multiply instructions
and the multiply-accumulates (MACs) they perform. One MAC is one output element
advanced by one reduction step (one input channel of one tap), so
`instructions / MACs` is the instruction cost per output per K step, and
`multiplies / MACs` the multiply instructions per output per K step.

Usage: tools/kernel_instr.py [--markdown]

It builds the kernels crate alone (`-p ferrite-kernels`); for aarch64 that
resolves the dependencies' features differently from scripts/aarch64.sh, so a
following aarch64.sh run rebuilds the crates it tests.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (target triple or None for the host, objdump, [(label, ISA, symbol regex)])
KERNELS = [
    (
        "aarch64-unknown-linux-gnu",
        "aarch64-linux-gnu-objdump",
        [
            ("f32 GEMM / implicit conv tile", "NEON 8x8", r"igemm::aarch64::tile_neon$"),
            ("f32 GEMM / implicit conv tile", "portable 4x8 (before)", r"igemm::tile_portable$"),
            ("f32 depthwise", "NEON 4 px x 16 ch", r"conv::aarch64::dw_rows$"),
            ("f32 depthwise", "portable 4 px x 16 ch (before)", r"conv::depthwise_conv2d$"),
            ("int8 GEMM", "dotprod (sdot)", r"qgemm::aarch64::gemm$"),
            ("int8 GEMM", "NEON smull+sadalp", r"qgemm::aarch64::gemm_neon$"),
            ("int8 GEMM", "portable (before)", r"qgemm::gemm_portable$"),
        ],
    ),
    (
        None,
        "objdump",
        [
            ("f32 GEMM / implicit conv tile", "AVX-512 8x32", r"igemm::x86_64::tile_avx512$"),
            ("f32 GEMM / implicit conv tile", "AVX-512 12x16 (narrow)", r"igemm::x86_64::tile_avx512_narrow$"),
            ("f32 GEMM / implicit conv tile", "AVX2 6x16", r"igemm::x86_64::tile_avx2$"),
            ("f32 depthwise", "AVX2 2 px x 32 ch", r"conv::avx2::dw_rows$"),
            ("f32 depthwise", "AVX-512 8 px x 16 ch", r"conv::x86_64::dw_row8_avx512$"),
            ("int8 GEMM", "AVX-512 VNNI", r"qgemm::x86_64::gemm$"),
            ("int8 GEMM", "AVX2 vpmaddwd", r"qgemm::x86_64::gemm_avx2$"),
        ],
    ),
]

LANES = {"16b": 16, "8b": 8, "8h": 8, "4h": 4, "4s": 4, "2s": 2, "2d": 2}


def macs_aarch64(mnemonic, ops):
    """Multiply-accumulates one aarch64 instruction performs (0 if none)."""
    m = re.search(r"\.(16b|8b|8h|4h|4s|2s|2d)", ops)
    lanes = LANES[m.group(1)] if m else 1
    if mnemonic in ("sdot", "udot", "usdot"):
        return 4 * lanes
    if mnemonic in ("fmla", "fmls", "fmul", "smull", "smull2", "umull", "umull2", "smlal", "smlal2", "umlal", "umlal2"):
        return lanes
    if mnemonic in ("fmadd", "fmsub") and re.match(r"[sd]\d", ops):
        return 1
    # Integer mul/mla count only on vectors: scalar ones compute addresses.
    if mnemonic in ("mul", "mla") and m:
        return lanes
    return 0


def macs_x86(mnemonic, ops):
    """Multiply-accumulates one x86-64 instruction performs (0 if none)."""
    width = 16 if "zmm" in ops else 8 if "ymm" in ops else 4
    if mnemonic.startswith("vfmadd") or mnemonic.startswith("vmulp"):
        return width if mnemonic.endswith("ps") else 1
    if mnemonic == "vpdpbusd":
        return 4 * width
    if mnemonic in ("vpmaddwd", "vpmaddubsw"):
        return 2 * width if mnemonic == "vpmaddwd" else 4 * width
    if mnemonic == "vpmulld":
        return width
    return 0


def build(target):
    """Builds the kernels library in release mode; returns its rlib's path."""
    cmd = ["cargo", "build", "--release", "--locked", "-p", "ferrite-kernels", "--lib", "--message-format=json"]
    if target:
        cmd += ["--target", target]
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "ferrite_kernels":
            for f in msg["filenames"]:
                if f.endswith(".rlib"):
                    return f
    sys.exit(f"no ferrite_kernels rlib for {target or 'host'}")


def functions(objdump, rlib):
    """Demangled function name -> list of (address, mnemonic, operands), per instance."""
    text = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", rlib], check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    funcs, cur = [], None
    for line in text.splitlines():
        h = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if h:
            cur = (re.sub(r"::h[0-9a-f]{16}$", "", h.group(1)), [])
            funcs.append(cur)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if m and cur is not None:
            cur[1].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def loops(insns, is_branch_target):
    """Innermost loops of one function: (first, last) instruction indices."""
    index = {a: i for i, (a, _, _) in enumerate(insns)}
    found = []
    for i, (addr, mn, ops) in enumerate(insns):
        t = is_branch_target(mn, ops)
        if t is not None and t < addr and t in index:
            found.append((index[t], i))
    return [(s, e) for s, e in found if not any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in found)]


def aarch64_target(mn, ops):
    if mn == "b" or mn.startswith("b.") or mn in ("cbz", "cbnz", "tbz", "tbnz"):
        m = re.search(r"(?:^|,\s*)([0-9a-f]+) <", ops)
        return int(m.group(1), 16) if m else None
    return None


def x86_target(mn, ops):
    if mn.startswith("j"):
        m = re.match(r"([0-9a-f]+) <", ops)
        return int(m.group(1), 16) if m else None
    return None


def measure(funcs, pattern, arch):
    """The innermost loop with the most MACs over every instance of `pattern`."""
    macs_of = macs_aarch64 if arch == "aarch64" else macs_x86
    target_of = aarch64_target if arch == "aarch64" else x86_target
    best = None
    for name, insns in funcs:
        if not re.search(pattern, name):
            continue
        for s, e in loops(insns, target_of):
            body = insns[s : e + 1]
            macs = sum(macs_of(mn, ops) for _, mn, ops in body)
            muls = sum(1 for _, mn, ops in body if macs_of(mn, ops))
            if macs and (best is None or macs > best["macs"]):
                best = {"insns": len(body), "macs": macs, "muls": muls}
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args()
    rows = []
    for target, objdump, kernels in KERNELS:
        arch = "aarch64" if target else "x86_64"
        rlib = build(target)
        funcs = functions(objdump, rlib)
        for label, isa, pattern in kernels:
            m = measure(funcs, pattern, arch)
            if m is None:
                sys.exit(f"{label} {isa}: no loop with multiplies in {pattern}")
            rows.append((label, f"{arch} {isa}", m))
    head = ["kernel", "ISA, tile", "loop instrs", "multiply instrs", "MACs per iteration", "instrs per output per K step", "multiplies per output per K step"]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for label, isa, m in rows:
        cells = [label, isa, str(m["insns"]), str(m["muls"]), str(m["macs"]), f"{m['insns'] / m['macs']:.3f}", f"{m['muls'] / m['macs']:.3f}"]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(cells))


if __name__ == "__main__":
    main()
