# The CUDA twins of the CPU kernels (kernels/gpu.h) and their GPU tests. Included at the end of
# kernels/CMakeLists.txt, and by bench/gpu_check/CMakeLists.txt (the stand-alone build that
# hack/gpu-check.sh runs on a GPU machine without the operator's dependencies).
# Needs: gantry_kernels (CPU reference), gantry_kernels_cuda (gelu.cu), gantry_core (optim.c),
# gantry_test(), and the gantry::cublas / gantry::cublaslt targets from cmake/cuda.cmake.
if(NOT GANTRY_HAVE_CUDA)
    return()
endif()

set(_gpu_dir ${CMAKE_CURRENT_LIST_DIR})
foreach(op gpu_runtime embed layernorm matmul attention tune pool crossentropy adamw)
    if(EXISTS ${_gpu_dir}/${op}.cu)
        target_sources(gantry_kernels_cuda PRIVATE ${_gpu_dir}/${op}.cu)
    endif()
endforeach()
target_link_libraries(gantry_kernels_cuda PUBLIC gantry::cublas gantry::cublaslt)
# cuDNN's fused attention, one more autotune variant (attention_cudnn.cpp): host C++ on the cuDNN
# frontend's headers, cuDNN itself opened at run time (nothing links against it). Without the
# headers the file builds as "not in this build".
target_sources(gantry_kernels_cuda PRIVATE ${_gpu_dir}/attention_cudnn.cpp)
target_include_directories(gantry_kernels_cuda PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES}>")
if(GANTRY_HAVE_CUDNN_FE)
    target_compile_definitions(gantry_kernels_cuda PRIVATE
        "$<$<COMPILE_LANGUAGE:CXX>:GANTRY_WITH_CUDNN;NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING;CUDNN_FRONTEND_SKIP_JSON_LIB>")
    target_include_directories(gantry_kernels_cuda SYSTEM PRIVATE
        "$<$<COMPILE_LANGUAGE:CXX>:${GANTRY_CUDNN_FE_INCLUDES}>")
    target_link_libraries(gantry_kernels_cuda PUBLIC ${CMAKE_DL_LIBS})
endif()
# Does cuDNN accept those graphs on Hopper at the shapes we train? Its plans for an H200, built
# without a device by the real cuDNN and NVRTC (attention_cudnn_aot_test.cpp; the two stand-ins
# for a driver and a device in cudnn_aot/), where install-deps has unpacked them.
if(GANTRY_HAVE_CUDNN_FE AND GANTRY_CUDNN_AOT_LIBDIR AND GANTRY_CUDART_STATIC)
    add_library(gantry_aot_nodriver SHARED ${_gpu_dir}/cudnn_aot/nodriver.c)
    add_library(gantry_aot_sm90 SHARED ${_gpu_dir}/cudnn_aot/sm90_runtime.c)
    set_target_properties(gantry_aot_nodriver PROPERTIES OUTPUT_NAME cuda SOVERSION 1
        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/cudnn_aot)
    set_target_properties(gantry_aot_sm90 PROPERTIES
        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/cudnn_aot)
    # (C entry points named as CUDA's, declared by no header of ours)
    target_compile_options(gantry_aot_nodriver PRIVATE -Wno-missing-prototypes)
    target_compile_options(gantry_aot_sm90 PRIVATE -Wno-missing-prototypes)
    get_filename_component(_cublaslt_dir "${GANTRY_CUBLASLT_LIB}" DIRECTORY) # cuDNN opens it
    add_executable(attention_cudnn_aot_test ${_gpu_dir}/attention_cudnn_aot_test.cpp)
    target_include_directories(attention_cudnn_aot_test PRIVATE "${PROJECT_SOURCE_DIR}"
        ${CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES})
    target_include_directories(attention_cudnn_aot_test SYSTEM PRIVATE ${GANTRY_CUDNN_FE_INCLUDES})
    target_compile_definitions(attention_cudnn_aot_test PRIVATE GANTRY_WITH_CUDNN
        NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING CUDNN_FRONTEND_SKIP_JSON_LIB)
    target_link_libraries(attention_cudnn_aot_test PRIVATE ${GANTRY_CUDART_STATIC}
        ${CMAKE_DL_LIBS} pthread rt)
    add_dependencies(attention_cudnn_aot_test gantry_aot_nodriver gantry_aot_sm90)
    add_test(NAME attention_cudnn_aot_test COMMAND attention_cudnn_aot_test)
    set_tests_properties(attention_cudnn_aot_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
        ENVIRONMENT "GANTRY_CUDNN_LIB=${GANTRY_CUDNN_AOT_LIBDIR}/libcudnn.so.9;CUDNN_FRONTEND_CUDART_LIB_NAME=$<TARGET_FILE:gantry_aot_sm90>;LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/cudnn_aot:${GANTRY_CUDNN_AOT_LIBDIR}:${_cublaslt_dir}")
