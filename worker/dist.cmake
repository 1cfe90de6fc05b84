# The distributed runtime: rendezvous store, collectives, sampler, checkpoints, launcher.
# Included by worker/CMakeLists.txt.
pkg_check_modules(GANTRY_JANSSON REQUIRED IMPORTED_TARGET jansson)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

add_library(gantry_dist STATIC
    ${CMAKE_CURRENT_LIST_DIR}/dist.c
    ${CMAKE_CURRENT_LIST_DIR}/net.c
    ${CMAKE_CURRENT_LIST_DIR}/store.c
    ${CMAKE_CURRENT_LIST_DIR}/coll.c
    ${CMAKE_CURRENT_LIST_DIR}/coll_tcp.c
    ${CMAKE_CURRENT_LIST_DIR}/coll_shm.c
    ${CMAKE_CURRENT_LIST_DIR}/sampler.c
    ${CMAKE_CURRENT_LIST_DIR}/ckpt.c
    ${CMAKE_CURRENT_LIST_DIR}/ckpt_read.c
    ${CMAKE_CURRENT_LIST_DIR}/launch.c)
target_include_directories(gantry_dist PUBLIC "${PROJECT_SOURCE_DIR}")
# The all-reduce's add and bf16 loops only vectorise at -O3 (GCC 12's -O2 does not).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/coll_tcp.c ${CMAKE_CURRENT_LIST_DIR}/coll_shm.c PROPERTIES
                            COMPILE_OPTIONS "$<$<NOT:$<CONFIG:Asan>>:-O3>")
target_link_libraries(gantry_dist PUBLIC gantry_common OpenSSL::Crypto PkgConfig::GANTRY_JANSSON
                      Threads::Threads m)

gantry_test(store_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/store_test.c LIBS gantry_dist)
gantry_test(coll_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/coll_test.c LIBS gantry_dist)
gantry_test(sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.c LIBS gantry_dist)
gantry_test(ckpt_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ckpt_test.c LIBS gantry_dist)
gantry_test(dist_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/dist_test.c LIBS gantry_dist)

# gantry-run: the local launcher (torchrun --standalone); dist_smoke: a tiny distributed program.
add_executable(gantry-run ${CMAKE_CURRENT_LIST_DIR}/gantry_run.c)
target_link_libraries(gantry-run PRIVATE gantry_dist)
add_executable(dist_smoke ${CMAKE_CURRENT_LIST_DIR}/dist_smoke.c)
target_link_libraries(dist_smoke PRIVATE gantry_dist)
gantry_test(launch_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/launch_test.c LIBS gantry_dist)
target_compile_definitions(launch_test PRIVATE DIST_SMOKE="$<TARGET_FILE:dist_smoke>")
add_dependencies(launch_test dist_smoke)
add_test(NAME gantry_run_smoke COMMAND gantry-run --nproc 4 -- $<TARGET_FILE:dist_smoke>)
add_test(NAME gantry_run_cli_test
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gantry_run_cli_test.sh $<TARGET_FILE:gantry-run>)
set_tests_properties(gantry_run_cli_test PROPERTIES TIMEOUT 60)

# NCCL backend: compiled only with CUDA; without it coll_nccl.h provides a stub.
if(GANTRY_HAVE_NCCL)
    target_sources(gantry_dist PRIVATE ${CMAKE_CURRENT_LIST_DIR}/coll_nccl.cu)
    target_compile_definitions(gantry_dist PUBLIC GANTRY_HAVE_NCCL=1)
    target_link_libraries(gantry_dist PUBLIC gantry::nccl)
    gantry_test(coll_nccl_gpu_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/coll_nccl_gpu_test.cu
                LIBS gantry_dist LABELS gpu)
endif()

# Checkpoint interop with the Python safetensors package (venv from hack/pyenv.sh; skipped, 77,
# when it cannot be built). The first run builds the venv, hence the long timeout.
add_executable(ckpt_tool ${CMAKE_CURRENT_LIST_DIR}/ckpt_tool.c)
target_link_libraries(ckpt_tool PRIVATE gantry_dist)
add_test(NAME ckpt_safetensors_test
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ckpt_safetensors_test.sh $<TARGET_FILE:ckpt_tool>)
set_tests_properties(ckpt_safetensors_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1800
                     LABELS python)

# The rendezvous store server fuzzed over a real loopback socket (worker/store_fuzz.c): a replay
# of the seeds (hack/store_fuzz_seeds.py) in every build, and with clang (data.cmake) a libFuzzer
# binary and a bounded run labelled "fuzz".
set(_st_seeds ${CMAKE_CURRENT_LIST_DIR}/testdata/fuzz/store)
add_executable(store_fuzz_replay ${CMAKE_CURRENT_LIST_DIR}/store_fuzz.c
               ${CMAKE_CURRENT_LIST_DIR}/replay_fuzz.c)
target_link_libraries(store_fuzz_replay PRIVATE gantry_dist)
add_test(NAME store_fuzz_replay COMMAND store_fuzz_replay ${_st_seeds})
set_tests_properties(store_fuzz_replay PROPERTIES TIMEOUT 120)
set(_st_srcs)
foreach(s worker/store_fuzz.c worker/store.c worker/net.c worker/dist.c common/buf.c
          common/xalloc.c)
    list(APPEND _st_srcs ${PROJECT_SOURCE_DIR}/${s})
endforeach()
# -close_fd_mask=2: the server's log lines (the sanitizers still report)
gantry_libfuzzer(store SEEDS ${_st_seeds} SOURCES ${_st_srcs} MAX_LEN 4096 TIMEOUT 20
    LDFLAGS -lcrypto -lpthread -lm ARGS -close_fd_mask=2)
