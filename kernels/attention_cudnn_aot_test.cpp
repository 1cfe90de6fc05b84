// attention_cudnn_aot_test - does cuDNN accept the attention graphs attention_cudnn.cpp builds, on
// Hopper, at the shapes Gantry trains? Answered without a GPU: cuDNN builds execution plans
// ahead of time from a description of the device (cuDNN 9.8 and later), so its real heuristics
// pick engines for our exact graphs (q, k and v strided inside the packed qkv, the padding mask
// from per-sequence lengths, the log-sum-exp as stats, the deterministic backward) and its
// runtime compiler compiles them for sm_90. What it cannot answer is whether the numbers are
// right: attention_gpu_test compares them with ours on a GPU.
//
// Runs with the real cuDNN (GANTRY_CUDNN_LIB), NVRTC on the library path, and two stand-ins for
// what a machine without a GPU lacks (kernels/cudnn_aot/: a driver that has no device, and the
// one runtime call the frontend makes for the compute capability). CMake adds it where
// hack/install-deps.sh --cuda has unpacked cuDNN's libraries.
//
// The graphs are attention_cudnn.cpp's own (describe(), included below), not copies.
#include "kernels/attention_cudnn.cpp"

#include <stdio.h>
#include <stdlib.h>

namespace {

int failed;

// An H200 as cudaGetDeviceProperties would describe it (cuDNN's device-properties JSON)
const char kH200[] =
    "{\"cudaDeviceId\":0,\"deviceName\":\"NVIDIA H200\",\"deviceVer\":900,\"driverVer\":13000,"
    "\"isTccDriver\":0,\"l2CacheSize\":62914560,\"maxCtasPerSM\":32,\"maxRegistersPerSM\":65536,"
    "\"maxSharedMemoryPerBlock\":49152,\"maxSharedMemoryPerBlockOptin\":232448,"
    "\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,\"memClockRateKHz\":3201000,"
    "\"memoryBusWidth\":6144,\"multiProcessorCount\":132,\"pciDeviceId\":8997,"
    "\"regsPerBlock\":65536,\"reservedSharedMemoryPerBlock\":1024,\"smClockRateKHz\":1980000,"
    "\"smCountOrigin\":0,\"supportCoopLaunch\":1,\"totalGlobalMem\":150754820096,"
    "\"warpSize\":32,\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64]}";

// Builds (bwd, B, T, NH, hs) for the device; 1 when cuDNN has a plan (its workspace in *ws)
int plan(const std::shared_ptr<const fe::DeviceProperties> &dev, int bwd, int B, int T, int NH,
         int hs, int64_t *ws, std::string *why)
{
    auto p = describe(bwd, B, T, NH, hs);
    p->g->set_device_properties(dev).set_sm_version(90).set_sm_count(132);
    fe::error_t e = p->g->build({fe::HeurMode_t::A});
    if (e.is_good())
        e = p->g->get_workspace_size(*ws);
    *why = e.get_message();
    return e.is_good();
}

void expect(const std::shared_ptr<const fe::DeviceProperties> &dev, const char *what, int B,
            int T, int NH, int hs)
{
    for (int bwd = 0; bwd < 2; bwd++) {
        int64_t ws = 0;
        std::string why;
        const int ok = plan(dev, bwd, B, T, NH, hs, &ws, &why);
        printf("cudnn aot %-8s %-28s B=%-2d T=%-4d NH=%-2d hs=%-3d ", bwd ? "backward" : "forward",
               what, B, T, NH, hs);
        if (ok) {
            printf("workspace %8.1f MB  OK\n", ws / 1e6);
        } else {
            printf("FAILED (%s)\n", why.c_str());
            failed++;
        }
    }
}

} // namespace

int main(void)
{
    char why[256];
    if (!attention_cudnn_load(why, sizeof(why))) {
        printf("attention_cudnn_aot_test: %s\n", why);
        return 1;
    }
    printf("attention_cudnn_aot_test: %s, plans for an H200 (sm_90) built without a device\n",
           why);
    if (fe::detail::get_backend_version() < 90800) {
        printf("attention_cudnn_aot_test: SKIPPED (building without a device needs cuDNN 9.8)\n");
        return 77;
    }
    auto dev = std::make_shared<fe::DeviceProperties>();
    std::vector<uint8_t> json(kH200, kH200 + sizeof(kH200)); // (with its NUL)
    fe::error_t e = dev->deserialize(json);
    if (e.is_bad()) {
        printf("attention_cudnn_aot_test: FAILED: the H200's description refused: %s\n",
               e.get_message().c_str());
        return 1;
    }
    // the GPT-2 shape, 8 and 32 sequences; the shipped example model; the shapes
    // attention_gpu_test and train_gpu_cli_test.sh run it at
    expect(dev, "GPT-2 124M", 8, 1024, 12, 64);
    expect(dev, "GPT-2 124M", 32, 1024, 12, 64);
    expect(dev, "example model", 32, 256, 4, 32);
    expect(dev, "attention_gpu_test", 3, 130, 2, 64);
    expect(dev, "attention_gpu_test", 2, 40, 3, 32);
    expect(dev, "train_gpu_cli_test", 3, 24, 4, 8);
    // and one it must refuse (head size 20: not a multiple of 8), so a refusal is seen as one
    int64_t ws = 0;
    std::string no;
    const int took = plan(dev, 0, 2, 64, 2, 20, &ws, &no);
    printf("cudnn aot forward  refused at head size 20     %s (%s)\n",
           took ? "FAILED: a plan was built" : "OK", no.c_str());
    failed += took;
    printf("attention_cudnn_aot_test: %s\n", failed ? "FAILED" : "OK");
    return failed ? 1 : 0;
}
