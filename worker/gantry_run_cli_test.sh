#!/usr/bin/env bash
# gantry-run's flags: a value that is not a whole number in its range is refused with exit 64
# naming the flag and the range, before anything is started (atoi read "--nproc 2x" as 2 and
# "--nproc 100000" as that many processes).
# Usage: gantry_run_cli_test.sh /path/to/gantry-run
set -euo pipefail
run=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_testlib.sh"

check "runs" 0 "$run" --nproc 2 -- true
check "--nproc 2x" 64 "$run" --nproc 2x -- true
says "--nproc named" "gantry-run: --nproc 2x: want a whole number in 1..1024"
check "--nproc 100000" 64 "$run" --nproc 100000 -- true
says "--nproc range" "--nproc 100000: want a whole number in 1..1024"
check "--master-port 70000" 64 "$run" --nproc 1 --master-port 70000 -- true
says "--master-port named" "--master-port 70000: want a whole number in 1..65535"
check "--grace 5000000" 64 "$run" --nproc 1 --grace 5000000 -- true
says "--grace named" "--grace 5000000: want a whole number in 1..3600"
check "--nnodes two" 64 "$run" --nproc 1 --nnodes two -- true
says "--nnodes named" "--nnodes two: want a whole number in 1..65536"
check "--node-rank past --nnodes" 64 "$run" --nproc 1 --nnodes 2 --node-rank 2 -- true
says "--node-rank named" "--node-rank must be in 0..1 (--nnodes 2)"
check "--nproc x --nnodes over 2^31" 64 "$run" --nproc 1024 --nnodes 65536 --node-rank 0 \
    --master-addr 127.0.0.1 --master-port 1 -- true
says "world named" "--nproc 1024 x --nnodes 65536 ranks"
exit $fail
