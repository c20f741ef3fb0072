# Extra io tests: the safetensors header fuzzer, built by its script with clang++-14 and libFuzzer (~20 s run).
add_test(NAME io.fuzz_safetensors
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/io/fuzz/run_fuzz.sh ${CMAKE_CURRENT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR} 20)
set_tests_properties(io.fuzz_safetensors PROPERTIES LABELS "io;fuzz" TIMEOUT 900)
