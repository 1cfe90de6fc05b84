# Core of gantry-worker: model, optimiser, training loop, configuration, the binary.
# (Included from worker/CMakeLists.txt; paths are relative to worker/.)
add_library(gantry_core STATIC
    ${CMAKE_CURRENT_SOURCE_DIR}/model.c
    ${CMAKE_CURRENT_SOURCE_DIR}/optim.c
    ${CMAKE_CURRENT_SOURCE_DIR}/cfg.c
    ${CMAKE_CURRENT_SOURCE_DIR}/train.c
    ${CMAKE_CURRENT_SOURCE_DIR}/train_plan.c)
target_include_directories(gantry_core PUBLIC "${PROJECT_SOURCE_DIR}")
pkg_check_modules(CORE_JANSSON REQUIRED IMPORTED_TARGET jansson)
target_link_libraries(gantry_core PUBLIC gantry_kernels gantry_data gantry_obs gantry_common
                      PkgConfig::CORE_JANSSON m)

gantry_test(model_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_test.c LIBS gantry_core)
set_tests_properties(model_test PROPERTIES
    ENVIRONMENT "GANTRY_TESTDATA=${CMAKE_CURRENT_SOURCE_DIR}/testdata")
gantry_test(cfg_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cfg_test.c LIBS gantry_core)

# The binary. gantry_dist provides the launch environment (dist_env) and exit codes.
add_executable(gantry-worker ${CMAKE_CURRENT_SOURCE_DIR}/main.c
               ${CMAKE_CURRENT_SOURCE_DIR}/train_coll.c ${CMAKE_CURRENT_SOURCE_DIR}/model_io.c)
target_link_libraries(gantry-worker PRIVATE gantry_core gantry_dist)
# gantry-predict: classifies text with a checkpoint (its config.json, vocab.txt and weights).
add_executable(gantry-predict ${CMAKE_CURRENT_SOURCE_DIR}/predict.c
               ${CMAKE_CURRENT_SOURCE_DIR}/predict_serve.c ${CMAKE_CURRENT_SOURCE_DIR}/model_io.c)
target_link_libraries(gantry-predict PRIVATE gantry_core gantry_dist)
add_test(NAME gantry_predict_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/predict_test.sh $<TARGET_FILE:gantry-worker>
                 $<TARGET_FILE:gantry-predict>)
set_tests_properties(gantry_predict_test PROPERTIES TIMEOUT 120
    ENVIRONMENT "OMP_WAIT_POLICY=passive")
# The checkpoint run by the PyTorch reference (hack/torch_ref.py) gives gantry-predict's
# probabilities (the torch venv of hack/pyenv.sh; skipped without it).
add_test(NAME gantry_predict_torch_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/predict_torch_test.sh $<TARGET_FILE:gantry-worker>
                 $<TARGET_FILE:gantry-predict>)
set_tests_properties(gantry_predict_torch_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1800
    LABELS python ENVIRONMENT "OMP_WAIT_POLICY=passive")
# train_run across real rank processes with the bucketed all-reduce (train_coll.c: the worker's glue).
gantry_test(train_dist_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/train_dist_test.c
            ${CMAKE_CURRENT_SOURCE_DIR}/train_coll.c ${CMAKE_CURRENT_SOURCE_DIR}/train_testdata.c
            LIBS gantry_core gantry_dist)
gantry_test(train_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/train_test.c
            ${CMAKE_CURRENT_SOURCE_DIR}/train_testdata.c LIBS gantry_core)
# Passive OpenMP waiting: spinning threads starve OpenBLAS's threads and other tests (see main.c).
set_tests_properties(model_test cfg_test train_test train_dist_test PROPERTIES
    ENVIRONMENT_MODIFICATION
    "OMP_WAIT_POLICY=set:passive")
add_test(NAME gantry_worker_cli_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/worker_cli_test.sh $<TARGET_FILE:gantry-worker>
                 ${CMAKE_CURRENT_SOURCE_DIR}/testdata $<TARGET_FILE:gantry-run>)
