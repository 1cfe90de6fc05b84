#!/usr/bin/env python3
"""PyTorch's own CPU all-reduce (torch.distributed, backend "gloo") on loopback, printed as the
nccl-tests style table bench/allreduce.c prints, so bench/allreduce.sh and bench/run.sh read both
the same way.

    python3 bench/allreduce_torch.py --nproc 2 --min 4096 --max 268435456

Each size: WARMUP untimed all-reduces, then ITERS timed ones (the mean is printed). busbw =
algbw * 2 (n - 1) / n as in nccl-tests. #wrong counts elements that differ from the exact sum
(every rank adds rank + 1, a sum exact in fp32)."""
import argparse
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iters_for(size):
    # about as much work per size as bench/allreduce.c: many small, a few large
    return max(3, min(200, (64 << 20) // max(size, 1) // 4 + 3))


def rank_main(rank, n, port, lo, hi, out):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # Gloo prints "Rank r is connected to N peer ranks" on stdout; rank 0 hands its rows over in
    # a file, so a rank's stdout is not needed (errors raise, on stderr)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    want = n * (n + 1) / 2
    size = lo
    rows = []
    while size <= hi:
        count = size // 4
        t = torch.empty(count, dtype=torch.float32)
        iters = iters_for(size)
        for _ in range(2):
            t.fill_(rank + 1)
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dt = (time.perf_counter() - t0) / iters
        t.fill_(rank + 1)
        dist.all_reduce(t)
        wrong = int((t != want).sum())
        algbw = size / dt / 1e9
        rows.append((size, count, dt * 1e6, algbw, algbw * 2 * (n - 1) / n, wrong))
        size *= 2
    dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            for r in rows:
                f.write("%d %d %.1f %.3f %.3f %d\n" % r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2, help="ranks (processes) on loopback")
    ap.add_argument("--min", type=int, default=4096, help="smallest message, bytes")
    ap.add_argument("--max", type=int, default=64 << 20, help="largest message, bytes")
    a = ap.parse_args()
    if a.nproc < 1 or a.min < 4 or a.max < a.min:
        print("allreduce_torch.py: need --nproc >= 1 and 4 <= --min <= --max", file=sys.stderr)
        return 64
    import tempfile

    import torch
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows")
        mp.start_processes(rank_main, args=(a.nproc, free_port(), a.min, a.max, out),
                           nprocs=a.nproc, join=True, start_method="spawn")
        with open(out) as f:
            rows = [line.split() for line in f]
    print("# torch-gloo all-reduce: %d ranks on loopback (PyTorch %s, backend gloo)"
          % (a.nproc, torch.__version__))
    print("#       size        count   type  redop       time   algbw   busbw  #wrong")
    print("#        (B)   (elements)                     (us)  (GB/s)  (GB/s)        ")
    bad = 0
    for size, count, us, algbw, busbw, wrong in rows:
        bad += int(wrong)
        print("%12s %12s  float    sum %10s %7s %7s %7s" % (size, count, us, algbw, busbw, wrong))
    print("# Out of bounds values : %d %s" % (bad, "OK" if bad == 0 else "FAILED"))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
