# The controller half of operator/: TrainingJob parsing/validation (tj), conditions (cond),
# rendering of children (render), the pure reconcile (rec); later the executor and gantry-operator.
# Included by operator/CMakeLists.txt; stands on gantry_kube (kube.cmake) for OP_E* and logging.
pkg_check_modules(CTL_JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(CTL_MHD REQUIRED IMPORTED_TARGET libmicrohttpd) # ops.c: /healthz /readyz /metrics

set(CTL_DIR ${CMAKE_CURRENT_SOURCE_DIR})
add_library(gantry_ctl STATIC
    ${CTL_DIR}/cond.c
    ${CTL_DIR}/tj.c
    ${CTL_DIR}/render.c
    ${CTL_DIR}/rec.c
    ${CTL_DIR}/exec.c
    ${CTL_DIR}/progress.c
    ${CTL_DIR}/progress_status.c
    ${CTL_DIR}/ops.c
)
target_include_directories(gantry_ctl PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_ctl PUBLIC PkgConfig::CTL_JANSSON PkgConfig::CTL_MHD gantry_httpd gantry_kube
                      gantry_common m)

gantry_test(cond_test SOURCES ${CTL_DIR}/cond_test.c LIBS gantry_ctl)
gantry_test(tj_test SOURCES ${CTL_DIR}/tj_test.c LIBS gantry_ctl)
gantry_test(render_test SOURCES ${CTL_DIR}/render_test.c LIBS gantry_ctl)
gantry_test(ops_test SOURCES ${CTL_DIR}/ops_test.c LIBS gantry_ctl)
gantry_test(progress_test SOURCES ${CTL_DIR}/progress_test.c LIBS gantry_ctl)
gantry_test(rec_test SOURCES ${CTL_DIR}/rec_test.c LIBS gantry_ctl)
target_compile_definitions(rec_test PRIVATE REC_TESTDATA="${CTL_DIR}/testdata/rec")

# API tier: the CRD against a real kube-apiserver; skipped (77) unless GANTRY_TEST_KUBECONFIG is set.
add_test(NAME crd_api_test COMMAND bash ${PROJECT_SOURCE_DIR}/e2e/api/crd_test.sh)
set_tests_properties(crd_api_test PROPERTIES LABELS api SKIP_RETURN_CODE 77 TIMEOUT 300)

add_executable(gantry-operator ${CTL_DIR}/main.c)
target_link_libraries(gantry-operator PRIVATE gantry_ctl)
gantry_test(exec_test SOURCES ${CTL_DIR}/exec_test.c LIBS gantry_ctl gantry_kube_testsrv)
foreach(group lifecycle ha obs)
    add_test(NAME operator_api_${group}_test
             COMMAND bash ${PROJECT_SOURCE_DIR}/e2e/api/operator_test.sh
                     $<TARGET_FILE:gantry-operator> ${group})
    set_tests_properties(operator_api_${group}_test PROPERTIES
                         LABELS api SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
# 410 Gone on the operator's watches, forced by restarting the kube-apiserver of a private API
# tier the test starts (e2e/api/operator_gone_test.sh); gated like the others.
add_test(NAME operator_api_gone_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/e2e/api/operator_gone_test.sh
                 $<TARGET_FILE:gantry-operator>)
set_tests_properties(operator_api_gone_test PROPERTIES LABELS api SKIP_RETURN_CODE 77 TIMEOUT 300)
# The CRD, tj.c and (when its config loader is built) gantry-worker must agree.
if(TARGET gantry_core)
    gantry_test(tj_crd_test SOURCES ${CTL_DIR}/tj_crd_test.c LIBS gantry_ctl gantry_core)
    target_compile_definitions(tj_crd_test PRIVATE TJ_WORKER_CFG=1)
else()
    gantry_test(tj_crd_test SOURCES ${CTL_DIR}/tj_crd_test.c LIBS gantry_ctl)
endif()
target_compile_definitions(tj_crd_test PRIVATE
    TJ_CRD_PATH="${PROJECT_SOURCE_DIR}/manifests/crds/gantry.dev_trainingjobs.yaml")
# ---- benchmark (bench/operator_rss.c, wrapped by bench/operator_rss.sh): needs the API tier.
add_executable(operator_rss ${PROJECT_SOURCE_DIR}/bench/operator_rss.c)
target_link_libraries(operator_rss PRIVATE gantry_ctl)
# bench/rec_bench.c: one reconcile pass of a large running job (pure CPU); the test only runs it.
add_executable(rec_bench ${PROJECT_SOURCE_DIR}/bench/rec_bench.c)
target_link_libraries(rec_bench PRIVATE gantry_ctl)
add_test(NAME rec_bench_smoke COMMAND rec_bench --replicas 1000 --rounds 2)
# ---- fuzzing: operator/fuzz/fuzz_rec.c, reconcile and rendering on untrusted jobs, pods and
# progress (seeds: the reconcile fixtures as full objects, operator/fuzz/seeds.py). As for
# operator/kube (kube.cmake): a replay of the seeds in every build, and with clang's libFuzzer a
# bounded run labelled "fuzz" (KUBE_FUZZ_SECONDS), its new inputs kept in the build tree.
set(CTL_FUZZ_SEEDS ${PROJECT_SOURCE_DIR}/operator/testdata/fuzz/rec)
# gantry-worker's config loader (worker/cfg.c) is linked in: the rendered config.json must load.
add_executable(rec_fuzz_replay ${CTL_DIR}/fuzz/fuzz_rec.c ${CTL_DIR}/kube/fuzz/fuzz_replay.c
    ${PROJECT_SOURCE_DIR}/worker/cfg.c)
target_compile_definitions(rec_fuzz_replay PRIVATE FUZZ_REC_WORKER_CFG)
target_link_libraries(rec_fuzz_replay PRIVATE gantry_ctl)
add_test(NAME rec_fuzz_replay COMMAND rec_fuzz_replay ${CTL_FUZZ_SEEDS})
if(TARGET kube_fuzzers)
    set(_ctl_fz_srcs ${CTL_DIR}/fuzz/fuzz_rec.c ${CTL_DIR}/cond.c ${CTL_DIR}/tj.c
        ${CTL_DIR}/render.c ${CTL_DIR}/rec.c ${CTL_DIR}/progress_status.c
        ${PROJECT_SOURCE_DIR}/common/hash.c
        ${PROJECT_SOURCE_DIR}/worker/cfg.c)
    add_custom_command(OUTPUT ${_fz_dir}/fuzz_rec
        COMMAND ${KUBE_CLANG} ${_fz_flags} -DFUZZ_REC_WORKER_CFG ${_ctl_fz_srcs}
                ${_fz_dir}/libkube_fuzz.a ${KUBE_DEPS_LDFLAGS} -lpthread -lm -o ${_fz_dir}/fuzz_rec
        DEPENDS ${_ctl_fz_srcs} ${_fz_dir}/libkube_fuzz.a
        COMMENT "Linking libFuzzer target fuzz_rec" VERBATIM)
    add_custom_target(ctl_fuzzers ALL DEPENDS ${_fz_dir}/fuzz_rec)
    if(NOT CMAKE_BUILD_TYPE STREQUAL "Asan")
        add_test(NAME rec_fuzz_run
            COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
                    sh -c "mkdir -p corpus-rec && exec ${_fz_dir}/fuzz_rec -max_total_time=${KUBE_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix=${_fz_dir}/crash-rec- corpus-rec ${CTL_FUZZ_SEEDS}"
            WORKING_DIRECTORY ${_fz_dir})
        set_tests_properties(rec_fuzz_run PROPERTIES LABELS fuzz TIMEOUT ${KUBE_FUZZ_SECONDS}0)
    endif()
endif()
