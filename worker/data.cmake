# Data and evaluation: tokenizer, vocab, JSONL/TSV readers, metrics (worker/text|vocab|dataset|eval).
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)

add_library(gantry_data STATIC
    ${CMAKE_CURRENT_LIST_DIR}/text.c
    ${CMAKE_CURRENT_LIST_DIR}/vocab.c
    ${CMAKE_CURRENT_LIST_DIR}/dataset.c
    ${CMAKE_CURRENT_LIST_DIR}/eval.c)
target_include_directories(gantry_data PUBLIC "${CMAKE_CURRENT_LIST_DIR}/..")
target_link_libraries(gantry_data PUBLIC gantry_common PkgConfig::JANSSON)
