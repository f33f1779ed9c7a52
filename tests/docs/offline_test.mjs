// The built docs site in a real browser with no internet: every page of the
// site (each index.html under it) is served from build/site on loopback and loaded in
// headless Chromium, with every request to another host aborted and counted.
// A page passes when nothing failed to load (no aborted or failed request, no
// HTTP error), its console shows no error and no script threw. Code blocks
// must be highlighted (by Pygments at build time: spans inside .highlight)
// and the search must find a word (its index and worker are the site's own).
//
//   node tests/docs/offline_test.mjs --site build/site --chromium /usr/bin/chromium
import { createReadStream, existsSync, readdirSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const { values: args } = parseArgs({
  options: { site: { type: 'string' }, chromium: { type: 'string', default: '/usr/bin/chromium' } },
});
const site = resolve(args.site);
const TIMEOUT_MS = 15_000;

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css', '.json': 'application/json',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon', '.woff2': 'font/woff2', '.xml': 'text/xml',
  '.txt': 'text/plain', '.map': 'application/json', '.gz': 'application/gzip',
};

// A static server for the site, as any web server would serve it (a folder
// URL serves its index.html).
function serve() {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    let file = normalize(join(site, path));
    if (file !== site && !file.startsWith(site + sep)) {
      res.writeHead(403).end();
      return;
    }
    if (existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
    if (!existsSync(file)) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream' });
    createReadStream(file).pipe(res);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

function fail(message) {
  console.log(`FAIL docs_offline: ${message}`);
  process.exitCode = 1;
}

const problems = [];
let requests = 0;
let blocked = 0;
const server = await serve();
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({ executablePath: args.chromium, headless: true, args: ['--no-sandbox'] });
try {
  // Every page the site has: each index.html under it (a page is a folder).
  const pages = readdirSync(site, { recursive: true })
    .filter((f) => f === 'index.html' || f.endsWith(`${sep}index.html`))
    .map((f) => `/${f.slice(0, -'index.html'.length)}`)
    .sort();
  if (pages.length < 10) throw new Error(`the site has ${pages.length} pages: ${pages.join(' ')}`);

  const context = await browser.newContext();
  // Offline: only the site's own server answers.
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(base + '/') || url.startsWith('data:') || url.startsWith('blob:')) {
      requests += 1;
      return route.continue();
    }
    blocked += 1;
    problems.push(`a request left the site: ${url}`);
    return route.abort('internetdisconnected');
  });
  const page = await context.newPage();
  let current = '';
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`${current}: console error: ${m.text()} [${m.location()?.url ?? ''}]`);
  });
  page.on('pageerror', (e) => problems.push(`${current}: uncaught: ${e.message}`));
  // net::ERR_ABORTED is the browser cancelling a request when the test moves
  // on to the next page (the favicon, say), not a load that failed; a request
  // off the site is aborted as net::ERR_INTERNET_DISCONNECTED and counted.
  page.on('requestfailed', (r) => {
    const why = r.failure()?.errorText ?? '';
    if (why !== 'net::ERR_ABORTED') problems.push(`${current}: failed request ${r.url()} (${why})`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${current}: ${r.status()} for ${r.url()}`);
  });
  context.on('weberror', (e) => problems.push(`${current}: web error: ${e.error().message}`));

  // Requests in flight, so each page is left only once what it started
  // (scripts' own fetches after load included) has finished or failed.
  let inFlight = 0;
  page.on('request', () => { inFlight += 1; });
  page.on('requestfinished', () => { inFlight -= 1; });
  page.on('requestfailed', () => { inFlight -= 1; });
  const settled = async () => {
    const deadline = Date.now() + TIMEOUT_MS;
    while (inFlight > 0) {
      if (Date.now() > deadline) throw new Error(`${current}: ${inFlight} requests still in flight`);
      await page.waitForTimeout(10);
    }
  };

  for (const path of pages) {
    current = path;
    const response = await page.goto(base + path, { waitUntil: 'load', timeout: TIMEOUT_MS });
    if (!response || !response.ok()) problems.push(`${path}: answered ${response?.status()}`);
    await settled();
  }
  if (problems.length === 0) console.log(`PASS docs_offline: ${pages.length} pages loaded with no failed request ` +
                                         `and no console error (${requests} requests, none off the site)`);

  // Highlighted code, with no script: the Python guide's blocks, tokens
  // marked by Pygments (`import` is a namespace keyword, span.kn).
  current = '/guide/python/';
  await page.goto(base + current, { waitUntil: 'load', timeout: TIMEOUT_MS });
  const spans = await page.locator('.highlight code span').count();
  const keywords = await page.locator('.highlight code span.kn').count();
  if (spans < 50 || keywords < 1) {
    problems.push(`the Python guide's code blocks are not highlighted (${spans} token spans, ${keywords} import keywords)`);
  } else {
    console.log(`PASS docs_offline: code blocks highlighted at build time (${spans} token spans on the Python guide)`);
  }

  // The search: its worker and index are the site's own.
  current = `${current} (search)`;
  await page.locator('label.md-search__icon, .md-search__input').first().click({ timeout: TIMEOUT_MS })
    .catch(() => { throw new Error('no search box (.md-search__input): is the theme Material for MkDocs?'); });
  // Typed key by key, as a reader types (the theme searches on key events).
  await page.locator('.md-search__input').pressSequentially('time travel');
  const found = await page.locator('.md-search-result__item').first().waitFor({ timeout: TIMEOUT_MS })
    .then(() => page.locator('.md-search-result__item').count(), () => 0);
  if (found > 0) console.log(`PASS docs_offline: the search finds "time travel" (${found} results)`);
  else problems.push(`the search found nothing for "time travel": ${await page.locator('.md-search-result').textContent()}`);
  if (blocked > 0) problems.push(`${blocked} requests tried to leave the site`);
} catch (e) {
  problems.push(e.stack ?? String(e));
} finally {
  for (const p of problems) fail(p);
  await browser.close();
  server.close();
}
