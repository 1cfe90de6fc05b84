# Data and evaluation: tokenizer, vocab, JSONL/TSV readers, metrics (worker/text|vocab|dataset|eval).
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)

add_library(gantry_data STATIC
    ${CMAKE_CURRENT_LIST_DIR}/text.c
    ${CMAKE_CURRENT_LIST_DIR}/vocab.c
    ${CMAKE_CURRENT_LIST_DIR}/dataset.c
    ${CMAKE_CURRENT_LIST_DIR}/eval.c)
target_include_directories(gantry_data PUBLIC "${CMAKE_CURRENT_LIST_DIR}/..")
target_link_libraries(gantry_data PUBLIC gantry_common PkgConfig::JANSSON m)

# Unit tests; fixtures live in worker/testdata.
foreach(t text vocab dataset eval)
    if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${t}_test.c)
        gantry_test(${t}_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}_test.c LIBS gantry_data)
        target_compile_definitions(${t}_test PRIVATE GANTRY_TESTDATA="${CMAKE_CURRENT_LIST_DIR}/testdata")
    endif()
endforeach()
