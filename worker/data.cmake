# Data and evaluation: tokenizer, vocab, JSONL/TSV readers, metrics (worker/text|vocab|dataset|eval);
# the fuzz targets below also cover the config parser (worker/cfg.c).
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
find_package(ZLIB REQUIRED) # gzip-compressed data files (dataset.c)

add_library(gantry_data STATIC
    ${CMAKE_CURRENT_LIST_DIR}/text.c
    ${CMAKE_CURRENT_LIST_DIR}/vocab.c
    ${CMAKE_CURRENT_LIST_DIR}/dataset.c
    ${CMAKE_CURRENT_LIST_DIR}/eval.c
    ${CMAKE_CURRENT_LIST_DIR}/card.c)
target_include_directories(gantry_data PUBLIC "${CMAKE_CURRENT_LIST_DIR}/..")
target_link_libraries(gantry_data PUBLIC gantry_common PkgConfig::JANSSON ZLIB::ZLIB m)

# Unit tests; fixtures live in worker/testdata.
foreach(t text vocab dataset eval card)
    if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${t}_test.c)
        gantry_test(${t}_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}_test.c LIBS gantry_data)
        target_compile_definitions(${t}_test PRIVATE GANTRY_TESTDATA="${CMAKE_CURRENT_LIST_DIR}/testdata")
    endif()
endforeach()

