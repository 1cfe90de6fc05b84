# Core of gantry-worker: model, optimiser, training loop, configuration, the binary.
# (Included from worker/CMakeLists.txt; paths are relative to worker/.)
add_library(gantry_core STATIC
    ${CMAKE_CURRENT_SOURCE_DIR}/model.c
    ${CMAKE_CURRENT_SOURCE_DIR}/optim.c
    ${CMAKE_CURRENT_SOURCE_DIR}/cfg.c)
target_include_directories(gantry_core PUBLIC "${PROJECT_SOURCE_DIR}")
pkg_check_modules(CORE_JANSSON REQUIRED IMPORTED_TARGET jansson)
target_link_libraries(gantry_core PUBLIC gantry_kernels gantry_common PkgConfig::CORE_JANSSON m)

gantry_test(model_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_test.c LIBS gantry_core)
set_tests_properties(model_test PROPERTIES
    ENVIRONMENT "GANTRY_TESTDATA=${CMAKE_CURRENT_SOURCE_DIR}/testdata")
gantry_test(cfg_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cfg_test.c LIBS gantry_core)
