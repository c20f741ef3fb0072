// Placeholder until this subcommand lands; it says so instead of pretending to work.
#include "commands.h"
#include "core/error.h"

namespace ts::cli {
int cmd_chat_format(int, char**) { TS_FAIL("'chat_format' is not implemented yet"); }
}  // namespace ts::cli
