# Extra server tests: `treespark serve` as a subprocess on the shipped pair (health, SIGTERM drain).
add_test(NAME server.drain
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/server/drain_test.sh $<TARGET_FILE:treespark>
                 ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(server.drain PROPERTIES LABELS "server;cli" TIMEOUT 300)
# The OpenAI request parser's fuzzer (libFuzzer, clang++-14; built and run by the io fuzz script, ~20 s).
add_test(NAME server.fuzz_request
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/io/fuzz/run_fuzz.sh ${CMAKE_CURRENT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR} 20 request)
set_tests_properties(server.fuzz_request PROPERTIES LABELS "server;fuzz" TIMEOUT 900)
# Seeded sampling reproduces across two server starts; unseeded samples differ and replay from their seed.
add_test(NAME server.seeded
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/server/seeded_test.sh $<TARGET_FILE:treespark>
                 ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(server.seeded PROPERTIES LABELS "server;cli" TIMEOUT 300)
# `serve --kv-events` read by a ZeroMQ subscriber: vLLM's framing and schema, stored blocks matching the prompts and
# answers, evictions under a small KV budget, the events' view of the cache matching cached_tokens and /metrics.
add_test(NAME server.kv_events_e2e
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/server/kv_events_e2e_test.sh $<TARGET_FILE:treespark>
                 ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(server.kv_events_e2e PROPERTIES LABELS "server;cli" TIMEOUT 300)
