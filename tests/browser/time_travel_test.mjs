// The Time Travel dialog against the Fashion-MNIST demo; run by time_travel.sh.
// Waits with Playwright's polling or deadlines, never fixed sleeps; the first
// failure stops the run.
import { spawn } from 'node:child_process';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const { values: args } = parseArgs({
  options: {
    demo: { type: 'string' },
    chromium: { type: 'string' },
    screenshots: { type: 'string' },
    pidfile: { type: 'string' },
  },
});

const START_TIMEOUT_MS = 120_000;
const UI_TIMEOUT_MS = 30_000;
const logPath = join(args.screenshots, 'demo.log');
let demo = null;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function startDemo(port) {
  const log = createWriteStream(logPath, { flags: 'a' });
  const child = spawn(args.demo, ['--no-browser', '--port', String(port), '--epochs', '2', '--limit-batches', '5'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  writeFileSync(args.pidfile, String(child.pid));
  demo = child;
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const gone = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 200))]);
    if (gone) throw new Error(`the demo exited while starting (${JSON.stringify(gone)})`);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/api/status`);
      if (res.ok && (await res.json()).state === 'paused') return;
    } catch {
      // Not listening yet.
    }
  }
  throw new Error(`the demo did not pause at its first batch within ${START_TIMEOUT_MS / 1000} s`);
}

function killDemo() {
  if (!demo || demo.exitCode !== null || demo.signalCode !== null) return Promise.resolve();
  const child = demo;
  return new Promise((resolve) => {
    child.once('exit', resolve);
    child.kill('SIGKILL');
  });
}

let page;
let browser;
const byTestId = (id) => page.getByTestId(id);

function escapeRegExp(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

async function expectText(id, expected, timeout = UI_TIMEOUT_MS) {
  const pattern = expected instanceof RegExp ? expected : new RegExp(`^\\s*${escapeRegExp(expected)}\\s*$`);
  try {
    await byTestId(id).filter({ hasText: pattern }).first().waitFor({ timeout });
  } catch {
    const actual = await byTestId(id).first().textContent({ timeout: 1000 }).catch(() => '(no such element)');
    throw new Error(`[data-testid=${id}] should read ${pattern}, but reads "${actual}"`);
  }
}

async function expectEnabled(id, enabled, timeout = UI_TIMEOUT_MS) {
  try {
    await page.waitForFunction(
      ([sel, want]) => {
        const el = document.querySelector(sel);
        return el != null && el.disabled === !want;
      },
      [`[data-testid="${id}"]`, enabled],
      { timeout },
    );
  } catch {
    throw new Error(`[data-testid=${id}] should be ${enabled ? 'enabled' : 'disabled'}`);
  }
}

let passed = 0;
let failed = false;
async function check(name, body) {
  try {
    await body();
    passed += 1;
    console.log(`PASS time_travel: ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL time_travel: ${name}: ${e.message.split('\n')[0]}`);
    if (page) await page.screenshot({ path: join(args.screenshots, 'failure.png') }).catch(() => {});
    throw e;
  }
}

async function main() {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  await startDemo(port);
  browser = await chromium.launch({ executablePath: args.chromium, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const consoleErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  await page.goto(base);

  await check('paused at the first batch', async () => {
    await expectText('position-label', /^\s*epoch 0\/2 \| train batch 0\b/);
  });

  await check('two steps later, Time Travel is enabled', async () => {
    for (const _ of [1, 2]) {
      const res = await fetch(`${base}/api/step`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ unit: 'batch', wait_seconds: 30 }),
      });
      if (!res.ok) throw new Error(`POST /api/step answered ${res.status}: ${await res.text()}`);
    }
    await expectText('position-label', /^\s*epoch 0\/2 \| train batch 2\b/);
    await expectEnabled('time-travel', true);
  });

  await check('the dialog shows epoch 0 cached and epoch 1 not yet', async () => {
    await byTestId('time-travel').click();
    await byTestId('time-travel-dialog').waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await expectText('time-travel-cached', 'Cached epochs: 0');
    await expectText('time-travel-epoch', 'epoch 0');
    await expectText('time-travel-uncached', /Uncached epochs: 1\b.*once training has passed their start/);
    await byTestId('time-travel-cache-all').waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await page.screenshot({ path: join(args.screenshots, '01-dialog.png') });
  });

  await check('a refusal shows "Time travel failed" with the server message', async () => {
    const message = 'epoch 0 is not cached (test refusal)';
    await page.route('**/api/time_travel', (route) =>
      route.request().method() === 'POST'
        ? route.fulfill({ status: 409, contentType: 'application/json', body: JSON.stringify({ error: message }) })
        : route.continue(),
    );
    await byTestId('time-travel-go').click();
    await expectText('time-travel-error', new RegExp(`Time travel failed\\s*${escapeRegExp(message)}`));
    await byTestId('time-travel-dialog').waitFor({ state: 'visible', timeout: UI_TIMEOUT_MS });
    await page.unroute('**/api/time_travel');
  });

  await check('Time travel jumps back to epoch 0, batch 0', async () => {
    await byTestId('time-travel-go').click();
    await byTestId('time-travel-dialog').waitFor({ state: 'detached', timeout: UI_TIMEOUT_MS });
    await expectText('position-label', /^\s*epoch 0\/2 \| train batch 0\b/);
    await page.screenshot({ path: join(args.screenshots, '02-after-jump.png') });
  });

  await check('no console errors', async () => {
    // The routed 409 logs a failed-resource error; that one is expected.
    const unexpected = consoleErrors.filter((e) => !/409/.test(e));
    if (unexpected.length) throw new Error(`console errors: ${unexpected.join(' | ')}`);
  });
}

try {
  await main();
} catch (e) {
  if (!failed) console.log(`FAIL time_travel: ${e.message}`);
  failed = true;
  try {
    const log = readFileSync(logPath, 'utf8').split('\n').slice(-30).join('\n');
    console.log(`--- demo output (last lines) ---\n${log}`);
  } catch {
    // No log to show.
  }
} finally {
  await browser?.close().catch(() => {});
  await killDemo();
}
console.log(`time_travel: ${passed} checks passed${failed ? ', 1 failed' : ''}`);
process.exit(failed ? 1 : 0);
