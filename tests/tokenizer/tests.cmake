# Extra tokenizer tests: the CLI end to end (tokenize, detokenize, chat-format) against the committed fixtures.
add_test(NAME tokenizer.cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/tokenizer/cli_test.sh $<TARGET_FILE:treespark>
                 ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(tokenizer.cli PROPERTIES LABELS "tokenizer;cli" TIMEOUT 300)
# gguf_tokenizer_test.cc builds tokenizers from GGUF metadata (io/gguf_tokenizer.h).
target_link_libraries(test_tokenizer PRIVATE ts_io)
