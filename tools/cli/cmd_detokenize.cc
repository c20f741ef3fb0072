// Placeholder until this subcommand lands; it says so instead of pretending to work.
#include "commands.h"
#include "core/error.h"

namespace ts::cli {
int cmd_detokenize(int, char**) { TS_FAIL("'detokenize' is not implemented yet"); }
}  // namespace ts::cli
