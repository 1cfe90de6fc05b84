# operator/kube/: the Kubernetes API client (libcurl + OpenSSL, Jansson, libyaml) and the operator's
# error codes and logger. Static library gantry_kube; include as "operator/kube/kube.h".
pkg_check_modules(KUBE_DEPS REQUIRED IMPORTED_TARGET libcurl jansson yaml-0.1 zlib)
find_package(OpenSSL REQUIRED)

set(KUBE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/kube)
add_library(gantry_kube STATIC
    ${KUBE_DIR}/kube_err.c
    ${KUBE_DIR}/log.c
    ${KUBE_DIR}/kube_yaml.c
    ${KUBE_DIR}/kube_config.c
    ${KUBE_DIR}/kube.c
    ${KUBE_DIR}/strmap.c
    ${KUBE_DIR}/watch.c
    ${KUBE_DIR}/informer.c
    ${KUBE_DIR}/queue.c
    ${KUBE_DIR}/lease.c
    ${KUBE_DIR}/event.c
)
target_include_directories(gantry_kube PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_kube PUBLIC PkgConfig::KUBE_DEPS OpenSSL::SSL OpenSSL::Crypto
    Threads::Threads gantry_common)

gantry_test(kube_err_test SOURCES ${KUBE_DIR}/kube_err_test.c LIBS gantry_kube)
gantry_test(kube_log_test SOURCES ${KUBE_DIR}/log_test.c LIBS gantry_kube)
gantry_test(kube_config_test SOURCES ${KUBE_DIR}/kube_config_test.c LIBS gantry_kube)
target_compile_definitions(kube_config_test PRIVATE
    KUBE_TESTDATA="${PROJECT_SOURCE_DIR}/operator/testdata/kube")
# testsrv: a loopback HTTP/1.1 server for the client's unit tests.
add_library(gantry_kube_testsrv STATIC ${KUBE_DIR}/testsrv.c)
target_link_libraries(gantry_kube_testsrv PUBLIC gantry_kube)
gantry_test(kube_test SOURCES ${KUBE_DIR}/kube_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_watch_test SOURCES ${KUBE_DIR}/watch_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_strmap_test SOURCES ${KUBE_DIR}/strmap_test.c LIBS gantry_kube)
gantry_test(kube_queue_test SOURCES ${KUBE_DIR}/queue_test.c LIBS gantry_kube)
gantry_test(kube_informer_test SOURCES ${KUBE_DIR}/informer_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_event_test SOURCES ${KUBE_DIR}/event_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_lease_test SOURCES ${KUBE_DIR}/lease_test.c LIBS gantry_kube_testsrv)
# Integration tests against the API tier (kube-apiserver + etcd); exit 77 without
# GANTRY_TEST_KUBECONFIG.
gantry_test(kube_api_test SOURCES ${KUBE_DIR}/kube_api_test.c LIBS gantry_kube LABELS api)
set_tests_properties(kube_api_test PROPERTIES TIMEOUT 180)

# ---- fuzzing
# Replays: each fuzz target linked with the normal compiler and run over its seed corpus in
# operator/testdata/kube/fuzz/<target>/ by plain ctest (and so under ASan+UBSan in the Asan build).
set(KUBE_FUZZ_TARGETS kubeconfig watch status)
set(KUBE_CORPUS ${PROJECT_SOURCE_DIR}/operator/testdata/kube/fuzz)
foreach(t ${KUBE_FUZZ_TARGETS})
    add_executable(kube_fuzz_${t}_replay ${KUBE_DIR}/fuzz/fuzz_${t}.c ${KUBE_DIR}/fuzz/fuzz_replay.c)
    target_link_libraries(kube_fuzz_${t}_replay PRIVATE gantry_kube)
    add_test(NAME kube_fuzz_${t}_replay COMMAND kube_fuzz_${t}_replay ${KUBE_CORPUS}/${t})
endforeach()