set_tests_properties(gantry_worker_cli_test PROPERTIES TIMEOUT 120)
# A pod with several ranks (NPROC_PER_NODE > 1): gantry-worker starts them itself.
add_test(NAME gantry_worker_node_launch_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/node_launch_test.sh $<TARGET_FILE:gantry-worker>
                 ${CMAKE_CURRENT_SOURCE_DIR}/testdata $<TARGET_FILE:gantry-run>)
set_tests_properties(gantry_worker_node_launch_test PROPERTIES TIMEOUT 120)
# threads 0 under a CPU quota (a pod's CPU limit): real cgroups, so root only (else skipped).
add_test(NAME gantry_worker_cpu_quota_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cpu_quota_test.sh $<TARGET_FILE:gantry-worker>
                 ${CMAKE_CURRENT_SOURCE_DIR}/testdata)
set_tests_properties(gantry_worker_cpu_quota_test PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)

# --device cuda end to end: trains on a GPU, or exits 78 naming training.device without one.
add_test(NAME train_gpu_cli_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu_cli_test.sh
                 $<TARGET_FILE:gantry-worker> ${CMAKE_CURRENT_SOURCE_DIR}/testdata)
set_tests_properties(train_gpu_cli_test PROPERTIES TIMEOUT 120)

# device: cuda (worker/train_gpu.h): the loop on the GPU, with gantry_model_gpu from
# kernels/gpu.cmake; without CUDA train_gpu.h's stubs make the worker exit 78 on device: cuda.
if(TARGET gantry_model_gpu)
    target_sources(gantry_core PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu.c)
    target_compile_definitions(gantry_core PUBLIC GANTRY_HAVE_CUDA=1)
    target_link_libraries(gantry_core PUBLIC gantry_model_gpu)
    include(${CMAKE_CURRENT_SOURCE_DIR}/train_gpu.cmake OPTIONAL)
else()
    # Without CUDA: train_gpu.c's loop and train_gpu_test.c on model_gpu_mock.c (model_gpu.h on
    # the CPU model), so the GPU loop's logic is tested in every CPU build.
    gantry_test(train_gpu_loop_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu_test.c
                ${CMAKE_CURRENT_SOURCE_DIR}/train_testdata.c
                ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu.c ${CMAKE_CURRENT_SOURCE_DIR}/model_gpu_mock.c
                LIBS gantry_core)
    target_compile_definitions(train_gpu_loop_test PRIVATE GANTRY_HAVE_CUDA=1)
    set_tests_properties(train_gpu_loop_test PROPERTIES ENVIRONMENT_MODIFICATION
        "OMP_WAIT_POLICY=set:passive")
    # And the real device model (worker/model_gpu.cu) under the train loop, on the CUDA emulator.
    include(${PROJECT_SOURCE_DIR}/kernels/emu/model.cmake)
endif()

# Benchmark: CPU training throughput (bench/cpu_train.sh compares it with PyTorch).
add_executable(cpu_train_bench ${PROJECT_SOURCE_DIR}/bench/cpu_train.c)
target_link_libraries(cpu_train_bench PRIVATE gantry_core)

# Checkpoints end to end with real processes (kill -9 and resume bit-identical, 2 -> 1 ranks,
# another batch size, SIGTERM): one CTest test per scenario.
foreach(case kill9 world batch sigterm)
    add_test(NAME gantry_worker_ckpt_${case}_test
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt_resume_test.sh
                     $<TARGET_FILE:gantry-worker> ${CMAKE_CURRENT_SOURCE_DIR}/testdata ${case})
    set_tests_properties(gantry_worker_ckpt_${case}_test PROPERTIES TIMEOUT 120)
endforeach()

