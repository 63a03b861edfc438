#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One SHA-256 per kernel of a CUDA binary's SASS, with names taken out, so that a refactor that renames files,
namespaces or kernels can show that the machine code did not change:

    scripts/sass_digest.py build/libdash_attn.so > before.txt     # (cuobjdump: CUDA, nvidia-cuda-cuobjdump, triton)
    ... refactor, rebuild ...
    scripts/sass_digest.py build/libdash_attn.so > after.txt
    scripts/sass_digest.py --compare before.txt after.txt [--ignore REGEX]

Each line: digest, instruction count, demangled-ish kernel name. --compare matches kernels by digest (names may
differ) and lists the kernels of either side that have no twin on the other; --ignore drops kernels of the
first file whose name matches (e.g. kernels the change deliberately removed).

For kernel experiments, the opcode counts of each kernel whose name matches --kernels (a regex), or with two
binaries (objects or libraries) the difference per kernel, matched by name:

    scripts/sass_digest.py --opcodes build/libdash_attn.so --kernels backward_kernel
    scripts/sass_digest.py --opcodes base.o new.o --kernels backward_kernel
"""
import argparse
from collections import Counter
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys


def find_cuobjdump():
    for candidate in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if candidate and os.path.exists(candidate):
            return candidate
    try:  # the nvidia-cuda-cuobjdump and -nvdisasm wheels (nvidia/cu13/bin): no toolkit needed
        import nvidia
        for root in nvidia.__path__:
            found = sorted(glob.glob(os.path.join(root, "cu*", "bin", "cuobjdump")))
            if found:
                return found[-1]
    except ImportError:
        pass
    try:
        import triton  # its wheel carries a cuobjdump
        found = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
        if found:
            return found[0]
    except ImportError:
        pass
    sys.exit("sass_digest: no cuobjdump found (CUDA toolkit, `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`"
             " or triton)")


def kernels_of(binary):
    """{mangled kernel name: [instruction texts of each copy]} of a binary's SASS."""
    cuobjdump = find_cuobjdump()
    # cuobjdump -sass runs nvdisasm, which the wheels (nvidia-cuda-nvdisasm) put beside it, off PATH.
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", ""))
    text = subprocess.run([cuobjdump, "-sass", binary], capture_output=True, text=True, check=True, env=env).stdout
    kernels = {}
    name, body = None, []
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                kernels.setdefault(name, []).append(body)
            name, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if name and m:
            # The instruction text; symbol names (calls, relocations) are replaced by a placeholder.
            body.append(re.sub(r"_Z\w+", "<symbol>", m.group(1)))
    if name:
        kernels.setdefault(name, []).append(body)
    return kernels


def opcode(instruction):
    """HGMMA.64x64x16.F32.BF16 R24, ... -> HGMMA (the predicate and the modifiers dropped)."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0].split(".")[0]


def opcodes(files, kernel_pattern):
    counted = []
    for binary in files:
        counted.append({name: [Counter(opcode(i) for i in body) for body in bodies]
                        for name, bodies in kernels_of(binary).items() if re.search(kernel_pattern, name)})
    for name in sorted(counted[0]):
        for copy, first in enumerate(counted[0][name]):
            total = sum(first.values())
            if len(counted) == 1:
                print(f"{total:6d} {name}\n       " + " ".join(f"{k}={v}" for k, v in first.most_common()))
                continue
            if name not in counted[1] or copy >= len(counted[1][name]):
                print(f"{total:6d} {name}: not in {files[1]}")
                continue
            second = counted[1][name][copy]
            changed = sorted(((k, second[k] - first[k]) for k in set(first) | set(second) if second[k] != first[k]),
                             key=lambda kv: -abs(kv[1]))
            print(f"{total:6d} -> {sum(second.values()):6d} {name}\n       " +
                  (" ".join(f"{k}{v:+d}" for k, v in changed) or "the same opcode counts"))
    for name in sorted(set(counted[-1]) - set(counted[0])):
        print(f"{sum(counted[-1][name][0].values()):6d} {name}: not in {files[0]}")
    return 0


def digests(binary):
    kernels = kernels_of(binary)
    rows = []
    for name, bodies in sorted(kernels.items()):
        for body in bodies:
            rows.append((hashlib.sha256("\n".join(body).encode()).hexdigest()[:16], len(body), name))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--compare", action="store_true", help="compare two digest files")
    parser.add_argument("--ignore", help="regex: kernels of the first file to leave out of the comparison")
    parser.add_argument("--opcodes", action="store_true",
                        help="opcode counts per kernel of one binary, or their difference between two")
    parser.add_argument("--kernels", default="", help="regex: with --opcodes, the kernels to count")
    args = parser.parse_args()
    if args.opcodes:
        if len(args.files) > 2:
            sys.exit("--opcodes takes one or two binaries")
        return opcodes(args.files, args.kernels)
    if not args.compare:
        for binary in args.files:
            for digest, count, name in digests(binary):
                print(f"{digest} {count:6d} {name}")
        return 0
    if len(args.files) != 2:
        sys.exit("--compare takes two digest files")
    read = lambda path: [line.split(maxsplit=2) for line in open(path).read().splitlines() if line.strip()]
    before, after = read(args.files[0]), read(args.files[1])
    if args.ignore:
        before = [row for row in before if not re.search(args.ignore, row[2])]
    after_digests = {row[0] for row in after}
    before_digests = {row[0] for row in before}
    missing = [row for row in before if row[0] not in after_digests]
    new = [row for row in after if row[0] not in before_digests]
    print(f"{len(before)} kernels before, {len(after)} after; {len(before) - len(missing)} of the first have an "
          f"identical twin")
    for row in missing:
        print("changed or gone:", " ".join(row))
    for row in new:
        print("new or changed: ", " ".join(row))
    return 1 if missing or new else 0


if __name__ == "__main__":
    sys.exit(main())
