#!/usr/bin/env bash
# gpu_bench's MFU denominator: --peak prints the device's dense bf16 peak (kernels/gpu.h
# gpu_peak_flops) or "unknown"; a timed run's JSON carries it as peak_tflops with the MFU, both
# null where the peak is unknown (the emulator's name is in no table), and GANTRY_PEAK_TFLOPS
# sets it. Usage: gpu_bench_peak_test.sh GPU_BENCH; exit 77 without a device.
set -u
bench=$1
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
small=(--batch 2 --seq 16 --hidden 32 --layers 1 --heads 2 --vocab 100 --steps 1 --warmup 0)
check() { # check WHAT REGEX: the last output matches
    if grep -qE "$2" "$out"; then echo "ok: $1"; else echo "FAIL: $1: no line matching '$2'"; cat "$out"; fail=1; fi
}
env -u GANTRY_PEAK_TFLOPS "$bench" --peak >"$out" 2>&1
rc=$?
[ $rc = 77 ] && { cat "$out"; exit 77; }
check "--peak on an unknown device" '^unknown .+'
GANTRY_PEAK_TFLOPS=0.25 "$bench" --peak >"$out" 2>&1
check "--peak with GANTRY_PEAK_TFLOPS=0.25" '^0\.25 .+'
env -u GANTRY_PEAK_TFLOPS "$bench" "${small[@]}" >"$out" 2>&1
check "no MFU without a peak (text)" 'MFU n/a \(peak unknown: set GANTRY_PEAK_TFLOPS\)'
check "no MFU without a peak (JSON)" '"peak_tflops":null,"mfu":null\}$'
GANTRY_PEAK_TFLOPS=1e-6 "$bench" "${small[@]}" >"$out" 2>&1
check "MFU against GANTRY_PEAK_TFLOPS (text)" 'MFU [0-9.]+% \(peak 1e-06\)'
check "MFU against GANTRY_PEAK_TFLOPS (JSON)" '"peak_tflops":1e-06,"mfu":[0-9.]+(e[+-]?[0-9]+)?\}$'
# the JSON parses, and MFU = the step's FLOPs / its time / the peak (TFLOP/s is printed with 2
# decimals, 0.00 here: the FLOPs from the shape, as worker/model.c's model_step_flops counts them)
python3 - "$out" <<'PY' || fail=1
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
assert r["peak_tflops"] == 1e-6 and r["mfu"] > 0, r
B, T, C, L, K = r["batch"], r["seq"], r["hidden"], r["layers"], 2
N, F = B * T, 4 * C
flops = 3 * (L * (2 * N * C * 3 * C + 2 * N * C * C + 4 * N * C * F + 4 * B * T * T * C) + 2 * B * C * K)
want = flops / (r["ms_per_step"] / 1e3) / (r["peak_tflops"] * 1e12)
if abs(r["mfu"] - want) > 2e-3 * want:
    sys.exit(f"FAIL: mfu {r['mfu']} against {want:.4g} from tokens/s")
print(f"ok: mfu {r['mfu']} = FLOPs / step time / peak ({want:.4g})")
PY
[ $fail = 0 ] && echo "gpu_bench_peak_test: OK" || echo "gpu_bench_peak_test: FAILED"
exit $fail