# The checkpoint reader fuzzed (worker/ckpt_fuzz.c: resume's find/verify/load and the writer's
# round trip, gantry-predict's model_dir_open and a forward pass), as the data targets in
# data.cmake: a replay of the seeds (real checkpoints, hack/ckpt_fuzz_seeds.py) in every build,
# and with clang a libFuzzer binary and a bounded run labelled "fuzz".
set(_ck_seeds ${CMAKE_CURRENT_SOURCE_DIR}/testdata/fuzz/ckpt)
add_executable(ckpt_fuzz_replay ${CMAKE_CURRENT_SOURCE_DIR}/ckpt_fuzz.c
               ${CMAKE_CURRENT_SOURCE_DIR}/replay_fuzz.c ${CMAKE_CURRENT_SOURCE_DIR}/model_io.c)
target_link_libraries(ckpt_fuzz_replay PRIVATE gantry_core gantry_dist)
add_test(NAME ckpt_fuzz_replay COMMAND ckpt_fuzz_replay ${_ck_seeds})
set_tests_properties(ckpt_fuzz_replay PROPERTIES TIMEOUT 120 ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
if(GANTRY_CLANG AND NOT GANTRY_FUZZ STREQUAL "OFF")
    pkg_check_modules(CKFZ_BLAS REQUIRED openblas)
    pkg_check_modules(CKFZ_CRYPTO REQUIRED libcrypto)
endif()
set(_ck_srcs)
foreach(s worker/ckpt_fuzz.c worker/ckpt.c worker/ckpt_read.c worker/model_io.c worker/model.c
          worker/card.c worker/vocab.c worker/text.c worker/dataset.c worker/dist.c
          worker/store.c worker/net.c common/buf.c common/hash.c common/xalloc.c kernels/cpu.c
          kernels/gelu_cpu.c kernels/embed_cpu.c kernels/layernorm_cpu.c kernels/matmul_cpu.c
          kernels/attention_cpu.c kernels/pool_cpu.c kernels/crossentropy_cpu.c
          kernels/adamw_cpu.c)
    list(APPEND _ck_srcs ${PROJECT_SOURCE_DIR}/${s})
endforeach()
# -close_fd_mask=2: the reader's "Skipping checkpoint" lines (the sanitizers still report)
gantry_libfuzzer(ckpt SEEDS ${_ck_seeds} SOURCES ${_ck_srcs} MAX_LEN 65536
    CFLAGS -Wno-unknown-pragmas ${JANSSON_CFLAGS} ${CKFZ_BLAS_CFLAGS}
    LDFLAGS ${JANSSON_LDFLAGS} ${CKFZ_BLAS_LDFLAGS} ${CKFZ_CRYPTO_LDFLAGS} -lz -lpthread -lm
    ENV OPENBLAS_NUM_THREADS=1
    ARGS -close_fd_mask=2 -dict=${CMAKE_CURRENT_SOURCE_DIR}/testdata/fuzz/ckpt.dict)

# Text pairs end to end (data.textPairField): training, gantry-predict, its server, refusals.
add_test(NAME gantry_pairs_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/pairs_test.sh $<TARGET_FILE:gantry-worker>
                 $<TARGET_FILE:gantry-predict>)
set_tests_properties(gantry_pairs_test PROPERTIES TIMEOUT 300)

# Multi-label classification end to end (task: multi-label-classification): training on lists
# in JSONL, TSV and CSV, gantry-predict's label sets and report, its server, refusals.
add_test(NAME gantry_multilabel_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/multilabel_test.sh $<TARGET_FILE:gantry-worker>
                 $<TARGET_FILE:gantry-predict>)
set_tests_properties(gantry_multilabel_test PROPERTIES TIMEOUT 300)

# Regression end to end (task: regression): training on numbers in JSONL, TSV and CSV,
# gantry-predict's values and report, its server, refusals.
add_test(NAME gantry_regression_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/regression_test.sh $<TARGET_FILE:gantry-worker>
                 $<TARGET_FILE:gantry-predict>)
set_tests_properties(gantry_regression_test PROPERTIES TIMEOUT 300)
