// allreduce_gloo.cc - the Gloo peer for bench/allreduce: the same sweep and table as
// bench_allreduce, with Gloo's all-reduce over its tcp transport on loopback.
//
//   bench_allreduce_gloo RANK SIZE STORE_DIR [ALGO [MIN MAX]]
//     ALGO: "ring" (gloo::allreduce, ring: what PyTorch's ProcessGroupGloo calls),
//           "bcube" (gloo::allreduce, bcube), or "ring_chunked" (AllreduceRingChunked)
//   Ranks meet through a gloo::rendezvous::FileStore in STORE_DIR (an empty directory).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/cpu_mark.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

static double now_s()
{
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct Bench {
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::string algo;
    uint32_t tag = 0;

    void allreduce(float *p, size_t n)
    {
        if (algo == "ring_chunked") {
            gloo::AllreduceRingChunked<float> a(ctx, {p}, (int)n);
            a.run();
            return;
        }
        gloo::AllreduceOptions o(ctx);
        o.setOutput(p, n);
        o.setAlgorithm(algo == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                       : gloo::AllreduceOptions::Algorithm::RING);
        o.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
        o.setTag(tag++);
        gloo::allreduce(o);
    }

    void barrier()
    {
        gloo::BarrierOptions o(ctx);
        o.setTag(tag++);
        gloo::barrier(o);
    }

    double max_over_ranks(double v)
    {
        std::vector<double> all(ctx->size);
        gloo::AllgatherOptions o(ctx);
        o.setInput(&v, 1);
        o.setOutput(all.data(), all.size());
        o.setTag(tag++);
        gloo::allgather(o);
        for (double x : all)
            v = x > v ? x : v;
        return v;
    }
};

int main(int argc, char **argv)
{
    const char *usage = "usage: bench_allreduce_gloo RANK SIZE STORE_DIR [ALGO [MIN MAX]]\n";
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("%sGloo's all-reduce over its tcp transport on loopback, the same sweep and table "
               "as\nbench_allreduce. ALGO: ring (default: what PyTorch's gloo backend calls), "
               "bcube or\nring_chunked; sizes from MIN to MAX bytes (default 4096 to 256 MiB). "
               "The SIZE ranks meet\nthrough a FileStore in STORE_DIR (an empty directory); "
               "bench/allreduce.sh starts them.\n", usage);
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "%s", usage);
        return 64;
    }
    int rank = atoi(argv[1]), size = atoi(argv[2]);
    Bench b;
    b.algo = argc > 4 ? argv[4] : "ring";
    size_t lo = argc > 6 ? strtoull(argv[5], nullptr, 0) : 4096;
    size_t hi = argc > 6 ? strtoull(argv[6], nullptr, 0) : (256u << 20);

    const char *addr = getenv("GLOO_ADDR"); /* allreduce_nodes.sh: this node's address */
    gloo::transport::tcp::attr attr(addr && *addr ? addr : "127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(argv[3]);
    b.ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    b.ctx->setTimeout(std::chrono::seconds(300));
    b.ctx->connectFullMesh(store, dev);

    if (rank == 0) {
        printf("# gloo %s all-reduce: %d ranks on %s (tcp transport)\n", b.algo.c_str(), size,
               addr && *addr ? addr : "loopback");
        printf("# %10s %12s %6s %6s %10s %7s %7s %7s\n", "size", "count", "type", "redop",
               "time", "algbw", "busbw", "#wrong");
        printf("# %10s %12s %6s %6s %10s %7s %7s %7s\n", "(B)", "(elements)", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
    }
    std::vector<float> buf(hi / 4 + 1);
    long wrong_total = 0;
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
        size_t n = bytes / 4;
        int iters = (int)((1u << 30) / bytes);
        iters = iters > 200 ? 200 : iters < 5 ? 5 : iters;
        for (int i = 0; i < 2; i++)
            b.allreduce(buf.data(), n);
        b.barrier();
        struct cpu_mark m0, m1;
        take_mark(&m0);
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            b.allreduce(buf.data(), n);
        double mine = now_s() - t0;
        take_mark(&m1);
        if (getenv("BENCH_RUSAGE"))
            cpu_report("gloo", rank, bytes, iters, mine, &m0, &m1);
        double t = b.max_over_ranks(mine / iters);
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)((int)(i % 13) - 6) * (float)(rank + 1);
        b.allreduce(buf.data(), n);
        float wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += buf[i] != (float)((int)(i % 13) - 6) * (float)(size * (size + 1) / 2);
        b.allreduce(&wrong, 1);
        wrong_total += (long)wrong;
        double algbw = (double)bytes / t / 1e9, busbw = algbw * 2.0 * (size - 1) / size;
        if (rank == 0)
            printf("%12zu %12zu %6s %6s %10.1f %7.3f %7.3f %7d\n", bytes, n, "float", "sum",
                   t * 1e6, algbw, busbw, (int)wrong);
        fflush(stdout);
    }
    if (rank == 0)
        printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    return wrong_total ? 1 : 0;
}
