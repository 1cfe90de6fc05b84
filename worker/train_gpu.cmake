# GPU test of the training loop on the device (worker/train_gpu_test.c): label gpu, exits 77 (skipped)
# without a device. Included from core.cmake when CUDA is on; hack/gpu-check.sh carries the binary
# built here to the GPU machine (it needs the worker's libraries, which bench/gpu_check lacks).
gantry_test(train_gpu_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu_test.c
            ${CMAKE_CURRENT_SOURCE_DIR}/train_testdata.c LIBS gantry_core LABELS gpu)
set_tests_properties(train_gpu_test PROPERTIES ENVIRONMENT_MODIFICATION
    "OMP_WAIT_POLICY=set:passive")

# The loop's device pieces: bf16 conversion and mixed-precision kernels against the CPU, and the
# overlapped all-reduce through a 1-rank NCCL communicator (worker/train_gpu_device_test.cu).
if(GANTRY_HAVE_NCCL)
    gantry_test(train_gpu_device_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu_device_test.cu
                LIBS gantry_core gantry_dist gantry_kernels_cuda gantry_kernels LABELS gpu)
endif()

# Two ranks on two GPUs over NCCL through gantry-run (skipped below two GPUs).
add_test(NAME train_gpu_nccl_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu_nccl_test.sh
                 $<TARGET_FILE:gantry-worker> ${CMAKE_CURRENT_SOURCE_DIR}/testdata
                 $<TARGET_FILE:gantry-run>)
set_tests_properties(train_gpu_nccl_test PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 120)
# Two ranks on two GPUs: one killed (-9), the other exits retryable through NCCL's async error,
# the rerun resumes bit-identical to an uninterrupted run (skipped below two GPUs).
add_test(NAME train_gpu_resume_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_gpu_resume_test.sh
                 $<TARGET_FILE:gantry-worker> ${CMAKE_CURRENT_SOURCE_DIR}/testdata)
set_tests_properties(train_gpu_resume_test PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 300)
