// Placeholder until this subcommand lands; it says so instead of pretending to work.
#include "commands.h"
#include "core/error.h"

namespace ts::cli {
int cmd_generate(int, char**) { TS_FAIL("'generate' is not implemented yet"); }
}  // namespace ts::cli
