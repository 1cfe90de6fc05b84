#!/usr/bin/env python3
"""A few lines per kernel from Nsight Compute's raw page (`ncu -i REPORT --page raw --csv`).

hack/gpu-check.sh profiles gpu_kernels' hand-written kernels with ncu (sections SpeedOfLight,
Occupancy, LaunchStats, WarpStateStats, ComputeWorkloadAnalysis, MemoryWorkloadAnalysis) and
puts this script's output in summary.txt, so that the next change to a kernel starts from what
limits it rather than from a guess:

  ncu: tc_forward_kernel<64, false>  grid (16, 96, 1) x (128, 1, 1)  142.3 us  regs 198
  ncu:   SM 61.2%  memory 30.4%  DRAM 5.1%  L2 hit 97.5%  tensor pipe 48.0%  occupancy 24.8% of
         25.0%  shared bank conflicts 1234
  ncu:   4.91 cycles between a warp's instructions; stalls: long_scoreboard 1.52, barrier 0.91, ...

(one line each; the numbers here are bench/testdata/ncu_raw.csv's, made up for the test)

A metric the report lacks (another ncu version may name it otherwise) prints as '?'; the whole
details page is in bench.log either way.

  usage: bench/ncu_summary.py RAW.csv
"""
import csv
import re
import sys

# (label, exact column names to try in order)
DURATION = ("gpu__time_duration.sum",)
REGS = ("launch__registers_per_thread",)
GRID = ("launch__grid_size",)
BLOCK = ("launch__block_size",)
PCT = [
    ("SM", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("memory", ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("DRAM", ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
              "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")),
    ("L2 hit", ("lts__t_sector_hit_rate.pct",)),
]
ACHIEVED = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
THEORETICAL = ("sm__maximum_warps_per_active_cycle_pct",)
CPI = ("smsp__average_warp_latency_per_inst_issued.ratio",)
# the stall reasons WarpStateStats collects, in cycles per issued instruction
STALL = re.compile(r"issue_stalled_([a-z0-9_]+?)_per_issue_active\.ratio$")
TENSOR = re.compile(r"pipe_tensor.*pct_of_peak_sustained_active$")
BANK = re.compile(r"l1tex__data_bank_conflicts_pipe_lsu_mem_shared(_op_(ld|st))?\.sum$")


def number(text):
    """'1,234.5' -> 1234.5; None for '', 'n/a' and the like"""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def first(row, names):
    for n in names:
        v = number(row.get(n))
        if v is not None:
            return v, n
    return None, None


def fmt(v, spec=".1f", suffix=""):
    return "?" if v is None else format(v, spec) + suffix


def microseconds(v, unit):
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
             "second": 1e6, "s": 1e6}
    return None if v is None else v * scale.get(unit, 1e-3)  # ncu's default unit: ns


def short_name(name):
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth = 0  # drop the parameter list: the last top-level '(...)'
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def summarize(lines):
    # skip anything before the header (==PROF== lines, warnings)
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return ["ncu: no CSV header in the raw page (its output is in bench.log)"]
    rows = list(csv.reader(lines[start:]))
    if len(rows) < 2:
        return ["ncu: no kernel was profiled"]
    head = rows[0]
    # the second row holds the units (ns, %, ...) unless it is already a kernel's (ID a number)
    has_units = number(rows[1][0] if rows[1] else "") is None
    unit = dict(zip(head, rows[1])) if has_units else {}
    out = []
    for values in rows[1 + has_units:]:
        if len(values) != len(head):
            continue
        row = dict(zip(head, values))
        d, dn = first(row, DURATION)
        regs, _ = first(row, REGS)
        grid = row.get(GRID[0], "?")
        block = row.get(BLOCK[0], "?")
        out.append(f"ncu: {short_name(row.get('Kernel Name', '?'))}  grid {row.get('Grid Size', grid)} "
                   f"x {row.get('Block Size', block)}  "
                   f"{fmt(microseconds(d, unit.get(dn, '')), '.1f', ' us')}  regs {fmt(regs, '.0f')}")
        parts = [f"{label} {fmt(first(row, names)[0], '.1f', '%')}" for label, names in PCT]
        tensor = [number(v) for k, v in row.items() if TENSOR.search(k)]
        tensor = [v for v in tensor if v is not None]
        parts.append(f"tensor pipe {fmt(max(tensor) if tensor else None, '.1f', '%')}")
        parts.append(f"occupancy {fmt(first(row, ACHIEVED)[0], '.1f', '%')} of "
                     f"{fmt(first(row, THEORETICAL)[0], '.1f', '%')}")
        banks = [number(v) for k, v in row.items() if BANK.search(k)]
        banks = [v for v in banks if v is not None]
        if banks:
            parts.append(f"shared bank conflicts {max(banks):.0f}")
        out.append("ncu:   " + "  ".join(parts))
        stalls = sorted(((number(v), m.group(1)) for k, v in row.items()
                         for m in [STALL.search(k)] if m and number(v) is not None),
                        reverse=True)
        top = ", ".join(f"{name} {v:.2f}" for v, name in stalls[:4] if v > 0)
        out.append(f"ncu:   {fmt(first(row, CPI)[0], '.2f')} cycles between a warp's "
                   f"instructions; stalls: {top or '?'}")
    return out or ["ncu: no kernel row in the raw page"]


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 64
    try:
        with open(argv[1], newline="") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"ncu_summary: {e}", file=sys.stderr)
        return 66
    print("\n".join(summarize(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
