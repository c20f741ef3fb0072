// `treespark bench forward|tokenize|spec|engine|round|serve|prefix|load [options]`
#include <cstdio>
#include <cstring>

#include "benches.h"
#include "commands.h"
#include "core/error.h"

namespace ts::cli {

int cmd_bench(int argc, char** argv) {
  struct Bench {
    const char* name;
    int (*run)(int, char**);
  };
  const Bench benches[] = {
      {"forward", ts::bench::bench_forward}, {"tokenize", ts::bench::bench_tokenize}, {"spec", ts::bench::bench_spec},
      {"engine", ts::bench::bench_engine}, {"round", ts::bench::bench_round}, {"serve", ts::bench::bench_serve},
      {"prefix", ts::bench::bench_prefix}, {"load", ts::bench::bench_load}};
  if (argc < 2) {
    std::fprintf(stderr, "usage: treespark bench forward|tokenize|spec|engine|round|serve|prefix|load [options]\n");
    return 2;
  }
  for (const auto& b : benches)
    if (std::strcmp(argv[1], b.name) == 0) return b.run(argc - 1, argv + 1);
  TS_FAIL("unknown benchmark '", argv[1], "' (forward, tokenize, spec, engine, round, serve, prefix, load)");
}

}  // namespace ts::cli
