// What the UI latency benches share: the demo started paused on a free port
// with a Chromium page open on it, a wait for the page to have shown a
// snapshot, and the spread of a list of milliseconds.
import { Demo, freePort, launchBrowser } from '../tests/browser/harness.mjs';

// Starts `binary` (one epoch) and opens a 1600x1000 page on it once the page
// shows the first snapshot. Call close() when done.
export async function openPausedDemo(binary) {
  const demo = new Demo(binary);
  process.on('exit', () => demo.kill());
  const status = await demo.start(await freePort(), ['--epochs', '1']);
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  await page.goto(demo.base + '/');
  // Resolves once the page has shown snapshot `seq` (or a newer one).
  const rendered = (seq) =>
    page.waitForFunction((s) => (window.__nansense?.renderedSequence ?? 0) >= s, seq, { timeout: 30_000 });
  await rendered(status.snapshot_sequence);
  const close = async () => {
    await browser.close();
    await demo.kill();
  };
  return { demo, page, status, rendered, close };
}

// Median, p90, min and max of `values` (sorted in place).
export function summary(values) {
  values.sort((a, b) => a - b);
  const at = (q) => values[Math.min(values.length - 1, Math.floor(q * values.length))];
  return { text: `median ${at(0.5)} ms, p90 ${at(0.9)} ms, min ${values[0]} ms, max ${values.at(-1)} ms`, median: at(0.5) };
}
