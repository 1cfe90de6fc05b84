/*
 * nccl.h (gantry CUDA emulator) - the part of NCCL's API that Gantry uses, with the real names,
 * types and values (NCCL 2.28), run on the CPU by kernels/emu/nccl.cc so the nccl backend
 * (worker/coll_nccl.cu) and its failure handling are tested where no GPU is.
 *
 * Ranks are processes (or several communicators of one process, ncclCommInitAll) on one host.
 * The unique id names a POSIX shared-memory object; the first rank to reach ncclCommInitRank
 * creates it and the last one to attach unlinks it, so nothing stays in /dev/shm even after
 * kill -9. Each communicator has one progress thread (its "GPU") that runs the collectives in the
 * order they were enqueued, each once its stream's earlier work (and the events that work waits
 * for) has run, which matters in the runtime's deferred mode (GANTRY_EMU_DEFER); the stream stays
 * busy (cudaStreamQuery: cudaErrorNotReady) and later work on it waits until the collective is
 * done. Reductions go in rank order 0..W-1, so every rank gets the same bits.
 *
 * As on GPUs: buffers must be device memory (cudaMalloc), two ranks on one CUDA device are
 * refused (set GANTRY_EMU_DEVICES and one device per rank), a collective that waits for a dead
 * peer never completes: its stream stays busy and ncclCommGetAsyncError reports ncclRemoteError
 * until ncclCommAbort. Beyond NCCL: ranks that call different collectives (kind, count, type,
 * op, root) get ncclInvalidUsage instead of a hang or garbage; a peer that died or aborted is
 * found within ~20 ms (its lock on the shared object is gone: no pid checks, zombies included).
 * Non-blocking communicators (ncclCommInitRankConfig with config.blocking = 0) as NCCL documents
 * them: init returns ncclInProgress at once and joins on the communicator's thread,
 * ncclCommGetAsyncError says ncclInProgress until every rank joined (then ncclSuccess or the
 * error), ncclCommAbort stops an init that waits; every collective and ncclCommFinalize returns
 * ncclInProgress, and the next call before ncclCommGetAsyncError left ncclInProgress is refused
 * with ncclInvalidUsage (NCCL's rule), so a caller that forgets to poll fails here.
 * Not emulated: groups, send/recv, reduce-scatter, reductions of fp16/fp8, the other config
 * fields (accepted, ignored), timing. Knobs: GANTRY_EMU_NCCL_SLOT (bytes per rank per piece,
 * default 1 MiB), GANTRY_EMU_NCCL_INIT_TIMEOUT_MS (how long an init waits for every rank,
 * 300000).
 */
#ifndef GANTRY_EMU_NCCL_H
#define GANTRY_EMU_NCCL_H

#include <limits.h>
#include <stddef.h>

#include <cuda_runtime.h>

#define NCCL_MAJOR        2
#define NCCL_MINOR        28
#define NCCL_PATCH        9
#define NCCL_SUFFIX       "-gantry-emu"
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z)                                                                      \
    (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

/* NCCL 2.28's layout; the emulator reads size, magic and blocking. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                    \
    }

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

ncclResult_t ncclGetVersion(int *version);
/* Only makes a name: nothing is created until a rank calls ncclCommInitRank. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
/* Collective over nranks ranks: returns once every rank has joined (or fails with
 * ncclSystemError when a joined rank dies, or after GANTRY_EMU_NCCL_INIT_TIMEOUT_MS). Uses the
 * calling thread's current CUDA device. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
/* As ncclCommInitRank with config NULL or config->blocking 1 (or unset); with blocking 0 it
 * returns ncclInProgress at once with *comm set, and the init goes on in the background: poll
 * ncclCommGetAsyncError until it leaves ncclInProgress (or ncclCommAbort it). config must come
 * from NCCL_CONFIG_INITIALIZER. */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
/* ndev communicators of one process; devlist NULL: devices 0..ndev-1. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
/* Waits for the communicator's queued collectives, then frees it (as ncclCommAbort when one
 * failed). */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* Waits for the queued collectives (blocking), or returns ncclInProgress and
 * ncclCommGetAsyncError says ncclInProgress until they are done (non-blocking). */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
/* Stops the progress thread without waiting for peers, marks this rank aborted (its peers' waits
 * fail with ncclRemoteError), releases the streams its unfinished collectives kept busy, frees. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);
/* The last error's message (any communicator of this process; comm is ignored). */
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_EMU_NCCL_H */
