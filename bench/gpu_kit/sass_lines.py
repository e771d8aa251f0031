#!/usr/bin/env python3
"""A kernel's SASS by source line, and where its warps waited (issue 53, item 6).

    bench/gpu_kit/sass_lines.py DUMP [--function NAME] [--stalls CSV] [--top N] [--json FILE]

DUMP is `nvdisasm -c -g` of a cubin built with -lineinfo, plain or xz-compressed
(scripts/gpu-bundle.sh writes the bundle's as build/sass/placer-sm_90.sass.xz). Each instruction counts to the source line nvdisasm
names before it, in classes: local-memory loads and stores (LDL, STL: a per-thread stack
object such as a copy of tier_buffers, read again where registers ran short), the spill
reloads and spills among them (ptxas marks them "SpillRefill"), generic, global and shared
loads and stores, atomics, barriers and shuffles. Without --stalls it prints the files and the
lines with the most local-memory traffic: what a GPU would wait on in L1 where a register would
do, counted on a machine without one.

--stalls CSV is ncu's source page of one launch of the same kernel, plain or xz-compressed
(`ncu -i REPORT --page source --print-source sass --csv`, the kit's `stalls` step): each instruction's warp-state
samples, joined to the dump by the instruction's offset from the function's first one (the
opcodes checked: the join's agreement is printed, and below 90% it fails; without an address
column, by the instructions' order). The lines and files
are then ranked by the samples: where the kernel's warps spent their cycles, stalled or not.
"""
import argparse
import collections
import csv
import io
import json
import lzma
import re
import sys

CLASSES = ["all", "LDL", "STL", "spill LDL", "spill STL", "LD", "ST", "ATOM", "BAR", "SHFL"]


def kind(op):
    """The class of an opcode (its name before the first dot)."""
    base = op.split(".")[0]
    if base == "LDL":
        return "LDL"
    if base == "STL":
        return "STL"
    if base in ("LD", "LDG", "LDS", "LDSM", "ULDC", "LDC"):
        return "LD"
    if base in ("ST", "STG", "STS"):
        return "ST"
    if base.startswith(("ATOM", "RED")):
        return "ATOM"
    if base in ("BAR", "WARPSYNC", "SYNCS", "UCGABAR_ARV", "UCGABAR_WAIT"):
        return "BAR"
    if base in ("SHFL", "VOTE", "VOTEU", "MATCH", "REDUX"):
        return "SHFL"
    return None


LINE = re.compile(r'\s*//## File "([^"]+)", line (\d+)')
INSN = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")
SECTION = re.compile(r"^\.text\.(\S+):")


def read_dump(lines, function=None):
    """[(offset, opcode, (file, line) or None, spill)] of the function (the first .text section
    whose name holds `function`, or every section's when None)."""
    out = []
    where = None
    inside = function is None
    for text in lines:
        m = SECTION.match(text)
        if m:
            inside = function is None or function in m.group(1)
            where = None
            continue
        if not inside:
            continue
        m = LINE.match(text)
        if m:
            where = (m.group(1).rsplit("/", 1)[-1], int(m.group(2)))
            continue
        m = INSN.match(text)
        if m:
            out.append((int(m.group(1), 16), m.group(2), where, "SpillRefill" in text))
    return out


def static_counts(insns):
    """{(file, line): Counter of CLASSES}."""
    by = collections.defaultdict(collections.Counter)
    for _, op, where, spill in insns:
        c = by[where or ("?", 0)]
        c["all"] += 1
        k = kind(op)
        if k is not None:
            c[k] += 1
            if spill and k in ("LDL", "STL"):
                c["spill " + k] += 1
    return by


def read_stalls(text):
    """ncu's source page as CSV: (rows of {column: value}, numeric columns). The header is the
    first row that names a source column and a samples column; rows before it (ncu's own
    messages, the kernel's name) are skipped."""
    rows = list(csv.reader(io.StringIO(text)))
    for i, row in enumerate(rows):
        names = [c.strip() for c in row]
        if "Source" in names and any("Sampl" in c for c in names):
            header = names
            body = [dict(zip(header, r)) for r in rows[i + 1:] if len(r) == len(header)]
            break
    else:
        raise ValueError("no header with a Source and a samples column")

    def number(v):
        try:
            float(v.replace(",", ""))
            return True
        except ValueError:
            return False

    numeric = [c for c in header if c not in ("Address", "Source", "#") and body and all(
        number(r[c]) for r in body if r[c].strip())]
    return body, numeric


