# Tests of the install artefacts (issue 9): chart, plain manifests, images. include()d from the
# top-level CMakeLists.txt after add_subdirectory(operator) (it needs the gantry-operator target).
#   install  hack/verify.sh (sync check, helm lint, render checks); images/images_test.sh
#   api      against a real kube-apiserver: GANTRY_TEST_KUBECONFIG (else skipped, exit 77)
get_filename_component(GANTRY_INSTALL_ROOT "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
add_test(NAME install_verify COMMAND bash ${GANTRY_INSTALL_ROOT}/hack/verify.sh)
set_tests_properties(install_verify PROPERTIES LABELS install SKIP_RETURN_CODE 77 TIMEOUT 120)

# Images are made from optimised builds; under ASan the binaries need the sanitizer runtime and
# /proc, which the chroot check does not give them.
if(NOT CMAKE_BUILD_TYPE STREQUAL "Asan" AND TARGET gantry-operator AND TARGET gantry-worker
   AND TARGET gantry-run)
    add_test(NAME install_images_test
             COMMAND bash ${GANTRY_INSTALL_ROOT}/images/images_test.sh $<TARGET_FILE_DIR:gantry-operator>/..)
    set_tests_properties(install_images_test PROPERTIES LABELS install SKIP_RETURN_CODE 77
                         TIMEOUT 180)
    # The operator image run as its pod would (uid 65532, read-only root, in-cluster config).
    add_test(NAME chart_image_api_test
             COMMAND bash ${GANTRY_INSTALL_ROOT}/charts/gantry/tests/image_api_test.sh
                     $<TARGET_FILE_DIR:gantry-operator>/..)
    set_tests_properties(chart_image_api_test PROPERTIES LABELS api SKIP_RETURN_CODE 77
                         TIMEOUT 300)
endif()

add_test(NAME chart_install_api_test
         COMMAND bash ${GANTRY_INSTALL_ROOT}/charts/gantry/tests/install_api_test.sh)
set_tests_properties(chart_install_api_test PROPERTIES LABELS api SKIP_RETURN_CODE 77 TIMEOUT 300)
if(TARGET gantry-operator)
    add_test(NAME chart_rbac_api_test
             COMMAND bash ${GANTRY_INSTALL_ROOT}/charts/gantry/tests/rbac_api_test.sh
                     $<TARGET_FILE:gantry-operator>)
    set_tests_properties(chart_rbac_api_test PROPERTIES LABELS api SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

# The chart on a cluster whose pods run (hack/cluster.sh up --tier full): images imported, the
# operator pod Ready, uninstall clean. GANTRY_TEST_FULL_KUBECONFIG (else skipped, exit 77).
if(NOT CMAKE_BUILD_TYPE STREQUAL "Asan" AND TARGET gantry-operator AND TARGET gantry-worker
   AND TARGET gantry-run)
    add_test(NAME chart_cluster_test
             COMMAND bash ${GANTRY_INSTALL_ROOT}/charts/gantry/tests/cluster_test.sh
                     $<TARGET_FILE_DIR:gantry-operator>/..)
    set_tests_properties(chart_cluster_test PROPERTIES LABELS full SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
