# The thread pool's tests again under ThreadSanitizer: its tasks are claimed lock-free, and a data race there would
# corrupt results without failing the plain run. Builds in ~5 s. (Not with TS_SANITIZE: ASan and TSan exclude
# each other.) Kernels whose address-space randomisation TSan cannot work with make it stop at start-up with
# "unexpected memory mapping": reported as skipped, not passed.
if(NOT TS_SANITIZE)
  add_executable(test_core_tsan ${CMAKE_CURRENT_SOURCE_DIR}/tests/core/thread_pool_test.cc
                                ${CMAKE_CURRENT_SOURCE_DIR}/src/core/thread_pool.cc)
  target_include_directories(test_core_tsan PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_options(test_core_tsan PRIVATE -fsanitize=thread -O1 -g)
  target_link_options(test_core_tsan PRIVATE -fsanitize=thread)
  target_link_libraries(test_core_tsan PRIVATE GTest::gtest_main Threads::Threads)
  add_test(NAME core.thread_pool_tsan COMMAND test_core_tsan)
  set_tests_properties(core.thread_pool_tsan PROPERTIES LABELS core ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1"
                       SKIP_REGULAR_EXPRESSION "unexpected memory mapping")
endif()
