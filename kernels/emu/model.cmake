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

# train_gpu_test.c, unchanged: the GPU loop against train_run, checkpoints across devices, bf16,
# the fused attention, evaluation, CUDA graphs, the n-gram model, multi-label, regression. In five
# parts (the arguments name the test cases; each new case goes into one; the two task cases, a few
# seconds each, went into the fifth): its first nine cases in one process took ~275 s
# under ASan on an idle 2-core machine, too near CTest's 300 s. In CI (ASan, ctest -j2) the CUDA
# graphs loop alone took 193 s (fp32, then bf16 with the fused attention: four training runs), so
# its two precisions are two parts; the others took 97, 159 and 50 s, so the fused attention's
# case (four runs) moved from the second to the third.
add_executable(train_gpu_emu_test ${PROJECT_SOURCE_DIR}/worker/train_gpu_test.c
               ${PROJECT_SOURCE_DIR}/worker/train_testdata.c ${PROJECT_SOURCE_DIR}/worker/train_gpu.c)
target_include_directories(train_gpu_emu_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(train_gpu_emu_test PRIVATE gantry_model_gpu_emu gantry_core)
target_compile_definitions(train_gpu_emu_test PRIVATE GANTRY_HAVE_CUDA=1)
add_test(NAME train_gpu_emu_test COMMAND train_gpu_emu_test test_gpu_follows_cpu
         test_checkpoint_across_devices test_obs test_ngram)
add_test(NAME train_gpu_emu_test_2 COMMAND train_gpu_emu_test test_overlapped_allreduce
         test_bf16_follows_fp32 test_evaluate)
add_test(NAME train_gpu_emu_test_3 COMMAND train_gpu_emu_test test_eval_during test_graph_cache
         test_fused_attention)
add_test(NAME train_gpu_emu_test_4 COMMAND train_gpu_emu_test test_cuda_graphs_loop)
add_test(NAME train_gpu_emu_test_5 COMMAND train_gpu_emu_test test_cuda_graphs_loop_bf16
         test_multi_label test_regression)
set_tests_properties(train_gpu_emu_test train_gpu_emu_test_2 train_gpu_emu_test_3
                     train_gpu_emu_test_4 train_gpu_emu_test_5 PROPERTIES
    LABELS emu SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT_MODIFICATION
    "OMP_WAIT_POLICY=set:passive")

# bench/gpu_bench.cu's --check-cpu on a small shape: the device model's call sequence against
# worker/model.c, step by step, fp32 and bf16 GEMMs, the fused attention, variable lengths.
gantry_emu_sources(_bench_cc ${PROJECT_SOURCE_DIR}/bench/gpu_bench.cu)
add_executable(gpu_bench_emu ${_bench_cc})
gantry_emu_target(gpu_bench_emu)
target_link_libraries(gpu_bench_emu PRIVATE gantry_model_gpu_emu gantry_kernels_emu gantry_core)
foreach(prec fp32 bf16 fused bf16_fused bf16_graphs bf16_dgelu bf16_ds bf16_wgmma bf16_wgmma_ds)
    set(_flag)
    if(prec STREQUAL "bf16")
        set(_flag --bf16)
    elseif(prec STREQUAL "fused")
        set(_flag --attention fused)
    elseif(prec STREQUAL "bf16_fused")
        set(_flag --bf16 --attention fused)
    elseif(prec STREQUAL "bf16_graphs") # CUDA graphs from the second step on
        set(_flag --bf16 --graphs)
    elseif(prec STREQUAL "bf16_dgelu") # the GELU backward in the GEMM's epilogue
        set(_flag --bf16 --attention fused --dgelu-epilogue)
    elseif(prec STREQUAL "bf16_ds") # the attention's dQ from a stored dS^T
        set(_flag --bf16 --attention fused --attention-ds)
    elseif(prec STREQUAL "bf16_wgmma") # the attention on wgmma: head size 64 (the flags after win)
        set(_flag --bf16 --attention fused --attention-wgmma --hidden 128 --heads 2)
    elseif(prec STREQUAL "bf16_wgmma_ds") # and its dQ from the stored dS^T, on wgmma too
        set(_flag --bf16 --attention fused --attention-wgmma --attention-ds --hidden 128 --heads 2)
    endif()
    add_test(NAME gpu_bench_emu_check_${prec}
             COMMAND gpu_bench_emu --batch 4 --seq 24 --hidden 32 --layers 2 --heads 4
                     --vocab 200 --classes 3 --steps 4 --warmup 1 --varlen --check-cpu ${_flag})
    set_tests_properties(gpu_bench_emu_check_${prec} PROPERTIES LABELS emu TIMEOUT 300)
endforeach()
# The kernels picked at start (--tune, what training.autotune does): every form of the
# attention and the GELU backward checked against the default and timed, every GEMM's cuBLASLt
# candidates timed at its first call (GANTRY_AUTOTUNE_GEMM_MIN_FLOP=0: these GEMMs are tiny), and
# the model with the picks against the CPU
add_test(NAME gpu_bench_emu_check_bf16_tune
         COMMAND gpu_bench_emu --batch 4 --seq 24 --hidden 128 --layers 2 --heads 2 --vocab 200
                 --classes 3 --steps 4 --warmup 1 --varlen --check-cpu --bf16 --attention fused
                 --tune)
set_tests_properties(gpu_bench_emu_check_bf16_tune PROPERTIES LABELS emu TIMEOUT 300
    ENVIRONMENT "GANTRY_AUTOTUNE_GEMM_MIN_FLOP=0"
    PASS_REGULAR_EXPRESSION "model_gpu: autotune, GEMM algorithms: [1-9][0-9]* shapes timed(.|\n)*check-cpu \\(bf16 GEMMs, fused attention \\([^)]*, tuned\\)[^\n]*: OK"
    FAIL_REGULAR_EXPRESSION "FAILED|REFUSED")
# --attention-cudnn where there is no cuDNN (the emulator): the model asks for cuDNN's attention,
# each call runs ours instead, it still trains like the CPU, and the line says ours ran
add_test(NAME gpu_bench_emu_check_bf16_cudnn
         COMMAND gpu_bench_emu --batch 3 --seq 24 --hidden 128 --layers 1 --heads 2 --vocab 200
                 --classes 3 --steps 3 --warmup 1 --varlen --check-cpu --bf16 --attention fused
                 --attention-cudnn)
set_tests_properties(gpu_bench_emu_check_bf16_cudnn PROPERTIES LABELS emu TIMEOUT 300
    PASS_REGULAR_EXPRESSION "check-cpu \\(bf16 GEMMs, fused attention \\(cuDNN \\(fell back to mma.sync\\) / cuDNN \\(fell back to mma.sync\\)[^\n]*: OK"
    FAIL_REGULAR_EXPRESSION "FAILED|REFUSED")
# hack/gpu-verify.sh, gpu-check.sh's verify: lines, on the logs these programs print: the regular
# expressions there still match what the tests and check-cpu runs print, and bad evidence turns
# its variant to "not shown"
add_test(NAME gpu_verify_emu_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/hack/gpu_verify_test.sh $<TARGET_FILE:gpu_bench_emu>
                 $<TARGET_FILE:tensorcore_gpu_emu_test> $<TARGET_FILE:matmul_gpu_emu_test>
                 $<TARGET_FILE:attention_gpu_emu_test>)
set_tests_properties(gpu_verify_emu_test PROPERTIES LABELS emu TIMEOUT 300
    PASS_REGULAR_EXPRESSION "gpu_verify_test: OK")
# gpu_bench --peak and the MFU's denominator in its output (unknown here: null; GANTRY_PEAK_TFLOPS)
add_test(NAME gpu_bench_emu_peak
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/gpu_bench_peak_test.sh
                 $<TARGET_FILE:gpu_bench_emu>)
set_tests_properties(gpu_bench_emu_peak PROPERTIES LABELS emu TIMEOUT 300
    PASS_REGULAR_EXPRESSION "gpu_bench_peak_test: OK" SKIP_RETURN_CODE 77)
# gpu_bench --profile: a row per op, launches per step as the model has them (fp32 unfused and
# bf16 fused: their ops differ most)
add_test(NAME gpu_bench_emu_profile
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/gpu_bench_profile_test.sh
                 $<TARGET_FILE:gpu_bench_emu>)
add_test(NAME gpu_bench_emu_profile_bf16_fused
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/gpu_bench_profile_test.sh
                 $<TARGET_FILE:gpu_bench_emu> --bf16 --attention fused)
add_test(NAME gpu_bench_emu_profile_bf16_dgelu
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/gpu_bench_profile_test.sh
                 $<TARGET_FILE:gpu_bench_emu> --bf16 --attention fused --dgelu-epilogue)
set_tests_properties(gpu_bench_emu_profile gpu_bench_emu_profile_bf16_fused
                     gpu_bench_emu_profile_bf16_dgelu PROPERTIES
                     LABELS emu TIMEOUT 300 SKIP_RETURN_CODE 77)

# The training loop's device pieces (worker/train_gpu_device_test.cu, unchanged): bf16 on the
# device, the mixed-precision kernels, the overlapped all-reduce through a 1-rank communicator.
gantry_emu_sources(_dev_cc ${PROJECT_SOURCE_DIR}/worker/train_gpu_device_test.cu)
gantry_test(train_gpu_device_emu_test SOURCES ${_dev_cc} ${PROJECT_SOURCE_DIR}/worker/train_gpu.c
            LIBS gantry_model_gpu_emu gantry_emu_coll_nccl gantry_core LABELS emu)
gantry_emu_target(train_gpu_device_emu_test)
target_compile_definitions(train_gpu_device_emu_test PRIVATE GANTRY_HAVE_CUDA=1)

# gantry-worker with `device: cuda` on emulated GPUs (GANTRY_EMU_DEVICES of them, default 1):
# the worker's whole GPU path (device selection per LOCAL_RANK, the nccl backend over the
# rendezvous store, the GPU loop, checkpoints) end to end, for the CLI tests below. Test-only:
# the shipped gantry-worker of a build without CUDA still refuses device: cuda.
add_executable(gantry-worker-emu ${PROJECT_SOURCE_DIR}/worker/main.c
               ${PROJECT_SOURCE_DIR}/worker/train_coll.c ${PROJECT_SOURCE_DIR}/worker/train_gpu.c
               ${PROJECT_SOURCE_DIR}/worker/model_io.c)
target_compile_definitions(gantry-worker-emu PRIVATE GANTRY_HAVE_CUDA=1)
target_link_libraries(gantry-worker-emu PRIVATE gantry_model_gpu_emu gantry_emu_coll_nccl
                      gantry_core gantry_dist)
# gantry-predict with --device cuda on the emulated GPU: the same predictions as on the CPU.
add_executable(gantry-predict-emu ${PROJECT_SOURCE_DIR}/worker/predict.c
               ${PROJECT_SOURCE_DIR}/worker/predict_serve.c ${PROJECT_SOURCE_DIR}/worker/model_io.c
               ${PROJECT_SOURCE_DIR}/worker/train_gpu.c)
target_compile_definitions(gantry-predict-emu PRIVATE GANTRY_HAVE_CUDA=1)
target_link_libraries(gantry-predict-emu PRIVATE gantry_model_gpu_emu gantry_emu_coll_nccl
                      gantry_core gantry_dist)
add_test(NAME predict_gpu_emu_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/worker/predict_gpu_test.sh
                 $<TARGET_FILE:gantry-worker> $<TARGET_FILE:gantry-predict-emu>
                 ${PROJECT_SOURCE_DIR}/worker/testdata)
set_tests_properties(predict_gpu_emu_test PROPERTIES LABELS emu TIMEOUT 300 SKIP_RETURN_CODE 77)
gantry_emu_defer_test(predict_gpu_emu_test
    COMMAND bash ${PROJECT_SOURCE_DIR}/worker/predict_gpu_test.sh
            $<TARGET_FILE:gantry-worker> $<TARGET_FILE:gantry-predict-emu>
            ${PROJECT_SOURCE_DIR}/worker/testdata)
add_test(NAME train_gpu_cli_emu_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/worker/train_gpu_cli_test.sh
                 $<TARGET_FILE:gantry-worker-emu> ${PROJECT_SOURCE_DIR}/worker/testdata)
add_test(NAME train_gpu_nccl_emu_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/worker/train_gpu_nccl_test.sh
                 $<TARGET_FILE:gantry-worker-emu> ${PROJECT_SOURCE_DIR}/worker/testdata
                 $<TARGET_FILE:gantry-run>)
add_test(NAME train_gpu_resume_emu_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/worker/train_gpu_resume_test.sh
                 $<TARGET_FILE:gantry-worker-emu> ${PROJECT_SOURCE_DIR}/worker/testdata)
set_tests_properties(train_gpu_cli_emu_test train_gpu_nccl_emu_test train_gpu_resume_emu_test
                     PROPERTIES
    LABELS emu TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "GANTRY_EMU_DEVICES=2")
# A batch past the (emulated) GPU's memory: exit 78 naming a batch that fits, which then trains.
add_test(NAME train_gpu_mem_emu_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/worker/train_gpu_mem_test.sh
                 $<TARGET_FILE:gantry-worker-emu> ${PROJECT_SOURCE_DIR}/worker/testdata)
set_tests_properties(train_gpu_mem_emu_test PROPERTIES LABELS emu TIMEOUT 300)
# Deferred: a bucket's all-reduce enqueued without its cudaStreamWaitEvent fails the 2-rank test;
# a pinned staging slot rewritten before its upload's event fails the CLI test (not at the call).
gantry_emu_defer_test(train_gpu_cli_emu_test ENV GANTRY_EMU_DEVICES=2
    COMMAND bash ${PROJECT_SOURCE_DIR}/worker/train_gpu_cli_test.sh
            $<TARGET_FILE:gantry-worker-emu> ${PROJECT_SOURCE_DIR}/worker/testdata)
gantry_emu_defer_test(train_gpu_nccl_emu_test ENV GANTRY_EMU_DEVICES=2
    COMMAND bash ${PROJECT_SOURCE_DIR}/worker/train_gpu_nccl_test.sh
            $<TARGET_FILE:gantry-worker-emu> ${PROJECT_SOURCE_DIR}/worker/testdata
            $<TARGET_FILE:gantry-run>)
