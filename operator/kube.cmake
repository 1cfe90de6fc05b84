# operator/kube/: the Kubernetes API client (libcurl + OpenSSL, Jansson, libyaml) and the operator's
# error codes and logger. Static library gantry_kube; include as "operator/kube/kube.h".
pkg_check_modules(KUBE_DEPS REQUIRED IMPORTED_TARGET libcurl jansson yaml-0.1)
find_package(OpenSSL REQUIRED)

set(KUBE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/kube)
add_library(gantry_kube STATIC
    ${KUBE_DIR}/kube_err.c
    ${KUBE_DIR}/log.c
    ${KUBE_DIR}/kube_yaml.c
    ${KUBE_DIR}/kube_config.c
    ${KUBE_DIR}/kube.c
    ${KUBE_DIR}/strmap.c
    ${KUBE_DIR}/watch.c
    ${KUBE_DIR}/informer.c
    ${KUBE_DIR}/queue.c
    ${KUBE_DIR}/lease.c
    ${KUBE_DIR}/event.c
)
target_include_directories(gantry_kube PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_kube PUBLIC PkgConfig::KUBE_DEPS OpenSSL::SSL OpenSSL::Crypto
    Threads::Threads gantry_common)

gantry_test(kube_err_test SOURCES ${KUBE_DIR}/kube_err_test.c LIBS gantry_kube)
gantry_test(kube_log_test SOURCES ${KUBE_DIR}/log_test.c LIBS gantry_kube)
gantry_test(kube_config_test SOURCES ${KUBE_DIR}/kube_config_test.c LIBS gantry_kube)
target_compile_definitions(kube_config_test PRIVATE
    KUBE_TESTDATA="${PROJECT_SOURCE_DIR}/operator/testdata/kube")
# testsrv: a loopback HTTP/1.1 server for the client's unit tests.
add_library(gantry_kube_testsrv STATIC ${KUBE_DIR}/testsrv.c)
target_link_libraries(gantry_kube_testsrv PUBLIC gantry_kube)
gantry_test(kube_test SOURCES ${KUBE_DIR}/kube_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_watch_test SOURCES ${KUBE_DIR}/watch_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_queue_test SOURCES ${KUBE_DIR}/queue_test.c LIBS gantry_kube)
gantry_test(kube_informer_test SOURCES ${KUBE_DIR}/informer_test.c LIBS gantry_kube_testsrv)
gantry_test(kube_event_test SOURCES ${KUBE_DIR}/event_test.c LIBS gantry_kube_testsrv)
# Integration tests against the API tier (kube-apiserver + etcd); exit 77 without
# GANTRY_TEST_KUBECONFIG.
gantry_test(kube_api_test SOURCES ${KUBE_DIR}/kube_api_test.c LIBS gantry_kube LABELS api)
set_tests_properties(kube_api_test PROPERTIES TIMEOUT 180)
