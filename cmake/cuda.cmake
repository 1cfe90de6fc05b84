# CUDA, cuBLAS(Lt) and NCCL detection. GANTRY_CUDA=AUTO|ON|OFF.
#   AUTO: use CUDA if nvcc and NCCL are found, else build without it and say how to get it.
#   ON:   fail configure when they are missing.
#   OFF:  never look.
# Search order for the toolkit: -DGANTRY_CUDA_ROOT, $GANTRY_CUDA_ROOT, the pinned wheels unpacked by
# `hack/install-deps.sh --cuda` under $GANTRY_CACHE (default ~/.cache/gantry), /usr/local/cuda, PATH.
# Sets GANTRY_HAVE_CUDA, GANTRY_HAVE_NCCL and the imported targets gantry::nccl, gantry::cublaslt;
# GANTRY_HAVE_CUDNN_FE and GANTRY_CUDNN_FE_INCLUDES where the cuDNN frontend's headers are found.

set(GANTRY_CUDA AUTO CACHE STRING "Build the CUDA kernels and the NCCL backend: AUTO, ON or OFF")
set_property(CACHE GANTRY_CUDA PROPERTY STRINGS AUTO ON OFF)
set(GANTRY_CUDA_ROOT "" CACHE PATH "CUDA toolkit root holding bin/nvcc (optional)")

set(GANTRY_HAVE_CUDA OFF)
set(GANTRY_HAVE_NCCL OFF)

