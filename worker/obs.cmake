# Observability: the /metrics + /progress HTTP server (worker/metrics), TensorBoard event files
# (worker/tbevent) and the training loop's handle on both (worker/obs). Core links gantry_obs
# into gantry-worker; the metrics and tags are documented in docs/metrics.md.
pkg_check_modules(OBS_ISAL REQUIRED IMPORTED_TARGET libisal)          # CRC32C (crc32_iscsi)
pkg_check_modules(OBS_MHD REQUIRED IMPORTED_TARGET libmicrohttpd)     # the HTTP server
pkg_check_modules(OBS_CURL REQUIRED IMPORTED_TARGET libcurl)          # tests only: a real HTTP client
pkg_check_modules(OBS_JANSSON REQUIRED IMPORTED_TARGET jansson)  # tests only: parse /progress

add_library(gantry_obs STATIC
    ${CMAKE_CURRENT_SOURCE_DIR}/metrics.c
    ${CMAKE_CURRENT_SOURCE_DIR}/obs.c
    ${CMAKE_CURRENT_SOURCE_DIR}/tbevent.c)
target_include_directories(gantry_obs PUBLIC "${PROJECT_SOURCE_DIR}")
target_link_libraries(gantry_obs PUBLIC gantry_common gantry_httpd PkgConfig::OBS_ISAL PkgConfig::OBS_MHD Threads::Threads m)

gantry_test(tbevent_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tbevent_test.c LIBS gantry_obs)
gantry_test(metrics_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/metrics_test.c LIBS gantry_obs PkgConfig::OBS_JANSSON)
gantry_test(obs_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/obs_test.c LIBS gantry_obs PkgConfig::OBS_JANSSON)
gantry_test(metrics_http_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/metrics_http_test.c
    LIBS gantry_obs PkgConfig::OBS_CURL PkgConfig::OBS_JANSSON)

# The upstream readers: TensorBoard's EventAccumulator and prometheus_client's parser, run by
# hack/obs_check.py in hack/pyenv.sh's venv (built on first use: allow for the wheels' download).
gantry_test(obs_py_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/obs_py_test.c LIBS gantry_obs
    LABELS python)
target_compile_definitions(obs_py_test PRIVATE OBS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_tests_properties(obs_py_test PROPERTIES TIMEOUT 1800)

# The example Grafana dashboard (docs/grafana/gantry.json): layout, variables, PromQL balance (and
# promtool when on PATH); every metric it queries documented in docs/metrics.md and exported:
# worker names by a running gantry-worker's /metrics, operator names by operator/ops.c (the API
# tier test e2e/api/progress_real_test.sh checks them against a running operator's /metrics).
add_test(NAME grafana_dashboard_test
         COMMAND python3 ${PROJECT_SOURCE_DIR}/docs/grafana/check_dashboard.py
                 ${PROJECT_SOURCE_DIR}/docs/grafana/gantry.json ${PROJECT_SOURCE_DIR}/docs/metrics.md
                 --worker $<TARGET_FILE:gantry-worker> --data ${CMAKE_CURRENT_SOURCE_DIR}/testdata/tiny.jsonl
                 --source ${PROJECT_SOURCE_DIR}/operator/ops.c --source ${CMAKE_CURRENT_SOURCE_DIR}/metrics.c
                 --late gantry_train_eval)
set_tests_properties(grafana_dashboard_test PROPERTIES TIMEOUT 120)

# API tier (label api; skipped with 77 unless GANTRY_TEST_KUBECONFIG is set, see hack/test-api.sh):
# real gantry-worker processes play the pods of gantry-operator's TrainingJobs
# (e2e/api/kubelet.py): final = a short job's status.progress from rank 0's termination message;
# stall = PROGRESS advances, SIGSTOP of a rank -> Stalled + gang restart (docs/metrics.md).
foreach(group final stall)
    add_test(NAME progress_real_api_${group}_test
             COMMAND bash ${PROJECT_SOURCE_DIR}/e2e/api/progress_real_test.sh
                     $<TARGET_FILE:gantry-operator> $<TARGET_FILE:gantry-worker> ${group})
    set_tests_properties(progress_real_api_${group}_test PROPERTIES
                         LABELS api SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
