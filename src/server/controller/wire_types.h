// The JSON shape of every reply, picture header and push message, declared
// once as JSON Schema definitions. Nothing at run time depends on them. The
// web UI's TypeScript types are generated from them at build time
// (print_wire_types.cpp, web/scripts/wire_types.mjs); the integration tests
// check the server's real replies against them (tests/integration/
// wire_check.h), and tests/wire/check_types.sh holds the page's per-command
// arguments and replies to them and the command table, so a renamed key
// fails a build or a test instead of silently breaking the page.
#pragma once

#include "common/json_values.h"

namespace nansense::server {

using common::json;

// {"Position": {...}, "Status": {...}, ...}: one JSON Schema per named type;
// references between them are {"$ref": "#/$defs/Name"}.
const json& wire_types();

// The whole contract as one document: {"commands": [{name, rest,
// old_routes, mcp, input_schema, reply}], "old_routes_until": the release
// after which old routes go, "$defs": wire_types()}.
json wire_description();

}  // namespace nansense::server
