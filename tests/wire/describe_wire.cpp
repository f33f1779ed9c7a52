// Prints the server's wire contract (src/server/wire_types.h): every command
// with its REST route, MCP exposure, argument schema and reply type, and the
// JSON Schema of every reply. check_types.mjs holds the page's types to it.
#include <iostream>

#include "server/controller/wire_types.h"

int main() {
  std::cout << nansense::server::wire_description().dump(2) << "\n";
  return 0;
}
