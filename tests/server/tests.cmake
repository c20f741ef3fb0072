# Extra server tests: `treespark serve` as a subprocess on the shipped pair (health, SIGTERM drain).
add_test(NAME server.drain
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/server/drain_test.sh $<TARGET_FILE:treespark>
                 ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(server.drain PROPERTIES LABELS "server;cli" TIMEOUT 300)
