#!/usr/bin/env bash
# What ptxas says about the fused attention's sm_90a code, checked without a GPU: the wgmma
# kernels' products must run as written (no "wgmma ... serialized" and no injected
# "warpgroup.arrive", ptxas's C75xx notes: either means the compiler moved a register a product
# reads or writes across its fence or wait, and ptxas fenced or serialized it itself), and no tc_
# kernel may spill. Prints each tc_ kernel's registers. nvcc 13.0.88 injected a fence into the
# wgmma forward until its O rescale was pinned before the batch's fence (tc_wg_pin), and a wait
# and a fence into tensorcore_gpu_test's, whose two identical products it had merged.
# Usage: kernels/wgmma_ptxas_test.sh NVCC SOURCE_ROOT
set -euo pipefail
if [ $# -ne 2 ] || [ "${1:-}" = --help ]; then
    echo "usage: $0 NVCC SOURCE_ROOT   (compiles the wgmma code for sm_90a with ptxas -v)"
    [ "${1:-}" = --help ] && exit 0 || exit 64
fi
nvcc=$1 root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the kernels, and tensorcore_gpu_test's own wgmma kernel (what checks their layouts on a GPU)
for src in kernels/attention.cu kernels/tensorcore_gpu_test.cu; do
    if ! "$nvcc" -std=c++17 -O2 -DNDEBUG -D_GNU_SOURCE -I"$root" -arch=sm_90a -cubin -Xptxas -v \
        -x cu "$root/$src" -o "$tmp/out.cubin" >>"$tmp/ptxas.log" 2>&1; then
        cat "$tmp/ptxas.log"
        echo "FAIL: nvcc did not compile $src for sm_90a"
        exit 1
    fi
done
python3 - "$tmp/ptxas.log" <<'EOF'
import re, subprocess, sys
log = open(sys.argv[1]).read().splitlines()
def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    except OSError:
        return name
fail = 0
# ptxas's notes about wgmma: serialization (C7510, C7515, ...) or an injected fence (C7519)
for line in log:
    if re.search(r"\(C75\d\d\)", line):
        print("FAIL:", line.strip())
        fail += 1
kernels, fn = {}, None
for line in log:
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        fn = m.group(1)
        continue
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and fn:
        kernels.setdefault(fn, {})["spill"] = int(m.group(1)) + int(m.group(2))
    m = re.search(r"Used (\d+) registers", line)
    if m and fn:
        kernels.setdefault(fn, {})["regs"] = int(m.group(1))
        fn = None
tc = {k: v for k, v in kernels.items() if "tc_" in k}
if not tc:
    print("FAIL: no tc_ kernel in ptxas's output")
    fail += 1
for k in sorted(tc):
    v = tc[k]
    name = demangle(k).split("(")[0]
    print(f"{name}: {v.get('regs', '?')} registers, {v.get('spill', 0)} bytes spilled")
    if v.get("spill", 0):
        print(f"FAIL: {name} spills")
        fail += 1
# the wgmma kernels: WG, the last template argument, true (tc_forward_kernel<64, false, true>)
n_wg = sum(1 for k in tc if demangle(k).split("(")[0].endswith(", true>"))
print(f"{len(tc)} tc_ kernels, {n_wg} of them wgmma")
if n_wg == 0:
    print("FAIL: no wgmma kernel compiled (sm_90a)")
    fail += 1
print("FAIL" if fail else "OK", f"({fail} problems)")
sys.exit(1 if fail else 0)
EOF
