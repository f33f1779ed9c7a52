// What the browser tests (tests/browser/*_test.mjs) and the UI benches
// (bench/ui_*.mjs) share: the demo started on a free port and waited on until
// it pauses at its first batch, headless Chromium, and the waits the checks
// use. Every wait is Playwright's own polling or a deadline, never a fixed
// sleep.
import { spawn } from 'node:child_process';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

// Generous: the 2-core machine may be building while this runs.
export const START_TIMEOUT_MS = 120_000;

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export function escapeRegExp(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// The demo binary, started (and restarted) on a port of its own. Its output
// is appended to `log` when given, else stdout is dropped and stderr shown;
// its pid is written to `pidfile` at each start, so a shell trap can end it
// even if node itself is killed. `prefix`: arguments before the demo's own
// (a Python demo: binary is the interpreter, prefix its script); `env`:
// variables added to the demo's environment.
export class Demo {
  constructor(binary, { log = null, pidfile = null, prefix = [], env = {} } = {}) {
    this.binary = binary;
    this.log = log;
    this.pidfile = pidfile;
    this.prefix = prefix;
    this.env = env;
    this.child = null;
    this.base = '';
  }

  // Resolves with /api/status once the demo pauses at its first batch.
  async start(port, args, timeoutMs = START_TIMEOUT_MS) {
    this.base = `http://127.0.0.1:${port}`;
    const child = spawn(this.binary, [...this.prefix, '--no-browser', '--port', String(port), ...args], {
      stdio: ['ignore', this.log ? 'pipe' : 'ignore', this.log ? 'pipe' : 'inherit'],
      env: { ...process.env, ...this.env },
    });
    if (this.log) {
      const log = createWriteStream(this.log, { flags: 'a' });
      child.stdout.pipe(log);
      child.stderr.pipe(log);
    }
    if (this.pidfile) writeFileSync(this.pidfile, String(child.pid));
    this.child = child;
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const gone = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 200))]);
      if (gone) throw new Error(`the demo exited while starting (${JSON.stringify(gone)})`);
      try {
        const res = await fetch(`${this.base}/api/status`);
        if (res.ok) {
          const status = await res.json();
          if (status.state === 'paused') return status;
        }
      } catch {
        // Not listening yet.
      }
    }
    throw new Error(`the demo did not pause at its first batch within ${timeoutMs / 1000} s`);
  }

  // SIGKILL (sent at once, so this also serves in a process 'exit' handler);
  // resolves when the demo has exited.
  kill() {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill('SIGKILL');
    });
  }

  // GET path, or POST body as JSON; the answer's JSON, or an error naming the
  // status and the server's message.
  async api(path, body) {
    const res = await fetch(
      this.base + path,
      body === undefined
        ? {}
        : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) },
    );
    if (!res.ok) throw new Error(`${body === undefined ? 'GET' : 'POST'} ${path} answered ${res.status}: ${await res.text()}`);
    return res.json();
  }
}

export function launchBrowser(executablePath = '/usr/bin/chromium') {
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
}

// The page's console errors (and, unless uncaught is false, its uncaught
// exceptions) as they come; ignore(message) passes over expected ones.
export function collectConsoleErrors(page, { ignore = () => false, uncaught = true } = {}) {
  const errors = [];
  page.on('console', (m) => {
    if (m.type() !== 'error' || ignore(m)) return;
    // A failed request's message names no URL; its location does.
    const where = m.location()?.url;
    errors.push(where ? `${m.text()} [${where}]` : m.text());
  });
  if (uncaught) page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));
  return errors;
}

