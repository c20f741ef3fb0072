# Command-line behaviour end to end on tiny random models made by the test (shell scripts; python3 reads the JSON).
add_test(NAME cli.generate_theta
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/generate_theta_test.sh $<TARGET_FILE:treespark>)
set_tests_properties(cli.generate_theta PROPERTIES LABELS "cli" TIMEOUT 300)
add_test(NAME cli.vnni_off
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/vnni_off_test.sh $<TARGET_FILE:treespark>)
set_tests_properties(cli.vnni_off PROPERTIES LABELS "cli" TIMEOUT 300)
add_test(NAME cli.weights_streamed
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/weights_streamed_test.sh $<TARGET_FILE:treespark>)
set_tests_properties(cli.weights_streamed PROPERTIES LABELS "cli" TIMEOUT 300)
