# Observability: the /metrics + /progress HTTP server (worker/metrics) and TensorBoard event files
# (worker/tbevent). Core links gantry_obs into gantry-worker; documented in docs/metrics.md.
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)          # CRC32C (crc32_iscsi)

add_library(gantry_obs STATIC
    ${CMAKE_CURRENT_SOURCE_DIR}/tbevent.c)
target_include_directories(gantry_obs PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_obs PUBLIC gantry_common PkgConfig::ISAL)

gantry_test(tbevent_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tbevent_test.c LIBS gantry_obs)
