#include "core/error.h"

#include <cstring>

namespace ts {

void throw_error(const char* file, int line, const std::string& message) {
  // Keep only the path below src/ so messages stay short and stable across checkouts.
  const char* shown = std::strstr(file, "src/");
  throw Error(cat(message, " [", shown ? shown : file, ":", line, "]"));
}

}  // namespace ts
