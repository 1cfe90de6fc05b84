# bench/gpu_bench: GPU training throughput and MFU (hack/gpu-check.sh runs it beside
# bench/gpu_torch.py). Included from kernels/gpu.cmake when CUDA is on.
add_executable(gpu_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_bench.cu)
target_include_directories(gpu_bench PRIVATE "${PROJECT_SOURCE_DIR}")
target_link_libraries(gpu_bench PRIVATE gantry_model_gpu gantry_kernels_cuda gantry_core)

# bench/gpu_kernels: the bf16 step's non-GEMM kernels one at a time beside a device-to-device
# copy (GB/s) and the bf16 peak (the attention's TFLOP/s, fused and unfused).
add_executable(gpu_kernels ${CMAKE_CURRENT_LIST_DIR}/gpu_kernels.cu)
target_include_directories(gpu_kernels PRIVATE "${PROJECT_SOURCE_DIR}")
target_link_libraries(gpu_kernels PRIVATE gantry_kernels_cuda)
