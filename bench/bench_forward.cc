// Placeholder until this benchmark lands; it says so instead of pretending to work.
#include "benches.h"
#include "core/error.h"

namespace ts::bench {
int bench_forward(int, char**) { TS_FAIL("'bench forward' is not implemented yet"); }
}  // namespace ts::bench
