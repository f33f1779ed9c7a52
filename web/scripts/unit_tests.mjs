// Runs the unit tests of the page's own logic (web/test/*.test.ts) with
// node's test runner. Node cannot load the page's TypeScript (nor resolve its
// extensionless imports), so each test file is first bundled by the page's
// own Vite, the modules under test built as the page builds them, into one ES
// module in `outDir`; node --test then runs those. Exits as node --test does:
// non-zero when a test failed.
//   node scripts/unit_tests.mjs [outDir] [name-filter]
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'vite';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outDir = resolve(process.argv[2] ?? join(web, 'node_modules/.cache/unit-tests'));
const filter = process.argv[3] ?? '';
const tests = readdirSync(join(web, 'test')).filter((f) => f.endsWith('.test.ts') && f.includes(filter));
if (tests.length === 0) {
  console.error(`unit_tests: no web/test/*.test.ts${filter ? ` matching "${filter}"` : ''}`);
  process.exit(1);
}

await build({
  configFile: false,
  root: web,
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  // Everything the tests import is bundled in; only node's own modules
  // (node:test, node:assert) stay imports.
  ssr: { noExternal: true },
  build: {
    ssr: true,
    target: 'node20',
    outDir,
    emptyOutDir: true,
    minify: false,
    sourcemap: 'inline',
    rolldownOptions: {
      input: Object.fromEntries(tests.map((f) => [f.replace(/\.ts$/, ''), join(web, 'test', f)])),
      output: { format: 'es', entryFileNames: '[name].mjs' },
    },
  },
});

const files = tests.map((f) => join(outDir, f.replace(/\.ts$/, '.mjs')));
const run = spawnSync(process.execPath, ['--enable-source-maps', '--test', '--test-reporter=spec', ...files], {
  stdio: 'inherit',
});
process.exit(run.status ?? 1);
