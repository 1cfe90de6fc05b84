# bench/allreduce: Gantry's tcp all-reduce against Gloo and the raw TCP peak, on loopback.
# Not part of ctest; run bench/allreduce.sh BUILD_DIR. Include from the top-level CMakeLists.txt
# after the worker (it needs gantry_dist):  include(bench/allreduce.cmake)
add_executable(bench_allreduce ${CMAKE_CURRENT_LIST_DIR}/allreduce.c)
target_include_directories(bench_allreduce PRIVATE "${PROJECT_SOURCE_DIR}")
target_link_libraries(bench_allreduce PRIVATE gantry_dist)

# The Gloo peer (C++), when Debian's libgloo-dev is installed.
find_package(Gloo CONFIG QUIET)
if(Gloo_FOUND)
    enable_language(CXX)
    add_executable(bench_allreduce_gloo ${CMAKE_CURRENT_LIST_DIR}/allreduce_gloo.cc)
    target_link_libraries(bench_allreduce_gloo PRIVATE gloo Threads::Threads)
    target_include_directories(bench_allreduce_gloo PRIVATE "${PROJECT_SOURCE_DIR}")
    set_target_properties(bench_allreduce_gloo PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
    message(STATUS "  Gloo (bench)      : found, bench_allreduce_gloo built")
else()
    message(STATUS "  Gloo (bench)      : not found; `apt-get install libgloo-dev` for the "
                   "bench/allreduce baseline")
endif()
