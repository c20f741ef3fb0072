// Placeholder until this benchmark lands; it says so instead of pretending to work.
#include "benches.h"
#include "core/error.h"

namespace ts::bench {
int bench_spec(int, char**) { TS_FAIL("'bench spec' is not implemented yet"); }
}  // namespace ts::bench