# Fuzz targets (worker/*_fuzz.c). Always: a replay executable per target that runs the seed corpus
# in worker/testdata/fuzz/<name>/ once, under the build's own compiler and sanitizers. With clang
# (found on PATH whatever compiler builds the rest; GANTRY_FUZZ=OFF to skip): a real libFuzzer
# binary built with -fsanitize=fuzzer,address,undefined, and a ctest (label "fuzz") that fuzzes it
# for GANTRY_FUZZ_SECONDS (default 20) starting from the seeds. New corpus entries and crash
# files go to the build tree (fuzz/<name>/), never to the source tree.
set(GANTRY_FUZZ AUTO CACHE STRING "Build and run libFuzzer targets with clang: AUTO|ON|OFF")
set(GANTRY_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer ctest runs")
set(_data_srcs ${CMAKE_CURRENT_LIST_DIR}/text.c ${CMAKE_CURRENT_LIST_DIR}/vocab.c
    ${CMAKE_CURRENT_LIST_DIR}/dataset.c ${CMAKE_CURRENT_LIST_DIR}/card.c
    ${CMAKE_CURRENT_LIST_DIR}/cfg.c
    ${CMAKE_CURRENT_LIST_DIR}/../common/buf.c
    ${CMAKE_CURRENT_LIST_DIR}/../common/xalloc.c)
if(NOT GANTRY_FUZZ STREQUAL "OFF")
    find_program(GANTRY_CLANG NAMES clang clang-16 clang-15 clang-14)
    if(NOT GANTRY_CLANG AND GANTRY_FUZZ STREQUAL "ON")
        message(FATAL_ERROR "GANTRY_FUZZ=ON but no clang found; apt-get install clang")
    endif()
endif()
# gantry_libfuzzer(NAME SOURCES <full paths> [SEEDS dir] [CFLAGS ...] [LDFLAGS ...] [ENV k=v ...]
#                  [ARGS ...] [MAX_LEN n] [TIMEOUT s]): with clang, the libFuzzer binary
# <NAME>_fuzz (ASan + UBSan) and its bounded ctest <NAME>_fuzz (label "fuzz"), new inputs and
# crashes kept in the build tree's fuzz/<NAME>/. The Asan build tree leaves it out: the binary
# already carries the sanitizers.
function(gantry_libfuzzer name)
    cmake_parse_arguments(F "" "SEEDS;MAX_LEN;TIMEOUT" "SOURCES;CFLAGS;LDFLAGS;ENV;ARGS" ${ARGN})
    if(NOT GANTRY_CLANG OR GANTRY_FUZZ STREQUAL "OFF" OR CMAKE_BUILD_TYPE STREQUAL "Asan")
        return()
    endif()
    if(NOT F_MAX_LEN)
        set(F_MAX_LEN 8192)
    endif()
    if(NOT F_TIMEOUT)
        set(F_TIMEOUT 10)
    endif()
    set(_bin ${CMAKE_CURRENT_BINARY_DIR}/${name}_fuzz)
    set(_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz/${name})
    add_custom_command(OUTPUT ${_bin}
        COMMAND ${GANTRY_CLANG} -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
                -I${PROJECT_SOURCE_DIR} ${F_CFLAGS} ${F_SOURCES} ${F_LDFLAGS} -o ${_bin}
        DEPENDS ${F_SOURCES} COMMENT "Building libFuzzer target ${name}_fuzz with clang" VERBATIM)
    add_custom_target(${name}_fuzz_bin ALL DEPENDS ${_bin})
    add_test(NAME ${name}_fuzz
        COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1 ${F_ENV}
                ${_bin} -max_total_time=${GANTRY_FUZZ_SECONDS} -timeout=${F_TIMEOUT}
                -rss_limit_mb=2048 -max_len=${F_MAX_LEN} -print_final_stats=1 ${F_ARGS}
                -artifact_prefix=${_dir}/crash- ${_dir} ${F_SEEDS})
    set_tests_properties(${name}_fuzz PROPERTIES LABELS fuzz TIMEOUT 180)
    file(MAKE_DIRECTORY ${_dir})
endfunction()

foreach(f dataset text reader card cfg)
    set(_seeds ${CMAKE_CURRENT_LIST_DIR}/testdata/fuzz/${f})
    # The reader target reads files through a 7-byte window so lines straddle reads.
    set(_defs "")
    if(f STREQUAL "reader")
        set(_defs -DDATASET_READ_CHUNK=7)
    endif()
    add_executable(${f}_fuzz_replay ${CMAKE_CURRENT_LIST_DIR}/${f}_fuzz.c
        ${CMAKE_CURRENT_LIST_DIR}/replay_fuzz.c ${_data_srcs})
    target_compile_options(${f}_fuzz_replay PRIVATE ${_defs})
    target_include_directories(${f}_fuzz_replay PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
    target_link_libraries(${f}_fuzz_replay PRIVATE PkgConfig::JANSSON ZLIB::ZLIB m)
    add_test(NAME ${f}_fuzz_replay COMMAND ${f}_fuzz_replay ${_seeds})
    set_tests_properties(${f}_fuzz_replay PROPERTIES TIMEOUT 120)
    gantry_libfuzzer(${f} SEEDS ${_seeds}
        SOURCES ${CMAKE_CURRENT_LIST_DIR}/${f}_fuzz.c ${_data_srcs}
        CFLAGS ${_defs} ${JANSSON_CFLAGS} LDFLAGS ${JANSSON_LDFLAGS} -lz -lm)
endforeach()

# The SpamAssassin converter (hack/spam_data.py) on a five-e-mail fixture; Python stdlib only.
find_program(GANTRY_PYTHON3 NAMES python3)
if(GANTRY_PYTHON3)
    add_test(NAME spam_data_test
        COMMAND ${GANTRY_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/../hack/spam_data_test.py)
    set_tests_properties(spam_data_test PROPERTIES TIMEOUT 120)
endif()

# The worker's encoding beside Hugging Face tokenizers' on the same vocab
# (hack/hf_tokenizer_check.py in the venv of hack/pyenv.sh hf; skipped, 77, when it cannot be
# built).
add_executable(encode_tool ${CMAKE_CURRENT_LIST_DIR}/encode_tool.c)
target_link_libraries(encode_tool PRIVATE gantry_data)
add_test(NAME hf_tokenizer_test
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/hf_tokenizer_test.sh $<TARGET_FILE:encode_tool>)
set_tests_properties(hf_tokenizer_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900 LABELS python)