// One browser test run: --demo, --chromium, --screenshots and --pidfile (and
// any `options` of its own) from the command line; the demo, logging to
// <screenshots>/demo.log; the browser; named checks, the first failure of
// which stops the run; and the waits, which act on `page` (swapped for a
// stand-in page by withPage). The waits and check are bound, to be
// destructured.
export class Harness {
  constructor(tag, { options = {}, uiTimeoutMs = 15_000 } = {}) {
    this.tag = tag;
    this.args = parseArgs({
      options: {
        demo: { type: 'string' },
        chromium: { type: 'string' },
        screenshots: { type: 'string' },
        pidfile: { type: 'string' },
        ...options,
      },
    }).values;
    this.uiTimeoutMs = uiTimeoutMs;
    this.logPath = join(this.args.screenshots, 'demo.log');
    this.demo = new Demo(this.args.demo, { log: this.logPath, pidfile: this.args.pidfile });
    this.browser = null;
    this.page = null;
    this.passed = 0;
    this.failed = false;
    this.shot = 0;

    const T = () => this.uiTimeoutMs;
    this.byTestId = (id) => this.page.getByTestId(id);

    // Waits until the element's whole text matches (a RegExp: part of it).
    this.expectText = async (id, expected, timeout = T()) => {
      const pattern = expected instanceof RegExp ? expected : new RegExp(`^\\s*${escapeRegExp(expected)}\\s*$`);
      try {
        await this.byTestId(id).filter({ hasText: pattern }).first().waitFor({ timeout });
      } catch {
        const actual = await this.byTestId(id).first().textContent({ timeout: 1000 }).catch(() => '(no such element)');
        throw new Error(`[data-testid=${id}] should read ${pattern}, but reads "${actual}"`);
      }
    };

    // expectText for the end of a long run: waits as long as the text of
    // [data-testid=progressId] keeps changing (the live position while the
    // loop runs), failing only after stallMs without a change. A busy
    // machine trains slower; a stuck run does not move at all.
    this.expectTextWhileProgressing = async (id, expected, { progressId = id, stallMs = 4 * T() } = {}) => {
      const pattern = expected instanceof RegExp ? expected : new RegExp(`^\\s*${escapeRegExp(expected)}\\s*$`);
      let seen = null;
      let changedAt = Date.now();
      for (;;) {
        try {
          await this.byTestId(id).filter({ hasText: pattern }).first().waitFor({ timeout: 1000 });
          return;
        } catch {
          // Not yet: look at the progress.
        }
        const progress = await this.byTestId(progressId).first().textContent({ timeout: 1000 }).catch(() => null);
        if (progress !== seen) {
          seen = progress;
          changedAt = Date.now();
        } else if (Date.now() - changedAt > stallMs) {
          const actual = await this.byTestId(id).first().textContent({ timeout: 1000 }).catch(() => '(no such element)');
          throw new Error(`[data-testid=${id}] should read ${pattern}, but reads "${actual}"; ` +
                          `[data-testid=${progressId}] stayed "${seen}" for ${stallMs} ms`);
        }
      }
    };

    this.expectEnabled = async (id, enabled, timeout = T()) => {
      try {
        await this.page.waitForFunction(
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
    };

    // An <img> that loaded, or a strip's <canvas> with a picture drawn in it
    // (some pixel is not transparent).
    this.expectImageLoaded = async (id, timeout = T()) => {
      try {
        await this.page.waitForFunction(
          (sel) => {
            const el = document.querySelector(sel);
            if (el instanceof HTMLImageElement) return el.complete && el.naturalWidth > 0;
            if (!(el instanceof HTMLCanvasElement) || !el.dataset.drawn || el.width === 0) return false;
            const pixels = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;
            for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) return true;
            return false;
          },
          `[data-testid="${id}"]`,
          { timeout },
        );
      } catch {
        throw new Error(`image [data-testid=${id}] did not load`);
      }
    };

    this.gone = (id, timeout = T()) => this.byTestId(id).waitFor({ state: 'detached', timeout });

    // <screenshots>/NN-name.png, numbered in the order taken.
    this.screenshot = async (name) => {
      this.shot += 1;
      await this.page.screenshot({ path: join(this.args.screenshots, `${String(this.shot).padStart(2, '0')}-${name}.png`) });
    };

    this.check = async (name, body) => {
      try {
        await body();
        this.passed += 1;
        console.log(`PASS ${this.tag}: ${name}`);
      } catch (e) {
        this.failed = true;
        console.log(`FAIL ${this.tag}: ${name}: ${e.message.split('\n')[0]}`);
        if (this.page) await this.page.screenshot({ path: join(this.args.screenshots, 'failure.png') }).catch(() => {});
        throw e;
      }
    };
  }

  // The demo on a fresh free port, with its log emptied; resolves with its
  // first paused status.
  async startDemo(demoArgs) {
    this.port = await freePort();
    writeFileSync(this.logPath, '');
    return this.demo.start(this.port, demoArgs);
  }

  async launch() {
    this.browser = await launchBrowser(this.args.chromium);
    return this.browser;
  }

  newPage(viewport = { width: 1440, height: 900 }) {
    return this.browser.newPage({ viewport });
  }

  // Runs body with the waits acting on another page, then puts the old one back.
  async withPage(other, body) {
    const previous = this.page;
    this.page = other;
    try {
      return await body();
    } finally {
      this.page = previous;
    }
  }

  // Runs main, shows the demo's last lines if it failed, closes the browser,
  // ends the demo and exits with the verdict.
  async run(main, { summary = `; screenshots in ${this.args.screenshots}` } = {}) {
    try {
      await main();
    } catch (e) {
      if (!this.failed) console.log(`FAIL ${this.tag}: ${e.message}`);
      this.failed = true;
      try {
        const log = readFileSync(this.logPath, 'utf8').split('\n').slice(-30).join('\n');
        console.log(`--- demo output (last lines) ---\n${log}`);
      } catch {
        // No log to show.
      }
    } finally {
      await this.browser?.close().catch(() => {});
      await this.demo.kill();
    }
    console.log(`${this.tag}: ${this.passed} checks passed${this.failed ? ', 1 failed' : ''}${summary}`);
    process.exit(this.failed ? 1 : 0);
  }
}
