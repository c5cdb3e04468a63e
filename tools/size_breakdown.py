#!/usr/bin/env python3
"""Where a library's bytes are: symbol sizes of an unstripped build, grouped by path.

  size_breakdown.py target/dist/libferrite_c.so [--depth N] [--top N]

Reads `nm --size-sort -C -S` (the `dist` profile keeps symbols; strip removes them
afterwards) and sums the sizes of code and data symbols by the first DEPTH segments
of their demangled path (`ferrite::backend::cpu` at depth 3). A generic function is
counted under the path of its definition, whoever instantiated it; closures under
the function that holds them. Data symbols are listed as `[data] path`. Sections
(`size -A`) show what symbols do not: unwind tables, relocations, string literals.
"""
import argparse
import collections
import re
import subprocess


def groups(lib, depth):
    out = subprocess.run(["nm", "--size-sort", "-C", "-S", lib], capture_output=True, text=True, check=True).stdout
    sums = collections.Counter()
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4:
            continue
        size, kind, name = int(parts[1], 16), parts[2].lower(), parts[3]
        if kind in "tw":
            prefix = ""
        elif kind in "rd":
            prefix = "[data] "
        else:
            continue
        # `<T as Trait>::f` counts under T; leading `&`/`&mut` are dropped.
        m = re.match(r"^<?(?:&(?:mut )?)?([A-Za-z_][\w:]*)", name)
        path = m.group(1) if m else name
        sums[prefix + "::".join([s for s in path.split("::") if s][:depth])] += size
    return sums


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    sums = groups(args.lib, args.depth)
    print(f"{sum(sums.values()):>9}  all symbols")
    for k, v in sums.most_common(args.top):
        print(f"{v:>9}  {k}")


if __name__ == "__main__":
    main()
