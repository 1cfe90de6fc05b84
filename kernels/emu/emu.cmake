# The gantry CUDA emulator (kernels/emu/): the real .cu kernels and their GPU tests, compiled as
# C++ and run on the CPU, so CI without a GPU checks the kernels' logic against the CPU
# specification (label `emu`). Not a GPU: see include/cuda_runtime.h for what it checks and
# what it cannot. Included from kernels/CMakeLists.txt; GANTRY_EMU=OFF leaves it out.
option(GANTRY_EMU "Build the CUDA kernels' CPU emulation and its tests" ON)
if(NOT GANTRY_EMU)
    return()
endif()
enable_language(CXX)

set(_emu ${CMAKE_CURRENT_LIST_DIR})
set(GANTRY_EMU_DIR ${CMAKE_CURRENT_LIST_DIR} CACHE INTERNAL "kernels/emu, for the functions below")
set(GANTRY_EMU_CXX_FLAGS -Wall -Wextra -Werror -Wno-unused-parameter -Wno-unused-function
    -Wno-unknown-pragmas) # `#pragma unroll` is nvcc's

# gantry_emu_sources(OUT cu...): the C++ translations (build dir) of the given .cu files.
function(gantry_emu_sources out)
    set(list)
    foreach(cu ${ARGN})
        file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${cu})
        string(REGEX REPLACE "\\.cu$" ".cc" rel ${rel})
        set(cc ${PROJECT_BINARY_DIR}/emu-src/${rel})
        add_custom_command(OUTPUT ${cc}
            COMMAND ${CMAKE_COMMAND} -DIN=${cu} -DOUT=${cc} -P ${GANTRY_EMU_DIR}/cu2cc.cmake
            DEPENDS ${cu} ${GANTRY_EMU_DIR}/cu2cc.cmake
            COMMENT "cu2cc ${rel}" VERBATIM)
        list(APPEND list ${cc})
    endforeach()
    set(${out} ${list} PARENT_SCOPE)
endfunction()

# gantry_emu_target(TARGET): the emulator's headers shadow any real CUDA ones, C++17.
function(gantry_emu_target t)
    target_include_directories(${t} BEFORE PRIVATE ${GANTRY_EMU_DIR}/include)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR})
    target_compile_features(${t} PRIVATE cxx_std_17)
    target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${GANTRY_EMU_CXX_FLAGS}>)
endfunction()

# gantry_emu_defer_test(NAME COMMAND...): test NAME again as NAME_defer with stream work deferred
# and interleaved at random (GANTRY_EMU_DEFER=1, stream.cc), labels emu and emu_defer. For a
# representative part of the emu tests, so CI checks the code's stream ordering; the whole label
# runs deferred with `GANTRY_EMU_DEFER=1 ctest -L emu` (any GANTRY_EMU_SEED).
function(gantry_emu_defer_test name)
    cmake_parse_arguments(D "" "" "COMMAND;ENV" ${ARGN})
    add_test(NAME ${name}_defer COMMAND ${D_COMMAND})
    set_tests_properties(${name}_defer PROPERTIES LABELS "emu;emu_defer" TIMEOUT 300
                         SKIP_RETURN_CODE 77 ENVIRONMENT "GANTRY_EMU_DEFER=1;${D_ENV}")
    if(NOT D_ENV)
        set_tests_properties(${name}_defer PROPERTIES ENVIRONMENT "GANTRY_EMU_DEFER=1")
    endif()
endfunction()

# cuBLAS, cuBLASLt and CUB's radix sort on the CPU (gantry_emu_blas, blas.cc).
include(${_emu}/blas.cmake)
add_library(gantry_emu_rt STATIC ${_emu}/runtime.cc ${_emu}/stream.cc)
gantry_emu_target(gantry_emu_rt)
target_link_libraries(gantry_emu_rt PUBLIC gantry_emu_blas Threads::Threads)
# NCCL between rank processes through shared memory (gantry_emu_nccl, nccl.cc), and the nccl
# backend (worker/coll_nccl.cu) on it.
include(${_emu}/nccl.cmake)

set(_ops)
foreach(op gpu_runtime gelu embed layernorm matmul attention tune pool crossentropy adamw)
    list(APPEND _ops ${PROJECT_SOURCE_DIR}/kernels/${op}.cu)