# libFuzzer builds (clang -fsanitize=fuzzer,address,undefined), when clang and its libFuzzer
# runtime are there: GANTRY_FUZZ=AUTO|ON|OFF. Each gets a bounded run as a CTest test labelled
# "fuzz" (KUBE_FUZZ_SECONDS each, default 20); new inputs go to the build tree, never the repo.
set(GANTRY_FUZZ AUTO CACHE STRING "Build libFuzzer targets for operator/kube (AUTO|ON|OFF)")
set(KUBE_FUZZ_SECONDS 20 CACHE STRING "Seconds each bounded fuzz run takes in ctest")
find_program(KUBE_CLANG NAMES clang clang-16 clang-15 clang-14)
if(KUBE_CLANG AND NOT GANTRY_FUZZ STREQUAL "OFF")
    execute_process(COMMAND ${KUBE_CLANG} -print-file-name=libclang_rt.fuzzer-x86_64.a
                    OUTPUT_VARIABLE _kube_fz OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT EXISTS "${_kube_fz}")
        execute_process(COMMAND ${KUBE_CLANG} -print-resource-dir
                        OUTPUT_VARIABLE _kube_rd OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        set(_kube_fz "${_kube_rd}/lib/linux/libclang_rt.fuzzer-x86_64.a")
    endif()
endif()
if(KUBE_CLANG AND EXISTS "${_kube_fz}" AND NOT GANTRY_FUZZ STREQUAL "OFF")
    set(_fz_dir ${CMAKE_CURRENT_BINARY_DIR}/kube-fuzz)
    file(MAKE_DIRECTORY ${_fz_dir}/obj)
    set(_fz_flags -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -D_GNU_SOURCE -std=c11 -I${PROJECT_SOURCE_DIR})
    set(_fz_srcs ${PROJECT_SOURCE_DIR}/common/buf.c ${PROJECT_SOURCE_DIR}/common/xalloc.c
        ${KUBE_DIR}/kube_err.c ${KUBE_DIR}/log.c ${KUBE_DIR}/kube_yaml.c ${KUBE_DIR}/kube_config.c
        ${KUBE_DIR}/kube.c ${KUBE_DIR}/strmap.c ${KUBE_DIR}/watch.c ${KUBE_DIR}/informer.c)
    # The library is compiled once (without the fuzzer's main: -fsanitize=fuzzer-no-link).
    set(_fz_lib_flags -g -O1 -fsanitize=fuzzer-no-link,address,undefined
        -fno-sanitize-recover=undefined -D_GNU_SOURCE -std=c11 -I${PROJECT_SOURCE_DIR})
    add_custom_command(OUTPUT ${_fz_dir}/libkube_fuzz.a
        COMMAND ${KUBE_CLANG} ${_fz_lib_flags} -c ${_fz_srcs}
        COMMAND ${CMAKE_COMMAND} -E rm -f ${_fz_dir}/libkube_fuzz.a
        COMMAND ${CMAKE_AR} rcs ${_fz_dir}/libkube_fuzz.a buf.o xalloc.o kube_err.o log.o
                kube_yaml.o kube_config.o kube.o strmap.o watch.o informer.o
        WORKING_DIRECTORY ${_fz_dir}/obj
        DEPENDS ${_fz_srcs} COMMENT "Building operator/kube for libFuzzer (clang)" VERBATIM)
    set(_fz_bins)
    foreach(t ${KUBE_FUZZ_TARGETS})
        add_custom_command(OUTPUT ${_fz_dir}/fuzz_${t}
            COMMAND ${KUBE_CLANG} ${_fz_flags} ${KUBE_DIR}/fuzz/fuzz_${t}.c ${_fz_dir}/libkube_fuzz.a
                    ${KUBE_DEPS_LDFLAGS} -lpthread -o ${_fz_dir}/fuzz_${t}
            DEPENDS ${KUBE_DIR}/fuzz/fuzz_${t}.c ${_fz_dir}/libkube_fuzz.a
            COMMENT "Linking libFuzzer target fuzz_${t}" VERBATIM)
        list(APPEND _fz_bins ${_fz_dir}/fuzz_${t})
        # The fuzzers are the same clang+ASan binaries in every build type: run them once, from
        # the normal build, not again from the Asan one.
        if(CMAKE_BUILD_TYPE STREQUAL "Asan")
            continue()
        endif()
        add_test(NAME kube_fuzz_${t}_run
            COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
                    sh -c "mkdir -p corpus-${t} && exec ${_fz_dir}/fuzz_${t} -max_total_time=${KUBE_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix=${_fz_dir}/crash-${t}- corpus-${t} ${KUBE_CORPUS}/${t}"
            WORKING_DIRECTORY ${_fz_dir})
        set_tests_properties(kube_fuzz_${t}_run PROPERTIES LABELS fuzz
                             TIMEOUT ${KUBE_FUZZ_SECONDS}0)
    endforeach()
    add_custom_target(kube_fuzzers ALL DEPENDS ${_fz_bins})
    message(STATUS "operator/kube fuzzers: libFuzzer via ${KUBE_CLANG} (ctest -L fuzz)")
else()
    message(STATUS "operator/kube fuzzers: off (no clang with libFuzzer; replays still run)")
endif()

# ---- benchmark (bench/kube_bench.c): needs the API tier; not a test.
add_executable(kube_bench ${PROJECT_SOURCE_DIR}/bench/kube_bench.c)
target_link_libraries(kube_bench PRIVATE gantry_kube)
