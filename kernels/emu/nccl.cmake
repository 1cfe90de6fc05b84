# The emulated NCCL (nccl.cc, include/nccl.h): collectives between rank processes through POSIX
# shared memory, so the nccl backend (worker/coll_nccl.cu, unchanged) and its failure handling
# run in CI without a GPU. Included from emu.cmake: uses gantry_emu_sources, gantry_emu_target
# and gantry_emu_rt.
set(_emu_nccl ${CMAKE_CURRENT_LIST_DIR})
add_library(gantry_emu_nccl STATIC ${_emu_nccl}/nccl.cc)
gantry_emu_target(gantry_emu_nccl)
target_link_libraries(gantry_emu_nccl PUBLIC gantry_emu_rt Threads::Threads)

gantry_test(nccl_emu_test SOURCES ${_emu_nccl}/nccl_test.cc LIBS gantry_emu_nccl LABELS emu)
gantry_emu_target(nccl_emu_test)

# kernels/nccl_smoke_test.cu, unchanged (a one-rank ncclCommInitAll).
gantry_emu_sources(_nccl_smoke ${PROJECT_SOURCE_DIR}/kernels/nccl_smoke_test.cu)
gantry_test(nccl_smoke_emu_test SOURCES ${_nccl_smoke} LIBS gantry_emu_nccl LABELS emu)
gantry_emu_target(nccl_smoke_emu_test)

# The nccl backend (worker/coll_nccl.cu) on the emulated NCCL. In a build without CUDA it links
# gantry_dist (plain C there); in a CUDA build gantry_dist links the real NCCL, so the C parts of
# the distributed runtime the backend needs are compiled here instead.
gantry_emu_sources(_coll_nccl ${PROJECT_SOURCE_DIR}/worker/coll_nccl.cu)
if(GANTRY_HAVE_NCCL)
    find_package(OpenSSL REQUIRED COMPONENTS Crypto)
    add_library(gantry_emu_coll_nccl STATIC ${_coll_nccl}
        ${PROJECT_SOURCE_DIR}/worker/dist.c
        ${PROJECT_SOURCE_DIR}/worker/net.c
        ${PROJECT_SOURCE_DIR}/worker/store.c
        ${PROJECT_SOURCE_DIR}/worker/coll.c)
    target_link_libraries(gantry_emu_coll_nccl PUBLIC gantry_emu_nccl gantry_common
                          OpenSSL::Crypto Threads::Threads m)
else()
    add_library(gantry_emu_coll_nccl STATIC ${_coll_nccl})
    target_link_libraries(gantry_emu_coll_nccl PUBLIC gantry_emu_nccl gantry_dist)
endif()
gantry_emu_target(gantry_emu_coll_nccl)
target_compile_definitions(gantry_emu_coll_nccl PUBLIC GANTRY_HAVE_NCCL=1)

gantry_test(coll_nccl_emu_test SOURCES ${_emu_nccl}/coll_nccl_emu_test.c LIBS gantry_emu_coll_nccl
            LABELS emu)
gantry_emu_target(coll_nccl_emu_test)
gantry_emu_defer_test(coll_nccl_emu_test COMMAND coll_nccl_emu_test)
# worker/coll_nccl_gpu_test.cu, unchanged (world size 1).
gantry_emu_sources(_coll_nccl_gpu ${PROJECT_SOURCE_DIR}/worker/coll_nccl_gpu_test.cu)
gantry_test(coll_nccl_gpu_emu_test SOURCES ${_coll_nccl_gpu} LIBS gantry_emu_coll_nccl LABELS emu)
gantry_emu_target(coll_nccl_gpu_emu_test)

# The emulator's deferred mode (stream.cc, GANTRY_EMU_DEFER): each ordering mistake between
# streams or between a stream and the host gives a wrong result for some seed; right orderings
# are right for every seed. Turns deferral on itself, so it runs in every build.
gantry_emu_sources(_defer_test_cc ${_emu_nccl}/defer_test.cu)
gantry_test(emu_defer_test SOURCES ${_defer_test_cc} LIBS gantry_emu_nccl gantry_common
            LABELS emu)
gantry_emu_target(emu_defer_test)
