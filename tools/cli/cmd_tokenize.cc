// Placeholder until this subcommand lands; it says so instead of pretending to work.
#include "commands.h"
#include "core/error.h"

namespace ts::cli {
int cmd_tokenize(int, char**) { TS_FAIL("'tokenize' is not implemented yet"); }
}  // namespace ts::cli