# The pinned versions live in one file shared with the shell scripts.
file(STRINGS "${PROJECT_SOURCE_DIR}/hack/versions.env" _pins REGEX "^[A-Z_]+=")
foreach(_kv IN LISTS _pins)
    string(REGEX MATCH "^([A-Z_]+)=(.*)$" _ "${_kv}")
    set(GANTRY_PIN_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
endforeach()
if(DEFINED ENV{GANTRY_CACHE})
    set(_cache "$ENV{GANTRY_CACHE}")
else()
    set(_cache "$ENV{HOME}/.cache/gantry")
endif()
set(_wheel_root
    "${_cache}/cuda-${GANTRY_PIN_CUDA_NVCC_VERSION}-nccl-${GANTRY_PIN_NCCL_VERSION}/nvidia")

if(NOT GANTRY_CUDA STREQUAL "OFF")
    find_program(GANTRY_NVCC nvcc
        HINTS "${GANTRY_CUDA_ROOT}/bin" "$ENV{GANTRY_CUDA_ROOT}/bin" "${_wheel_root}/cu13/bin"
              /usr/local/cuda/bin
        NO_CACHE)
    if(GANTRY_NVCC)
        get_filename_component(_cuda_bin "${GANTRY_NVCC}" DIRECTORY)
        get_filename_component(_cuda_root "${_cuda_bin}" DIRECTORY)
        find_path(GANTRY_NCCL_INCLUDE nccl.h
            HINTS "${_wheel_root}/nccl/include" "${_cuda_root}/include" /usr/include NO_CACHE)
        find_library(GANTRY_NCCL_LIB nccl
            HINTS "${_wheel_root}/nccl/lib" "${_cuda_root}/lib" "${_cuda_root}/lib64" NO_CACHE)
        find_library(GANTRY_CUBLASLT_LIB cublasLt
            HINTS "${_cuda_root}/lib" "${_cuda_root}/lib64" NO_CACHE)
        find_library(GANTRY_CUBLAS_LIB cublas
            HINTS "${_cuda_root}/lib" "${_cuda_root}/lib64" NO_CACHE)
    endif()
    if(GANTRY_NVCC AND GANTRY_NCCL_INCLUDE AND GANTRY_NCCL_LIB AND GANTRY_CUBLASLT_LIB)
        set(CMAKE_CUDA_COMPILER "${GANTRY_NVCC}")
        # 90 = sm_90 SASS + compute_90 PTX: runs on H100/H200 and JITs forward to newer GPUs.
        if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
            set(CMAKE_CUDA_ARCHITECTURES 90)
        endif()
        enable_language(CUDA)
        set(CMAKE_CUDA_STANDARD 17)
        set(GANTRY_HAVE_CUDA ON)
        set(GANTRY_HAVE_NCCL ON)
        get_filename_component(_nccl_libdir "${GANTRY_NCCL_LIB}" DIRECTORY)
        get_filename_component(_cuda_libdir "${GANTRY_CUBLASLT_LIB}" DIRECTORY)
        add_library(gantry::nccl SHARED IMPORTED)
        set_target_properties(gantry::nccl PROPERTIES IMPORTED_LOCATION "${GANTRY_NCCL_LIB}"
            INTERFACE_INCLUDE_DIRECTORIES "${GANTRY_NCCL_INCLUDE}")
        add_library(gantry::cublaslt SHARED IMPORTED)
        set_target_properties(gantry::cublaslt PROPERTIES IMPORTED_LOCATION "${GANTRY_CUBLASLT_LIB}")
        add_library(gantry::cublas SHARED IMPORTED)
        set_target_properties(gantry::cublas PROPERTIES IMPORTED_LOCATION "${GANTRY_CUBLAS_LIB}")
        # Binaries find the wheel's libraries without LD_LIBRARY_PATH; a real GPU node's driver
        # (libcuda.so) still comes from the system.
        list(APPEND CMAKE_BUILD_RPATH "${_nccl_libdir}" "${_cuda_libdir}")
        # cuDNN's fused attention (kernels/attention_cudnn.cpp): the frontend's headers and
        # cudnn.h / nvrtc.h for its types, unpacked by `hack/install-deps.sh --cuda`, or
        # elsewhere (-DGANTRY_CUDNN_INCLUDE=dir;dir). cuDNN itself is opened at run time.
        set(GANTRY_CUDNN_INCLUDE "" CACHE STRING "Folders holding cudnn_frontend.h, cudnn.h, nvrtc.h")
        set(_cudnn_cache
            "${_cache}/cudnn-${GANTRY_PIN_CUDNN_VERSION}-fe-${GANTRY_PIN_CUDNN_FRONTEND_VERSION}/include")
        set(_cudnn_hints ${GANTRY_CUDNN_INCLUDE} "${_cudnn_cache}" "${_cuda_root}/include"
            /usr/include /usr/include/x86_64-linux-gnu)
        set(GANTRY_CUDNN_FE_INCLUDES)
        set(GANTRY_HAVE_CUDNN_FE ON)
        foreach(_h cudnn_frontend.h cudnn.h nvrtc.h)
            find_path(_cudnn_dir ${_h} HINTS ${_cudnn_hints} NO_CACHE NO_DEFAULT_PATH)
            if(_cudnn_dir)
                list(APPEND GANTRY_CUDNN_FE_INCLUDES "${_cudnn_dir}")
            else()
                set(GANTRY_HAVE_CUDNN_FE OFF)
                message(STATUS "  ${_h} not found: cuDNN's attention left out of the autotune "
                               "(hack/install-deps.sh --cuda fetches the headers)")
            endif()
            unset(_cudnn_dir)
        endforeach()
        list(REMOVE_DUPLICATES GANTRY_CUDNN_FE_INCLUDES)
        # cuDNN's and NVRTC's libraries beside them (install-deps), for attention_cudnn_aot_test
        get_filename_component(_cudnn_lib "${_cudnn_cache}/../lib" ABSOLUTE)
        set(GANTRY_CUDNN_AOT_LIBDIR "")
        if(GANTRY_HAVE_CUDNN_FE AND EXISTS "${_cudnn_lib}/libcudnn.so.9"
           AND EXISTS "${_cudnn_lib}/libnvrtc.so.13")
            set(GANTRY_CUDNN_AOT_LIBDIR "${_cudnn_lib}")
        endif()
        find_library(GANTRY_CUDART_STATIC cudart_static
            HINTS "${_cuda_root}/lib" "${_cuda_root}/lib64" NO_CACHE)
    elseif(GANTRY_CUDA STREQUAL "ON")
        message(FATAL_ERROR "GANTRY_CUDA=ON but the CUDA toolkit, cuBLASLt or NCCL was not found "
            "(nvcc: '${GANTRY_NVCC}', nccl.h: '${GANTRY_NCCL_INCLUDE}', libnccl: '${GANTRY_NCCL_LIB}', "
            "libcublasLt: '${GANTRY_CUBLASLT_LIB}'). Run `hack/install-deps.sh --cuda` to unpack the "
            "pinned wheels into ${_wheel_root}/.., or pass -DGANTRY_CUDA_ROOT=/path/to/cuda.")
    endif()
endif()