endforeach()
gantry_emu_sources(_ops_cc ${_ops})
# cuDNN's attention (attention_cudnn.cpp) as built without cuDNN: the emulator has none, and the
# autotune says so and times the rest.
add_library(gantry_kernels_emu STATIC ${_ops_cc} ${PROJECT_SOURCE_DIR}/kernels/attention_cudnn.cpp)
target_compile_definitions(gantry_kernels_emu PRIVATE GANTRY_EMU)
gantry_emu_target(gantry_kernels_emu)
target_link_libraries(gantry_kernels_emu PUBLIC gantry_emu_rt gantry_kernels)

# The GPU tests, unchanged, on the emulator: <op>_gpu_emu_test.
foreach(t runtime tensorcore gelu embed layernorm matmul attention pool crossentropy adamw shapes)
    gantry_emu_sources(_t ${PROJECT_SOURCE_DIR}/kernels/${t}_gpu_test.cu)
    set(_extra)
    if(t STREQUAL "adamw")
        set(_extra ${PROJECT_SOURCE_DIR}/worker/optim.c) # the CPU reference, without gantry_core
    endif()
    gantry_test(${t}_gpu_emu_test SOURCES ${_t} ${_extra} LIBS gantry_kernels_emu gantry_kernels
                LABELS emu)
    gantry_emu_target(${t}_gpu_emu_test)
endforeach()

# bench/gpu_kernels on tiny shapes, each op once (as hack/gpu-check.sh runs it under ncu), head
# size 64 (so the wgmma forward too): every op it times launches and the program ends cleanly
# (its numbers mean nothing here).
gantry_emu_sources(_gk_cc ${PROJECT_SOURCE_DIR}/bench/gpu_kernels.cu)
add_executable(gpu_kernels_emu ${_gk_cc})
gantry_emu_target(gpu_kernels_emu)
target_link_libraries(gpu_kernels_emu PRIVATE gantry_kernels_emu gantry_kernels)
add_test(NAME gpu_kernels_emu COMMAND gpu_kernels_emu --batch 2 --seq 40 --hidden 64 --heads 1
                                      --params 1000 --iters 1 --warmup 0)
set_tests_properties(gpu_kernels_emu PROPERTIES LABELS emu TIMEOUT 300
                     PASS_REGULAR_EXPRESSION "gpu_kernels: 20 ops timed")

# Device selection with two emulated GPUs (local ranks 0 and 1 on their own, 2 and up refused).
add_test(NAME runtime_gpu_emu2_test COMMAND runtime_gpu_emu_test)
set_tests_properties(runtime_gpu_emu2_test PROPERTIES LABELS emu ENVIRONMENT "GANTRY_EMU_DEVICES=2")

# The emulator's own semantics (barriers, shuffles, launch and memory checks).
gantry_emu_sources(_emu_test_cc ${_emu}/emu_test.cu)
gantry_test(emu_test SOURCES ${_emu_test_cc} LIBS gantry_emu_rt gantry_common LABELS emu)
gantry_emu_target(emu_test)
# Stream capture and graphs (stream.cc): replay, graph memory, what a capture refuses; at the call
# and deferred (it switches itself).
gantry_emu_sources(_graph_test_cc ${_emu}/graph_test.cu)
gantry_test(emu_graph_test SOURCES ${_graph_test_cc} LIBS gantry_emu_rt gantry_common LABELS emu)
gantry_emu_target(emu_graph_test)

# Deferred (gantry_emu_defer_test above): the emulator's own test, the small op tests, and a
# quarter of the shape sweep (every launcher, cuBLASLt and CUB included).
foreach(t emu_test runtime_gpu_emu_test gelu_gpu_emu_test embed_gpu_emu_test
        layernorm_gpu_emu_test pool_gpu_emu_test crossentropy_gpu_emu_test adamw_gpu_emu_test)
    gantry_emu_defer_test(${t} COMMAND ${t})
endforeach()
gantry_emu_defer_test(shapes_gpu_emu_test COMMAND shapes_gpu_emu_test ENV GANTRY_SHAPES_ITERS=8)
