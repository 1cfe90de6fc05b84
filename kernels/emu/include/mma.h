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

/* The PTX warp-level matrix instructions Gantry's tensor-core attention uses (kernels/mma.h
 * wraps them: inline PTX on a GPU, these on the emulator). Unlike wmma their register layouts
 * are specified (PTX ISA, "Matrix Fragments for mma.m16n8k16" and "ldmatrix"), and kernels rely
 * on them, so the emulator implements exactly those layouts: a kernel that put an element in the
 * wrong register gets a wrong result here as on a GPU. Both are warp-wide: all 32 lanes meet
 * (emu::warp_gather), exchange their registers or row addresses, and each lane then computes
 * its own part. In a lane, g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group); a .b32
 * register holding two bf16 keeps the lower-indexed element in its low 16 bits. */
namespace emu {

static inline float emu_bf16_lo(uint32_t r)
{
    return emu_bf16_to_f32((unsigned short)(r & 0xffffu));
}
static inline float emu_bf16_hi(uint32_t r)
{
    return emu_bf16_to_f32((unsigned short)(r >> 16));
}

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d (16x8) = a (16x16) b (16x8) + c.
 *   a: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
 *      a[3] = A[g+8][2t+8, 2t+9]
 *   b: b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
 *   c, d: c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
 * Products of the bf16 values are summed in fp32 in k order onto c (the hardware's order inside
 * the instruction is not specified). d may be c. */
static inline void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                     const float c[4])
{
    struct regs {
        uint32_t a[4], b[2];
    } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
    const unsigned char *all = warp_gather(&mine, sizeof mine);
    /* lane l's registers; a lane reads only what its outputs need: rows g and g+8 of A (held by
     * lanes 4g..4g+3) and columns 2t, 2t+1 of B (lanes 8t..8t+3 and 8t+4..8t+7) */
    auto R = [all](int l) -> const regs * { return (const regs *)(all + l * EMU_GATHER_MAX); };
    const int g = lane_id() / 4, t = lane_id() % 4;
    float A[2][16], B[2][16];
    for (int q = 0; q < 4; q++) { /* lane 4g + q holds columns 2q, 2q+1 and 2q+8, 2q+9 */
        const regs *r = R(4 * g + q);
        for (int h = 0; h < 2; h++) { /* h: row g (registers 0, 2) or g + 8 (1, 3) */
            A[h][2 * q] = emu_bf16_lo(r->a[h]), A[h][2 * q + 1] = emu_bf16_hi(r->a[h]);
            A[h][2 * q + 8] = emu_bf16_lo(r->a[h + 2]), A[h][2 * q + 9] = emu_bf16_hi(r->a[h + 2]);
        }
        for (int j = 0; j < 2; j++) { /* column 2t + j is held by the lanes with g' = 2t + j */
            const regs *rb = R(4 * (2 * t + j) + q);
            B[j][2 * q] = emu_bf16_lo(rb->b[0]), B[j][2 * q + 1] = emu_bf16_hi(rb->b[0]);
            B[j][2 * q + 8] = emu_bf16_lo(rb->b[1]), B[j][2 * q + 9] = emu_bf16_hi(rb->b[1]);
        }
    }
    float out[4];
    for (int e = 0; e < 4; e++) { /* d[e]: row g + (e / 2) * 8, column 2t + e % 2 */
        float s = c[e];
        for (int k = 0; k < 16; k++)
            s += A[e >> 1][k] * B[e & 1][k];
        out[e] = s;
    }
    for (int e = 0; e < 4; e++)
        d[e] = out[e];
}

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: four 8x8 matrices of 16-bit elements; lane
 * 8i + r gives the address of row r of matrix i (16 bytes, 16-byte aligned, in shared memory).
 * Lane (g, t) receives in r[i] matrix i's elements [g][2t], [g][2t+1], or with trans [2t][g],
 * [2t+1][g] (low half first). The rows are read once all lanes have met, as the instruction
 * reads them: a lane's earlier shared-memory writes need a barrier before it, as on a GPU. */
