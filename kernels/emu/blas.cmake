# The CUDA emulator's cuBLAS / cuBLASLt / CUB subset (kernels/emu/include/cublas_v2.h, cublasLt.h,
# cub/device/device_radix_sort.cuh; implementation kernels/emu/blas.cc) and its test.
# Include from the top-level CMakeLists.txt: include(kernels/emu/blas.cmake)
# Link gantry_emu_blas into anything built against the emulated headers; its include directories
# (PUBLIC) put kernels/emu/include ahead of any real CUDA headers.
include_guard(GLOBAL)

get_property(_gantry_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "CXX" IN_LIST _gantry_langs)
    enable_language(CXX)
endif()

add_library(gantry_emu_blas STATIC ${CMAKE_CURRENT_LIST_DIR}/blas.cc)
target_include_directories(gantry_emu_blas BEFORE PUBLIC
    "${CMAKE_CURRENT_LIST_DIR}/include" "${PROJECT_SOURCE_DIR}")
target_compile_features(gantry_emu_blas PUBLIC cxx_std_17)
set_target_properties(gantry_emu_blas PROPERTIES CXX_EXTENSIONS OFF)
target_compile_options(gantry_emu_blas PRIVATE -Wall -Wextra -Wshadow -Werror)
# -O2 in the Asan build too (still instrumented): the emulated GPU tests' GEMMs dominate their time.
target_compile_options(gantry_emu_blas PRIVATE $<$<CONFIG:Asan>:-O2>)
target_link_libraries(gantry_emu_blas PUBLIC m)

gantry_test(emu_blas_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/blas_test.cc LIBS gantry_emu_blas
            LABELS emu)
target_compile_options(emu_blas_test PRIVATE -Wall -Wextra -Wshadow -Werror)
set_target_properties(emu_blas_test PROPERTIES CXX_EXTENSIONS OFF)
