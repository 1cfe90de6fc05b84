/*
 * nodriver.c - a libcuda.so.1 for a machine without an NVIDIA driver, for attention_cudnn_aot_test
 * only: cuDNN's libraries link the driver, so they cannot even be opened without one. Every call
 * answers CUDA_ERROR_NO_DEVICE (100), except the version (13.0, so cuDNN's CUDA 13 build accepts
 * it) and the error names. Nothing here runs a kernel or pretends to: the test builds plans
 * without a device (cuDNN's ahead-of-time mode), which needs the library loaded, not a GPU.
 */
#define NO_DEVICE 100

int cuDriverGetVersion(int *v)
{
    *v = 13000;
    return 0;
}
int cuDeviceGetCount(int *n)
{
    *n = 0;
    return 0;
}
int cuGetErrorName(int e, const char **s)
{
    (void)e;
    *s = "CUDA_ERROR_NO_DEVICE";
    return 0;
}
int cuGetErrorString(int e, const char **s)
{
    (void)e;
    *s = "no CUDA device (attention_cudnn_aot_test's stand-in driver)";
    return 0;
}

/* the rest of what cuDNN 9's libraries look up: none can work without a device */
#define NONE(name)                                                                                 \
    int name(void) { return NO_DEVICE; }
NONE(cuCtxGetCurrent)
NONE(cuCtxGetLimit)
NONE(cuCtxPopCurrent)
NONE(cuCtxPushCurrent)
NONE(cuDeviceGet)
NONE(cuKernelGetAttribute)
NONE(cuKernelGetFunction)
NONE(cuKernelSetAttribute)
NONE(cuLaunchCooperativeKernel)
NONE(cuLaunchKernel)
NONE(cuLaunchKernelEx)
NONE(cuLibraryGetKernel)
NONE(cuLibraryLoadData)
NONE(cuLibraryLoadFromFile)
NONE(cuLibraryUnload)
NONE(cuLinkAddData)
NONE(cuLinkComplete)
NONE(cuLinkCreate)
NONE(cuLinkDestroy)
NONE(cuModuleGetFunction)
NONE(cuModuleLoadData)
NONE(cuModuleUnload)
NONE(cuOccupancyMaxPotentialClusterSize)
NONE(cuStreamGetCtx)
NONE(cuTensorMapEncodeIm2col)
NONE(cuTensorMapEncodeTiled)