static inline void ldmatrix_x4(uint32_t r[4], const void *row, bool trans)
{
    const char *base = (const char *)dyn_smem();
    const char *p = (const char *)row;
    if ((uintptr_t)p % 16 || !base || p < base || p + 16 > base + dyn_smem_bytes()) {
        fprintf(stderr, "emu: ldmatrix: row address %p must be 16-byte aligned and inside the "
                        "block's dynamic shared memory\n", row);
        abort();
    }
    const unsigned char *buf = warp_gather(&row, sizeof row);
    const char *all[32]; /* the lanes' row addresses */
    for (int l = 0; l < 32; l++)
        memcpy(&all[l], buf + l * EMU_GATHER_MAX, sizeof(all[l]));
    const int g = lane_id() / 4, t = lane_id() % 4;
    for (int i = 0; i < 4; i++) {
        uint16_t lo, hi;
        if (trans) {
            memcpy(&lo, all[8 * i + 2 * t] + 2 * g, 2);
            memcpy(&hi, all[8 * i + 2 * t + 1] + 2 * g, 2);
        } else {
            memcpy(&lo, all[8 * i + g] + 4 * t, 2);
            memcpy(&hi, all[8 * i + g] + 4 * t + 2, 2);
        }
        r[i] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

/* The byte offset of p in the block's dynamic shared memory, as a wgmma descriptor's start
 * address (kernels/tensorcore.h's tc_wg_desc): 16-byte aligned, inside it, below 256 KB. */
static inline unsigned smem_offset(const void *p)
{
    const char *base = (const char *)dyn_smem(), *q = (const char *)p;
    if (!base || q < base || q >= base + dyn_smem_bytes() || (q - base) % 16 ||
        q - base >= (1 << 18)) {
        fprintf(stderr, "emu: wgmma descriptor: %p must be 16-byte aligned and inside the "
                        "block's dynamic shared memory\n", p);
        abort();
    }
    return (unsigned)(q - base);
}

/* A no-swizzle wgmma descriptor (kernels/tensorcore.h's tc_wg_desc): start, lbo, sbo in bytes
 * (stored >> 4); which operand ("A", "B") for the messages. Its 8 x 2 core matrices (core
 * matrix (i, j) at start + i sbo + j lbo, 128 bytes each) must lie in dynamic shared memory. */
struct wg_desc {
    unsigned start, lbo, sbo;
};
static inline wg_desc wgmma_desc(uint64_t desc, const char *which)
{
    if ((desc >> 62) != 0 || (desc >> 49 & 7) != 0) {
        fprintf(stderr, "emu: wgmma: %s descriptor 0x%016llx asks for a swizzle or a base "
                        "offset; the emulator implements the no-swizzle layout only\n",
                which, (unsigned long long)desc);
        abort();
    }
    wg_desc d;
    d.start = (unsigned)(desc & 0x3fff) << 4;
    d.lbo = (unsigned)(desc >> 16 & 0x3fff) << 4;
    d.sbo = (unsigned)(desc >> 32 & 0x3fff) << 4;
    const size_t bytes = dyn_smem_bytes();
    const unsigned last = d.start + 7 * d.sbo + d.lbo + 7 * 16 + 16; /* one past the last byte */
    if (!dyn_smem() || last > bytes) {
        fprintf(stderr, "emu: wgmma: %s (start %u, lbo %u, sbo %u) reaches byte %u of %zu of "
                        "dynamic shared memory\n", which, d.start, d.lbo, d.sbo, last, bytes);
        abort();
    }
    return d;
}

/* Element (k, n) of B (16 x 64), or with the roles named (m, k) of a K-major A, through a
 * descriptor: core matrix (i along N (M), j along K) at start + i sbo + j lbo, its row r at
 * + 16 r: K-major B[8j..8j+7][8i+r] (A[8i+r][8j..8j+7]), or with trans MN-major
 * B[8j+r][8i..8i+7]. */
static inline float wgmma_elem(const wg_desc &d, int k, int n, bool trans)
{
    const unsigned off = (unsigned)(n / 8) * d.sbo + (unsigned)(k / 8) * d.lbo +
                         (trans ? (unsigned)(k % 8) * 16 + (unsigned)(n % 8) * 2
                                : (unsigned)(n % 8) * 16 + (unsigned)(k % 8) * 2);
    uint16_t v;
    memcpy(&v, (const unsigned char *)dyn_smem() + d.start + off, 2);
    return emu_bf16_to_f32(v);
}

/* d (this lane's 32 accumulators: rows g, g + 8 of its warp's 16, column 8j + 2t + e % 2 in
 * d[4j + e]) = A (this lane's two rows, 16 k each) x B (bdesc) (+ d): B is read now, and the
 * result goes to d only at wgmma_wait (wgmma_defer keeps it, and a later product on the same d
 * before the wait accumulates onto it, as the hardware chains them). */
static inline void wgmma_rows(float d[32], const float A[2][16], uint64_t bdesc, bool acc,
                              bool trans)
{
    const wg_desc bd = wgmma_desc(bdesc, "B");
    const int t = lane_id() % 4;
    const float *prev = wgmma_pending(d); /* a product still in flight on d, or its registers */
    float out[32];
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            const int n = 8 * j + 2 * t + e % 2;
            float s = acc ? (prev ? prev[4 * j + e] : d[4 * j + e]) : 0.0f;
            for (int k = 0; k < 16; k++)
                s += A[e >> 1][k] * wgmma_elem(bd, k, n, trans);
            out[4 * j + e] = s;
        }
    wgmma_defer(d, out, 32);
}

/* wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 with A in registers (kernels/
 * tensorcore.h's tc_wgmma_n64 gives the layouts): a warp's rows of D need only its own A
 * registers (gathered from its lanes as in mma_m16n8k16_bf16) and B. */
static inline void wgmma_m64n64k16_bf16(float d[32], const uint32_t a[4], uint64_t desc,
                                        bool acc, bool trans)
{
    uint32_t mine[4] = {a[0], a[1], a[2], a[3]};
    const unsigned char *all = warp_gather(mine, sizeof mine);
    const int g = lane_id() / 4;
    float A[2][16]; /* this lane's rows g, g + 8 of the warp's A */
    for (int q = 0; q < 4; q++) {
        const uint32_t *r = (const uint32_t *)(all + (4 * g + q) * EMU_GATHER_MAX);
        for (int h = 0; h < 2; h++) {
            A[h][2 * q] = emu_bf16_lo(r[h]), A[h][2 * q + 1] = emu_bf16_hi(r[h]);
            A[h][2 * q + 8] = emu_bf16_lo(r[h + 2]), A[h][2 * q + 9] = emu_bf16_hi(r[h + 2]);
        }
    }
    wgmma_rows(d, A, desc, acc, trans);
}

/* The same with A from shared memory too (tc_wgmma_n64_ss): through adesc, K-major or with
 * trans_a MN-major (wgmma_elem with M in N's place), warp w of the warpgroup taking A's rows
 * 16w .. 16w+15 (this lane's g and g + 8 of them). */
static inline void wgmma_m64n64k16_bf16_ss(float d[32], uint64_t adesc, uint64_t bdesc, bool acc,
                                           bool trans_b, bool trans_a)
{
    const wg_desc ad = wgmma_desc(adesc, "A");
    const int m0 = 16 * (int)(tid.x / 32 % 4) + lane_id() / 4;
    float A[2][16];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++)
            A[h][k] = wgmma_elem(ad, k, m0 + 8 * h, trans_a);
    wgmma_rows(d, A, bdesc, acc, trans_b);
}

} // namespace emu

#endif /* GANTRY_EMU_MMA_H */
