#!/usr/bin/env python3
"""Static instruction counts of the hot loops in CUDA kernels' SASS.

Reads `cuobjdump -sass` output (or runs cuobjdump on a cubin, object file or
executable), finds each kernel's loops (backward branches) and prints, per
kernel, the chosen loop's length and its opcode mix; with two inputs, the
lengths side by side (a change's effect before any GPU run). The loop chosen
per kernel is the shortest one that holds a tensor-core MMA (HMMA/IMMA): the
steady-state chunk loop of the packed attention and 4-bit GEMV kernels.
`--all-loops` lists every loop instead.

  tools/sass_loops.py build/kernels.cubin                       # one build
  tools/sass_loops.py --kernel 'packed_attention_v4_kernel<1,' old.sass new.sass
  cuobjdump -sass x.cubin > x.sass                              # on a machine that has it

Opcodes are counted without modifiers (LOP3.LUT -> LOP3); `--full-opcodes`
keeps them. Local-memory traffic in the loop (LDL/STL: spills) is reported
apart. The counts are static: a loop's branches (a refresh taken every few
iterations, a rescale skipped most of the time) are all counted once.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA(?:\.\w+)*\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


def read_sass(path, cuobjdump):
    if path.endswith(".sass") or path.endswith(".txt") or path == "-":
        return (sys.stdin if path == "-" else open(path)).read()
    tool = shutil.which(cuobjdump) or cuobjdump
    try:
        return subprocess.run([tool, "-sass", path], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"sass_loops: cuobjdump -sass {path} failed ({e}); pass its output as a .sass file instead")


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return [o.strip() for o in out[: len(names)]]


def kernels(sass):
    """{demangled name: [instruction text]} with branch targets as indices."""
    chunks = re.split(r"\n\s*Function : (\S+)\n", sass)
    mangled = chunks[1::2]
    bodies = chunks[2::2]
    out = {}
    for name, body in zip(demangle(mangled), bodies):
        ins, at = [], {}
        for line in body.split("\n"):
            m = INSTRUCTION.match(line)
            if m:
                at[int(m.group(1), 16)] = len(ins)
                ins.append(m.group(2))
        out[name] = (ins, at)
    return out


def opcode(text, full):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    op = text.split()[0]
    return op if full else op.split(".")[0]


def loops(ins, at):
    found = []
    for i, text in enumerate(ins):
        m = BRANCH.search(text)
        if m and m.group(1):
            target = int(m.group(1), 16)
            if target in at and at[target] <= i:
                found.append((at[target], i))
    return found


def steady_loop(ins, at):
    best = None
    for s, e in loops(ins, at):
        ops = {opcode(x, False) for x in ins[s : e + 1]}
        if ops & {"HMMA", "IMMA"}:
            if best is None or e - s < best[1] - best[0]:
                best = (s, e)
    return best


def short_name(name):
    """The name without its parameter list (the last parenthesized group)."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i].rstrip()
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="cuobjdump -sass output (.sass/.txt), or a cubin/object/executable")
    ap.add_argument("--kernel", default="", help="only kernels whose demangled name contains this text")
    ap.add_argument("--cuobjdump", default="cuobjdump", help="cuobjdump to run on binaries")
    ap.add_argument("--top", type=int, default=16, help="opcodes shown per loop")
    ap.add_argument("--full-opcodes", action="store_true", help="count opcodes with their modifiers")
    ap.add_argument("--all-loops", action="store_true", help="every loop of each kernel (one input)")
    args = ap.parse_args()
    if len(args.inputs) > 2:
        ap.error("one input, or two to compare")
    builds = [kernels(read_sass(p, args.cuobjdump)) for p in args.inputs]
    names = [n for n in builds[0] if args.kernel in n]
    if not names:
        sys.exit(f"sass_loops: no kernel matches '{args.kernel}'")
    for name in names:
        rows = []
        for b in builds:
            if name not in b:
                rows.append(None)
                continue
            ins, at = b[name]
            chosen = loops(ins, at) if args.all_loops and len(builds) == 1 else [steady_loop(ins, at)]
            rows.append([(s, e, ins[s : e + 1]) for s, e in (c for c in chosen if c)])
        if len(builds) == 2:
            lens = [str(len(r[0][2])) if r else "-" for r in rows]
            spills = [str(sum(opcode(x, False) in ("LDL", "STL") for x in r[0][2])) if r else "-" for r in rows]
            print(f"{short_name(name)}: {lens[0]} -> {lens[1]} instructions (LDL/STL {spills[0]} -> {spills[1]})")
            continue
        for s, e, body in rows[0] or []:
            mix = collections.Counter(opcode(x, args.full_opcodes) for x in body)
            spill = mix.get("LDL", 0) + mix.get("STL", 0)
            top = ", ".join(f"{k} {v}" for k, v in mix.most_common(args.top))
            print(f"{short_name(name)}: loop [{s}, {e}] {len(body)} instructions, LDL/STL {spill}\n  {top}")
        if not rows[0]:
            print(f"{short_name(name)}: no loop with an MMA")


if __name__ == "__main__":
    main()
