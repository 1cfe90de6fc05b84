/*
 * sm90_runtime.c - the CUDA runtime calls the cuDNN frontend makes while it builds a graph, for
 * attention_cudnn_aot_test only (the frontend opens a runtime of its own by name; the test
 * names this one in CUDNN_FRONTEND_CUDART_LIB_NAME). Its SDPA node asks the current device's
 * compute capability even when the graph is given one; this answers 9.0 (Hopper: the H100 and
 * H200), with 132 multiprocessors, the H200's. Everything else the frontend might ask fails.
 */
int cudaGetDevice(int *d)
{
    *d = 0;
    return 0;
}

int cudaDeviceGetAttribute(int *v, int attr, int dev)
{
    (void)dev;
    switch (attr) {
    case 75: /* cudaDevAttrComputeCapabilityMajor */
        *v = 9;
        return 0;
    case 76: /* cudaDevAttrComputeCapabilityMinor */
        *v = 0;
        return 0;
    case 16: /* cudaDevAttrMultiProcessorCount */
        *v = 132;
        return 0;
    default:
        *v = 0;
        return 1; /* cudaErrorInvalidValue */
    }
}

int cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return 0;
}

int cudaDriverGetVersion(int *v)
{
    *v = 13000;
    return 0;
}

const char *cudaGetErrorString(int e)
{
    return e ? "not available in attention_cudnn_aot_test's stand-in runtime" : "no error";
}

int cudaGetLastError(void)
{
    return 0;
}
