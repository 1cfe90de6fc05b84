# The device model (worker/model_gpu.cu) and the GPU training loop (worker/train_gpu.c) on the
# CUDA emulator: the GPU loop's tests and gpu_bench's CPU cross-check run in CI without a GPU
# (label emu). Included from worker/core.cmake in builds without CUDA only: with CUDA,
# gantry_core itself links the real device model, which cannot share a program with the
# emulated one.
if(NOT TARGET gantry_kernels_emu)
    return()
endif()

gantry_emu_sources(_model_cc ${PROJECT_SOURCE_DIR}/worker/model_gpu.cu)
add_library(gantry_model_gpu_emu STATIC ${_model_cc})
gantry_emu_target(gantry_model_gpu_emu)
target_link_libraries(gantry_model_gpu_emu PUBLIC gantry_kernels_emu gantry_core)

# train_gpu_test.c, unchanged: the GPU loop against train_run, checkpoints across devices, bf16.
gantry_test(train_gpu_emu_test SOURCES ${PROJECT_SOURCE_DIR}/worker/train_gpu_test.c
            ${PROJECT_SOURCE_DIR}/worker/train_testdata.c ${PROJECT_SOURCE_DIR}/worker/train_gpu.c
            LIBS gantry_model_gpu_emu gantry_core LABELS emu)
target_compile_definitions(train_gpu_emu_test PRIVATE GANTRY_HAVE_CUDA=1)
set_tests_properties(train_gpu_emu_test PROPERTIES ENVIRONMENT_MODIFICATION
    "OMP_WAIT_POLICY=set:passive")

# bench/gpu_bench.cu's --check-cpu on a small shape: the device model's call sequence against
# worker/model.c, step by step, fp32 and bf16 GEMMs, variable lengths.
gantry_emu_sources(_bench_cc ${PROJECT_SOURCE_DIR}/bench/gpu_bench.cu)
add_executable(gpu_bench_emu ${_bench_cc})
gantry_emu_target(gpu_bench_emu)
target_link_libraries(gpu_bench_emu PRIVATE gantry_model_gpu_emu gantry_kernels_emu gantry_core)
foreach(prec fp32 bf16)
    set(_flag)
    if(prec STREQUAL "bf16")
        set(_flag --bf16)
    endif()
    add_test(NAME gpu_bench_emu_check_${prec}
             COMMAND gpu_bench_emu --batch 4 --seq 24 --hidden 32 --layers 2 --heads 4
                     --vocab 200 --classes 3 --steps 4 --warmup 1 --varlen --check-cpu ${_flag})
    set_tests_properties(gpu_bench_emu_check_${prec} PROPERTIES LABELS emu TIMEOUT 300)
endforeach()