endif()
# Built for sm_90 (the default, 90): its SASS as sm_90a instead, which every H100/H200 runs and
# which has wgmma (kernels/tensorcore.h; attention_forward_fused_bf16_wgmma), beside the same
# compute_90 PTX for newer GPUs, where the wgmma code is left out and its callers take the
# mma.sync kernels (attention_fused_wgmma_available). Other architectures as asked.
if("${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "90")
    set_target_properties(gantry_kernels_cuda PROPERTIES CUDA_ARCHITECTURES "90a-real;90-virtual")
endif()
# Device code: warnings as errors too (nvcc's own, and the host compiler's through -Xcompiler).
# The stand-alone GPU-machine build turns -Werror off: another host compiler may warn differently,
# and a warning must not cost a device run.
if(NOT DEFINED GANTRY_CUDA_WERROR)
    set(GANTRY_CUDA_WERROR ON)
endif()
if(GANTRY_CUDA_WERROR)
    target_compile_options(gantry_kernels_cuda PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter>)
else()
    target_compile_options(gantry_kernels_cuda PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
endif()

# GPU tests: label gpu, exit 77 (skipped) without a device. Each compares the CUDA op with the CPU
# specification on random inputs (kernels/gpu_testutil.h).
foreach(t runtime tensorcore embed layernorm matmul attention pool crossentropy adamw shapes)
    if(EXISTS ${_gpu_dir}/${t}_gpu_test.cu)
        gantry_test(${t}_gpu_test SOURCES ${_gpu_dir}/${t}_gpu_test.cu
                    LIBS gantry_kernels_cuda gantry_kernels gantry_core LABELS gpu)
    endif()
endforeach()

# tensorcore_gpu_test also checks wgmma, which only sm_90a code has (H100, H200): its own SASS is
# sm_90a, with compute_90 PTX beside it as everywhere (on another GPU its wgmma case is skipped).
if(TARGET tensorcore_gpu_test AND "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "90")
    set_target_properties(tensorcore_gpu_test PROPERTIES CUDA_ARCHITECTURES "90a-real;90-virtual")
endif()

# What ptxas makes of the wgmma attention (no GPU needed, so in every CUDA build's unit tests):
# no product serialized or fenced by ptxas itself, no tc_ kernel spilling.
if("${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "90")
    add_test(NAME wgmma_ptxas_test
             COMMAND bash ${_gpu_dir}/wgmma_ptxas_test.sh ${CMAKE_CUDA_COMPILER} ${_gpu_dir}/..)
    set_tests_properties(wgmma_ptxas_test PROPERTIES TIMEOUT 300)
endif()

# worker/model_gpu.cu: the Transformer's device state, forward, backward and step on these kernels,
# for the training loop (worker/train_gpu.c, in gantry_core) and bench/gpu_bench. Its own library
# so that the stand-alone build (bench/gpu_check) has it without the worker's other libraries.
if(EXISTS ${_gpu_dir}/../worker/model_gpu.cu)
    add_library(gantry_model_gpu STATIC ${_gpu_dir}/../worker/model_gpu.cu)
    target_include_directories(gantry_model_gpu PUBLIC "${PROJECT_SOURCE_DIR}")
    target_link_libraries(gantry_model_gpu PUBLIC gantry_kernels_cuda gantry_core)
    set_target_properties(gantry_model_gpu PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    if(GANTRY_CUDA_WERROR)
        target_compile_options(gantry_model_gpu PRIVATE
            $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter>)
    else()
        target_compile_options(gantry_model_gpu PRIVATE
            $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
    endif()
endif()

# The GPU training benchmark (bench/gpu_bench.cu), when present.
include(${_gpu_dir}/../bench/gpu_bench.cmake OPTIONAL)
