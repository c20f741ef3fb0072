# Kernel micro benchmarks (not tests: no timing assertions anywhere). Built with the test suite so they stay
# compiling; run by hand: build/<dir>/bench_linear [threads] [MiB of weights to cycle through].
add_executable(bench_linear ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_linear.cc)
target_link_libraries(bench_linear PRIVATE ts_kernels)
