// `treespark bench <name>`: each benchmark parses its own flags; argv[0] is the benchmark's name.
#pragma once

namespace ts::bench {

int bench_forward(int argc, char** argv);   // bench/bench_forward.cc: L(1,k) cost curve of the target forward
int bench_tokenize(int argc, char** argv);  // bench/bench_tokenize.cc: encode throughput
int bench_spec(int argc, char** argv);      // bench/bench_spec.cc: none / chain / trees / TreeSpark
int bench_serve(int argc, char** argv);     // bench/bench_serve.cc: Poisson load on a live server (+ simulate)
int bench_engine(int argc, char** argv);    // bench/bench_engine.cc: batched engine throughput by concurrency
int bench_round(int argc, char** argv);     // bench/bench_round.cc: one round's phases (draft, tree, target, walk)
int bench_prefix(int argc, char** argv);    // bench/bench_prefix.cc: the prefix cache on and off
int bench_load(int argc, char** argv);      // bench/bench_load.cc: files to first token, models side by side

}  // namespace ts::bench
