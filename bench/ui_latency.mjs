// Pause-to-pixels latency of the UI (see ui_latency.sh). Each step is driven
// over HTTP; the latency of a step is the page's time of showing every visible
// strip of the new snapshot minus the time the training thread paused
// (status.paused_at_ms). Two page times are reported: every picture decoded
// and handed to its canvas (window.__nansense.renderedAtMs), and the next
// frame produced (paintedAtMs), which the target is judged on. Both clocks
// are this machine's.
import { openPausedDemo, summary } from './ui_common.mjs';

const [binary, stepsArg] = process.argv.slice(2);
const steps = Number(stepsArg ?? 30);

const { demo, page, rendered, close } = await openPausedDemo(binary);
try {
  let status;

  const latencies = [];
  const painted = [];
  for (let i = 0; i < steps; ++i) {
    status = await demo.api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    if (status.state !== 'paused') throw new Error(`step ${i} did not pause: ${status.state}`);
    await rendered(status.snapshot_sequence);
    await page.waitForFunction(() => window.__nansense?.paintedAtMs !== undefined, null, { timeout: 30_000 });
    const shown = await page.evaluate(() => window.__nansense);
    if (shown.renderedSequence !== status.snapshot_sequence) continue;  // raced past: not a measurement
    latencies.push(shown.renderedAtMs - status.paused_at_ms);
    painted.push(shown.paintedAtMs - status.paused_at_ms);
  }
  const strips = await page.locator('canvas[data-testid^="strip-activation-"], canvas[data-testid^="strip-gradient-"]').count();
  const shown = summary(latencies);
  const framed = summary(painted);
  console.log(`ui_latency: ${latencies.length} pauses of the demo CNN, ${strips} strips on the page`);
  console.log(`  pause -> strips decoded and handed to their canvases: ${shown.text}`);
  console.log(`  pause -> the frame drawing them produced:             ${framed.text}`);
  console.log(`  target: median <= 150 ms (to the frame) -> ${framed.median <= 150 ? 'met' : 'NOT met'}`);
} finally {
  await close();
}
