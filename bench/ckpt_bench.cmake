# bench/ckpt_bench: checkpoint blocked time vs write time (bench/ckpt_bench.sh adds dd on the same
# disk and the verdict). Include from the top-level CMakeLists.txt after the worker (it needs
# gantry_dist):  include(bench/ckpt_bench.cmake)
add_executable(ckpt_bench ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.c)
target_include_directories(ckpt_bench PRIVATE "${PROJECT_SOURCE_DIR}")
target_link_libraries(ckpt_bench PRIVATE gantry_dist)
# Smoke test: two rounds of a tiny state write, time and verify (the rows must all be there).
add_test(NAME ckpt_bench_smoke
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.sh --bin $<TARGET_FILE:ckpt_bench>
                 --params 65536 --rounds 2 --check)
set_tests_properties(ckpt_bench_smoke PROPERTIES TIMEOUT 120 LABELS bench)
