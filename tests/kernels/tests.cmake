# Kernel micro benchmarks (not tests: no timing assertions anywhere). Built with the test suite so they stay
# compiling; run by hand: build/<dir>/bench_linear [threads] [MiB of weights to cycle through] [bf16/f32] [OUTxIN],
# build/<dir>/bench_attention [threads].
add_executable(bench_linear ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_linear.cc)
target_link_libraries(bench_linear PRIVATE ts_kernels)
add_executable(bench_attention ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_attention.cc)
target_link_libraries(bench_attention PRIVATE ts_kernels)
# K/V layouts for attention over a long history, QK and PV alone (AVX512-BF16 CPUs): build/<dir>/bench_qk_layouts
add_executable(bench_qk_layouts ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_qk_layouts.cc)
target_link_libraries(bench_qk_layouts PRIVATE ts_core)
# The avx2 and avx512 GEMM tiles alone (includes gemm-inl.h itself, so it links only ts_core): build/<dir>/bench_gemm_tiles
# [k pairs per call].
add_executable(bench_gemm_tiles ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_gemm_tiles.cc
                                ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_gemm_tiles_avx512.cc)
target_link_libraries(bench_gemm_tiles PRIVATE ts_core)
# The thread pool's hand-off beside the core-to-core round trip: build/<dir>/bench_pool [threads].
add_executable(bench_pool ${CMAKE_CURRENT_SOURCE_DIR}/bench/micro/bench_pool.cc)
target_link_libraries(bench_pool PRIVATE ts_core)
