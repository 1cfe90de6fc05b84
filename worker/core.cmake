# Core of gantry-worker: model, optimiser, training loop, configuration, the binary.
# (Included from worker/CMakeLists.txt; paths are relative to worker/.)
add_library(gantry_core STATIC
    ${CMAKE_CURRENT_SOURCE_DIR}/model.c
    ${CMAKE_CURRENT_SOURCE_DIR}/optim.c)
target_include_directories(gantry_core PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_core PUBLIC gantry_kernels gantry_common m)

gantry_test(model_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_test.c LIBS gantry_core)
set_tests_properties(model_test PROPERTIES
    ENVIRONMENT "GANTRY_TESTDATA=${CMAKE_CURRENT_SOURCE_DIR}/testdata")