def join_stalls(insns, body, numeric):
    """Samples per (file, line): each CSV row to the dump's instruction at the same offset from
    the function's first (where the page has addresses), else to the one at the same place in
    order. Returns ({where: Counter}, agreement: the share of rows whose opcode is the dump's)."""
    at = {off: (op, where) for off, op, where, _ in insns}
    order = [at[off] for off in sorted(at)]
    first_dump = min(at) if at else 0
    first_csv = min(int(r["Address"], 16) for r in body) if body and "Address" in body[0] else None
    by = collections.defaultdict(collections.Counter)
    agree = 0
    for i, r in enumerate(body):
        if first_csv is None:
            op, where = order[i] if i < len(order) else (None, None)
        else:
            op, where = at.get(int(r["Address"], 16) - first_csv + first_dump, (None, None))
        sass = r["Source"].strip().split()
        sass = [t for t in sass if not t.startswith("@")]
        if op is not None and sass and sass[0].rstrip(";") == op:
            agree += 1
        c = by[where or ("?", 0)]
        for col in numeric:
            v = r[col].replace(",", "").strip()
            c[col] += float(v) if v else 0.0
    return by, agree / len(body) if body else 0.0


def by_file(by):
    files = collections.defaultdict(collections.Counter)
    for (f, _), c in by.items():
        files[f].update(c)
    return files


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--function", help="a substring of the kernel's mangled name (default: every section)")
    ap.add_argument("--stalls", help="ncu's source page of one launch, --print-source sass --csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    try:
        with (lzma.open if a.dump.endswith(".xz") else open)(a.dump, "rt") as f:
            insns = read_dump(f, a.function)
    except (OSError, lzma.LZMAError) as e:
        print(f"sass_lines: cannot read {a.dump}: {e}", file=sys.stderr)
        return 1
    if not insns:
        print(f"sass_lines: no instructions in {a.dump}" + (f" for {a.function}" if a.function else ""), file=sys.stderr)
        return 1
    counts = static_counts(insns)
    report = {"instructions": len(insns), "lines": {}, "files": {}}
    if a.stalls:
        try:
            with (lzma.open if a.stalls.endswith(".xz") else open)(a.stalls, "rt") as f:
                body, numeric = read_stalls(f.read())
        except (OSError, ValueError) as e:
            print(f"sass_lines: cannot read the profile {a.stalls}: {e}", file=sys.stderr)
            return 1
        samples, agreement = join_stalls(insns, body, numeric)
        if agreement < 0.9:
            print(f"sass_lines: only {agreement:.0%} of the profile's opcodes are the dump's: not the same code",
                  file=sys.stderr)
            return 1
        key = next((c for c in numeric if "All Samples" in c), None) or next(
            (c for c in numeric if "Sampl" in c), numeric[0] if numeric else None)
        if key is None:
            print("sass_lines: the profile has no numeric column", file=sys.stderr)
            return 1
        total = sum(c[key] for c in samples.values()) or 1.0
        print(f"{len(insns)} instructions; profile joined on {agreement:.1%} of its rows; ranked by '{key}' "
              f"({total:.0f} in all)")
        report.update(agreement=agreement, key=key, total=total)
        rank = lambda c: c[key]  # noqa: E731
        fmt = lambda where, c: f"{where:34s} {c[key] / total:6.1%} {c[key]:9.0f}  " + "  ".join(  # noqa: E731
            f"{col} {c[col]:.0f}" for col in numeric if col != key and c[col] > 0)[:160]
        tables = {"files": by_file(samples), "lines": samples}
    else:
        print(f"{len(insns)} instructions; ranked by local-memory loads (LDL, spill reloads among them)")
        rank = lambda c: (c["LDL"], c["all"])  # noqa: E731
        fmt = lambda where, c: f"{where:34s} " + " ".join(f"{k} {c[k]:6d}" for k in CLASSES)  # noqa: E731
        tables = {"files": by_file(counts), "lines": counts}
    for name, table in tables.items():
        print(f"== {name}")
        items = sorted(table.items(), key=lambda kv: rank(kv[1]), reverse=True)
        for where, c in items[: a.top if name == "lines" else None]:
            label = where if name == "files" else f"{where[0]}:{where[1]}"
            print(fmt(label, c))
            report[name][label] = dict(c)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
