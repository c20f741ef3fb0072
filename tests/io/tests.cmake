# Extra io tests: the safetensors header and GGUF fuzzers, built by their script with clang++-14 and libFuzzer
# (~20 s run each).
add_test(NAME io.fuzz_safetensors
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/io/fuzz/run_fuzz.sh ${CMAKE_CURRENT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR} 20)
set_tests_properties(io.fuzz_safetensors PROPERTIES LABELS "io;fuzz" TIMEOUT 900)
# The GGUF reader's fuzzer, from the gguf-py fixtures (same script, target gguf).
add_test(NAME io.fuzz_gguf
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/io/fuzz/run_fuzz.sh ${CMAKE_CURRENT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR} 20 gguf)
set_tests_properties(io.fuzz_gguf PROPERTIES LABELS "io;fuzz" TIMEOUT 900)
