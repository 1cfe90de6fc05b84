/*
 * mma.h (gantry CUDA emulator) - the warp matrix functions of nvcuda::wmma on the CPU, for the
 * 16x16x16 shape with __nv_bfloat16 operands and float accumulators, which is
 * what Gantry's kernels use.
 *
 * The real fragments spread a tile over the 32 lanes in an unspecified layout; portable code
 * therefore only loads, stores, fills, multiplies and applies the same operation to every element
 * (x[i] for i < num_elements). Here every lane holds a whole tile in its fragment, and an
 * accumulator's element e is computed and stored by lane e % 32 only, so such code computes the
 * same result, and code that assumed a layout would not. What stays faithful:
 *   - load_matrix_sync reads the whole tile from memory as the lane reaches it and
 *     store_matrix_sync writes the tile split over the lanes (element e by lane e % 32), so a
 *     missing __syncwarp/__syncthreads between lanes writing shared memory and a load, or between
 *     a store and other lanes reading it, reads stale data (the lanes run one after another
 *     between barriers, in a shuffled order);
 *   - pointers must be 32-byte aligned and ldm a multiple of 16 bytes (abort otherwise; dynamic
 *     shared memory starts 128-byte aligned, as on a GPU);
 *   - products are formed from the operands' bf16 values and summed in fp32, as tensor cores do
 *     (their order of summation inside a 16-wide k step is not specified; this sums in k order).
 */
#ifndef GANTRY_EMU_MMA_H
#define GANTRY_EMU_MMA_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

namespace nvcuda {
namespace wmma {

/* CUDA's requirements on every wmma load and store: a 256-bit aligned pointer and a leading
 * dimension that is a multiple of 16 bytes; a GPU gives wrong results or faults otherwise. */
template <typename T> static inline void emu_wmma_check(const char *op, const T *p, unsigned ldm)
{
    if ((uintptr_t)p % 32 || (ldm * sizeof(T)) % 16) {
        fprintf(stderr, "emu: wmma::%s: pointer %p must be 32-byte aligned and ldm %u a multiple "
                        "of %zu elements (16 bytes)\n", op, (const void *)p, ldm, 16 / sizeof(T));
        abort();
    }
}

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/* rows x cols of the logical tile a fragment holds */
template <typename Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> {
    static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> {
    static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> {
    static constexpr int rows = M, cols = N;
};

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static constexpr int rows = shape_of<Use, M, N, K>::rows, cols = shape_of<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols;
    T x[num_elements]; /* row-major logical order (private to the emulator) */
};

template <typename T> static inline float emu_wmma_f32(T v)
{
    return (float)v;
}
template <> inline float emu_wmma_f32<__nv_bfloat16>(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
static inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, T v)
{
    for (int i = 0; i < f.num_elements; i++)
        f.x[i] = v;
}

template <typename F, typename T>
static inline void emu_wmma_load(F &f, const T *p, unsigned ldm, bool col)
{
    emu_wmma_check("load_matrix_sync", p, ldm);
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

/* matrix_a / matrix_b: the layout is the fragment's type */
template <typename Use, int M, int N, int K, typename T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p,
                                    unsigned ldm)
{
    emu_wmma_load(f, p, ldm, false);
}
template <typename Use, int M, int N, int K, typename T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p,
                                    unsigned ldm)
{
    emu_wmma_load(f, p, ldm, true);
}
/* accumulator: the layout is an argument */
template <int M, int N, int K, typename T>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm,
                                    layout_t layout)
{
    emu_wmma_load(f, p, ldm, layout == mem_col_major);
}

template <int M, int N, int K, typename T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm,
                                     layout_t layout)
{
    typedef fragment<accumulator, M, N, K, T> F;
    emu_wmma_check("store_matrix_sync", p, ldm);
    for (int e = emu::lane_id(); e < F::num_elements; e += 32) {
        int r = e / F::cols, c = e % F::cols;
        p[layout == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[e];
    }
}

template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                            const fragment<matrix_a, M, N, K, TA, LA> &a,
                            const fragment<matrix_b, M, N, K, TB, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c)
{
    /* only the elements this lane stores (e % 32 == lane): the others of d are never written to
     * memory, and 32 lanes computing the whole tile each would cost the emulator 32 times more */
    for (int e = emu::lane_id(); e < M * N; e += 32) {
        int i = e / N, j = e % N;
        float s = c.x[e];
        for (int k = 0; k < K; k++)
            s += emu_wmma_f32(a.x[i * K + k]) * emu_wmma_f32(b.x[k * N + j]);
        d.x[e] = s; /* d may be c: element e of c is read before */
    }
}

} // namespace wmma
} // namespace nvcuda

#endif /* GANTRY_EMU_MMA_H */
