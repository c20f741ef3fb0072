// Placeholder until this subcommand lands; it says so instead of pretending to work.
#include "commands.h"
#include "core/error.h"

namespace ts::cli {
int cmd_bench(int, char**) { TS_FAIL("'bench' is not implemented yet"); }
}  // namespace ts::cli
