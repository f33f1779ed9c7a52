// Prints wire_types() (the JSON Schema of every reply, picture header and
// push message) for web/scripts/wire_types.mjs, which turns it into the web
// UI's generated TypeScript types (web/src/api/wire.gen.ts) at build time.
// Built from wire_types.cpp alone (no torch), before the web UI the library
// embeds.
#include <iostream>

#include "server/controller/wire_types.h"

int main() {
  std::cout << nansense::server::wire_types().dump(2) << "\n";
  return 0;
}
