// JSON Schema, as src/server/controller/wire_types.cpp writes it (a small subset), as
// TypeScript. Used by wire_types.mjs (the page's generated types) and by
// tests/wire/check_types.mjs (the command table against the page).

// A schema as a TypeScript type expression; `$ref`s become type names.
export function ts(schema) {
  if (schema.$ref) return schema.$ref.replace('#/$defs/', '');
  if ('const' in schema) return JSON.stringify(schema.const);
  if (schema.anyOf) return schema.anyOf.map((s) => (s.anyOf ? `(${ts(s)})` : ts(s))).join(' | ');
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  switch (schema.type) {
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array': {
      const item = ts(schema.items ?? {});
      return /^[\w.]+$/.test(item) ? `${item}[]` : `(${item})[]`;
    }
    case 'object': {
      if (!schema.properties) return `{ [key: string]: ${ts(schema.additionalProperties ?? {})} }`;
      return `{ ${fields(schema).join(' ')} }`;
    }
    default:
      return 'unknown';
  }
}

// An object schema's fields, one `key?: type;` each.
export function fields(schema) {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties).map(([key, value]) => `${key}${required.has(key) ? '' : '?'}: ${ts(value)};`);
}

// One named type as a declaration: an interface for an object with keys
// (each field's declared description, if any, as its doc comment), a type
// alias otherwise.
export function declaration(name, schema) {
  if (schema.type === 'object' && schema.properties) {
    const described = Object.values(schema.properties).map((s) => s.description);
    return `export interface ${name} {\n${fields(schema)
      .map((f, i) => (described[i] ? `  /** ${described[i].replaceAll('*/', '* /')} */\n  ${f}` : `  ${f}`))
      .join('\n')}\n}`;
  }
  return `export type ${name} = ${ts(schema)};`;
}
