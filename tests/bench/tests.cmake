# The benchmarks' command lines end to end on a tiny model (what they measure is not asserted: timings are not tests).
add_test(NAME bench.forward_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench/forward_cli_test.sh $<TARGET_FILE:treespark>)
set_tests_properties(bench.forward_cli PROPERTIES LABELS "bench;cli" TIMEOUT 300)
add_test(NAME bench.load_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench/load_cli_test.sh $<TARGET_FILE:treespark>
                 ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(bench.load_cli PROPERTIES LABELS "bench;cli" TIMEOUT 300)
add_test(NAME bench.engine_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench/engine_cli_test.sh $<TARGET_FILE:treespark>)
set_tests_properties(bench.engine_cli PROPERTIES LABELS "bench;cli" TIMEOUT 300)
