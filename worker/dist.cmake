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
    ${CMAKE_CURRENT_LIST_DIR}/sampler.c)
target_include_directories(gantry_dist PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_dist PUBLIC gantry_common OpenSSL::Crypto PkgConfig::GANTRY_JANSSON
                      Threads::Threads m)

gantry_test(store_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/store_test.c LIBS gantry_dist)
gantry_test(coll_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/coll_test.c LIBS gantry_dist)
gantry_test(sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.c LIBS gantry_dist)

# NCCL backend: compiled only with CUDA; without it coll_nccl.h provides a stub.
if(GANTRY_HAVE_NCCL)
    target_sources(gantry_dist PRIVATE ${CMAKE_CURRENT_LIST_DIR}/coll_nccl.cu)
    target_compile_definitions(gantry_dist PUBLIC GANTRY_HAVE_NCCL=1)
    target_link_libraries(gantry_dist PUBLIC gantry::nccl)
    gantry_test(coll_nccl_gpu_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/coll_nccl_gpu_test.cu
                LIBS gantry_dist LABELS gpu)
endif()
