# bench/fasttext_data: writes the SpamAssassin split in fastText's format with gantry-worker's own
# reader and tokenizer, for bench/fasttext.sh (time to accuracy vs Debian's fasttext). Not part of
# ctest. Include from the top-level CMakeLists.txt after the worker (it needs gantry_data):
#   include(bench/fasttext.cmake OPTIONAL)
add_executable(fasttext_data ${CMAKE_CURRENT_LIST_DIR}/fasttext_data.c)
target_include_directories(fasttext_data PRIVATE "${PROJECT_SOURCE_DIR}")
target_link_libraries(fasttext_data PRIVATE gantry_data)
