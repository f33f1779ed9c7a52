// The JSON shape of every reply, picture header and push message, declared
// once as JSON Schema definitions. Nothing at run time depends on them; they
// are the contract the tests hold both sides to: the integration tests check
// the server's real replies against them (tests/integration/wire_test.cpp),
// and tests/wire/check_types.sh checks the page's types (web/src/api/types.ts)
// against them and the command table, so a renamed key fails a test instead
// of silently breaking the page.
#pragma once

#include "server/controller/json_views.h"

namespace nansense::server {

// {"Position": {...}, "Status": {...}, ...}: one JSON Schema per named type;
// references between them are {"$ref": "#/$defs/Name"}.
const json& wire_types();

// The whole contract as one document: {"commands": [{name, rest, mcp,
// input_schema, reply}], "$defs": wire_types()}.
json wire_description();

}  // namespace nansense::server
