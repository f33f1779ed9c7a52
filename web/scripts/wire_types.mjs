// Writes the page's wire types (src/api/wire.gen.ts) from the server's
// declarations: the JSON Schema of every reply, picture header and push
// message that src/server/controller/wire_types.cpp declares, as printed by the build's
// nansense_wire_types program. The CMake build runs it before the web UI is
// built (cmake/embed_web.cmake); the file is not in git.
//   node web/scripts/wire_types.mjs PATH/TO/nansense_wire_types   (or a JSON file of its output)
// Rewrites the file only when its text changes.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { declaration } from './schema_ts.mjs';

const source = process.argv[2];
if (!source) {
  console.error('usage: node web/scripts/wire_types.mjs PATH/TO/nansense_wire_types (built by cmake --build build)');
  process.exit(2);
}
const text = source.endsWith('.json') ? readFileSync(source, 'utf8') : execFileSync(source, { encoding: 'utf8' });
const defs = JSON.parse(text);
// A def marked x-constant (every property a const) is also written as a
// constant of that type: HistogramBins -> histogramBins.
function constant(name, schema) {
  if (!schema['x-constant']) return '';
  const value = Object.fromEntries(Object.entries(schema.properties).map(([key, s]) => [key, s.const]));
  const id = name[0].toLowerCase() + name.slice(1);
  return `export const ${id}: ${name} = ${JSON.stringify(value)};\n`;
}
const out = resolve(dirname(fileURLToPath(import.meta.url)), '../src/api/wire.gen.ts');
const body = [
  '// Generated from the server\'s declarations (src/server/controller/wire_types.cpp) by',
  '// web/scripts/wire_types.mjs at build time: do not edit, change wire_types.cpp.',
  '',
  ...Object.entries(defs).map(([name, schema]) => declaration(name, schema) + '\n' + constant(name, schema)),
].join('\n');
if (!existsSync(out) || readFileSync(out, 'utf8') !== body) writeFileSync(out, body);
console.log(`wire_types: ${Object.keys(defs).length} types in ${join('web/src/api', 'wire.gen.ts')}`);
