/*
 * cub/device/device_radix_sort.cuh (gantry CUDA emulator) - cub::DeviceRadixSort::SortPairs as
 * kernels/embed.cu calls it, run on the CPU with CUB's contract:
 *   - two calls: with d_temp_storage == NULL only temp_storage_bytes is set (nothing is read or
 *     written); the second call, with at least that many bytes, sorts. Too little storage is
 *     cudaErrorInvalidValue, as in CUB.
 *   - keys ascending by bits [begin_bit, end_bit) of their radix form only (signed integers with
 *     the sign bit flipped, floats with CUB's twiddle: negatives first); other bits are ignored.
 *   - stable: pairs with equal sort bits keep their input order (CUB's LSD radix sort is stable).
 *   - keys_out / values_out receive all pairs; the inputs are not modified.
 * The temporary storage is really used (as the ping-pong buffer), so a short allocation shows in
 * the ASan build, and under the emulator's runtime every buffer must be device memory (a host
 * pointer aborts with a message, where the GPU would fault). Synchronous.
 */
#ifndef GANTRY_EMU_CUB_DEVICE_RADIX_SORT_CUH
#define GANTRY_EMU_CUB_DEVICE_RADIX_SORT_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "cuda_runtime.h"

/* kernels/emu/blas.cc: aborts when p..p+bytes is not inside one device allocation (only when the
 * emulator's runtime is linked in). */
extern "C" void emu_blas_require_device(const char *who, const void *p, size_t bytes);

namespace cub {

namespace emu_detail {

template <typename K>
struct radix_bits {
    using U = typename std::conditional<
        sizeof(K) == 1, uint8_t,
        typename std::conditional<sizeof(K) == 2, uint16_t,
                                  typename std::conditional<sizeof(K) == 4, uint32_t,
                                                            uint64_t>::type>::type>::type;
    static_assert(std::is_arithmetic<K>::value && sizeof(K) <= 8, "radix sort of arithmetic keys");

    static U get(K key)
    {
        U u;
        memcpy(&u, &key, sizeof(u));
        const U top = (U)((U)1 << (sizeof(U) * 8 - 1));
        if (std::is_floating_point<K>::value)
            return (u & top) ? (U)~u : (U)(u ^ top);
        if (std::is_signed<K>::value)
            return (U)(u ^ top);
        return u;
    }
};

static inline size_t round256(size_t n)
{
    return (n + 255) / 256 * 256;
}

} // namespace emu_detail

struct DeviceRadixSort {
    template <typename KeyT, typename ValueT, typename NumItemsT>
    static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes,
                                 const KeyT *d_keys_in, KeyT *d_keys_out,
                                 const ValueT *d_values_in, ValueT *d_values_out,
                                 NumItemsT num_items, int begin_bit = 0,
                                 int end_bit = (int)sizeof(KeyT) * 8, cudaStream_t stream = 0)
    {
        using R = emu_detail::radix_bits<KeyT>;
        if (num_items < 0 || begin_bit < 0 || end_bit > (int)sizeof(KeyT) * 8 ||
            begin_bit > end_bit)
            return cudaErrorInvalidValue;
        const size_t n = (size_t)num_items;
        const size_t kbytes = emu_detail::round256(n * sizeof(KeyT));
        const size_t need = 256 + kbytes + emu_detail::round256(n * sizeof(ValueT));
        if (d_temp_storage == NULL) {
            temp_storage_bytes = need;
            return cudaSuccess;
        }
        if (temp_storage_bytes < need)
            return cudaErrorInvalidValue;
        if (n == 0)
            return cudaSuccess;
        emu_blas_require_device("cub::DeviceRadixSort::SortPairs temp storage", d_temp_storage,
                                need);
        emu_blas_require_device("cub::DeviceRadixSort::SortPairs keys in", d_keys_in,
                                n * sizeof(KeyT));
        emu_blas_require_device("cub::DeviceRadixSort::SortPairs keys out", d_keys_out,
                                n * sizeof(KeyT));
        emu_blas_require_device("cub::DeviceRadixSort::SortPairs values in", d_values_in,
                                n * sizeof(ValueT));
        emu_blas_require_device("cub::DeviceRadixSort::SortPairs values out", d_values_out,
                                n * sizeof(ValueT));

        /* checked at the call, sorted in stream order (later in the emulator's deferred mode) */
        emu_on_stream(stream, [=]() {
            /* the ping-pong half in the caller's storage, 256-byte aligned as CUB's would be */
            char *base = (char *)d_temp_storage + (256 - (uintptr_t)d_temp_storage % 256) % 256;
            KeyT *tk = (KeyT *)base;
            ValueT *tv = (ValueT *)(base + kbytes);
            const int passes = (end_bit - begin_bit + 7) / 8;
            if (passes == 0) {
                memmove(d_keys_out, d_keys_in, n * sizeof(KeyT));
                memmove(d_values_out, d_values_in, n * sizeof(ValueT));
                return;
            }
            const KeyT *sk = d_keys_in;
            const ValueT *sv = d_values_in;
            std::vector<size_t> count(257);
            for (int p = 0; p < passes; p++) {
                /* the last pass lands in the outputs */
                KeyT *dk = (passes - 1 - p) % 2 == 0 ? d_keys_out : tk;
                ValueT *dv = (passes - 1 - p) % 2 == 0 ? d_values_out : tv;
                const int shift = begin_bit + 8 * p;
                const int width = end_bit - shift < 8 ? end_bit - shift : 8;
                const unsigned mask = (1u << width) - 1u;
                std::fill(count.begin(), count.end(), 0);
                for (size_t i = 0; i < n; i++)
                    count[((unsigned)(R::get(sk[i]) >> shift) & mask) + 1]++;
                for (size_t d = 1; d < count.size(); d++)
                    count[d] += count[d - 1];
                for (size_t i = 0; i < n; i++) {
                    size_t at = count[(unsigned)(R::get(sk[i]) >> shift) & mask]++;
                    dk[at] = sk[i];
                    dv[at] = sv[i];
                }
                sk = dk;
                sv = dv;
            }
        });
        return cudaSuccess;
    }
};

} // namespace cub

#endif /* GANTRY_EMU_CUB_DEVICE_RADIX_SORT_CUH */
