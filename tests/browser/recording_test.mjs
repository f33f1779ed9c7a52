// The gear's Recording section against the Fashion-MNIST demo; run by
// recording.sh (which points NANSENSE_RECORDINGS_DIR at a fresh folder).
// Every wait is Playwright's polling or a deadline, never a fixed sleep; the
// first failure stops the run (later checks build on its state).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('recording', { uiTimeoutMs: 30_000 });
const { byTestId, expectText, screenshot, check } = h;

function ffprobe(path) {
  const out = execFileSync(
    'ffprobe',
    ['-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries',
     'stream=codec_name,width,height,nb_read_frames', '-of', 'json', path],
    { encoding: 'utf8' },
  );
  return JSON.parse(out).streams[0];
}

async function openGear() {
  await byTestId('settings-gear').click();
  await byTestId('recording-section').waitFor({ timeout: h.uiTimeoutMs });
}

async function closeGear() {
  await byTestId('settings-cancel').click();
  await h.gone('recording-section');
}

async function main() {
  await h.startDemo(['--epochs', '1', '--limit-batches', '12']);
  const base = h.demo.base;
  await h.launch();
  const page = (h.page = await h.newPage({ width: 1440, height: 1000 }));
  const consoleErrors = collectConsoleErrors(page);
  await page.goto(base);
  let recorded = null;

  await check('the gear names the main page\'s view and offers Snapshot and Record', async () => {
    await page.locator('[data-testid^="card-"]').first().waitFor({ timeout: h.uiTimeoutMs });
    await openGear();
    await expectText('recording-view', /^\s*Layers: \S/);
    await byTestId('recording-snapshot').waitFor({ timeout: h.uiTimeoutMs });
    await byTestId('recording-start').waitFor({ timeout: h.uiTimeoutMs });
    await expectText('recording-directory', /nansense_recordings|tmp/);
    await screenshot('recording-section');
  });

  await check('Record starts a recording: the list shows it, Record goes, the gear counts 1', async () => {
    await byTestId('recording-start').click();
    await byTestId('recording-item').waitFor({ timeout: h.uiTimeoutMs });
    await h.gone('recording-start');
    await expectText('settings-gear-recordings', '1');
    await expectText('recording-item', /\(this view\)/);
    await expectText('recording-frames', /^\s*1 frame\s*$/);
  });

  await check("while the view records, the controls that would change it are fixed and say why", async () => {
    await byTestId('update-frequency-fixed').waitFor({ timeout: h.uiTimeoutMs });
    // The server's words (status.fixed): the recording's key and how to release it.
    await expectText('update-frequency-fixed', /the update frequency is fixed while "main" records.*stop_recording key "main"/i);
    // Disabled through its fieldset: :disabled, not the element's own attribute.
    await page.locator('[data-testid="update-n"]:disabled').waitFor({ timeout: h.uiTimeoutMs });
    // It looks held too: the controls dimmed, the reason at full strength.
    const look = await page.evaluate(() => {
      const note = document.querySelector('[data-testid="update-frequency-fixed"]');
      const section = note.closest('.settings-section');
      const control = section.querySelector('[data-testid="update-n"]');
      let opacity = 1;
      for (let e = control; e && e !== section; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
      return { control: opacity, note: Number(getComputedStyle(note).opacity) };
    });
    if (!(look.control < 0.75 && look.note === 1)) throw new Error(`fixed section's look: ${JSON.stringify(look)}`);
    await h.expectEnabled('average-toggle', false);
    await h.expectEnabled('values-select', false);
    const why = await page.locator('.render-options label').first().getAttribute('title');
    if (!/Fixed while this view records/.test(why)) throw new Error(`the average toggle says "${why}"`);
  });

  await check('each step is a live update: the frame count grows while the dialog is open', async () => {
    for (let i = 0; i < 2; ++i) await h.demo.api('/api/step', { unit: 'batch', timeout_seconds: 30 });
    await expectText('recording-frames', /^\s*[23] frames/);
    await screenshot('recording-frames');
  });

  await check('Save & Finish writes an MP4 ffprobe reads as H.264 with the frames counted', async () => {
    const before = await h.demo.api('/api/recordings');
    const frames = before.recordings[0].frames;
    await byTestId('recording-stop').click();
    await h.gone('recording-item');
    await byTestId('recording-start').waitFor({ timeout: h.uiTimeoutMs });
    await h.gone('settings-gear-recordings');
    await h.gone('update-frequency-fixed');
    await h.expectEnabled('average-toggle', true);
    const after = await h.demo.api('/api/recordings');
    if (after.recordings.length !== 0) throw new Error(`still recording: ${JSON.stringify(after.recordings)}`);
    const saved = after.saved[0];
    if (!saved || saved.key !== 'main' || saved.files.length !== 1) throw new Error(`saved: ${JSON.stringify(after.saved)}`);
    recorded = saved.files[0];
    const stream = ffprobe(recorded);
    if (stream.codec_name !== 'h264') throw new Error(`codec ${stream.codec_name}`);
    if (stream.width % 2 || stream.height % 2) throw new Error(`odd size ${stream.width}x${stream.height}`);
    // The dialog counted what was written before Save; Save adds nothing new
    // when the last update was already drawn.
    const read = Number(stream.nb_read_frames);
    if (read < frames || read > frames + 1) throw new Error(`ffprobe read ${read} frames, the dialog counted ${frames}`);
  });

  await check('Snapshot saves a PNG of the view named by its position', async () => {
    await byTestId('recording-snapshot').click();
    await expectText('toast', /Saved .*main_ep000_train_b\d{5}\.png/);
    const list = await h.demo.api('/api/recordings');
    const png = execFileSync('ls', [list.directory], { encoding: 'utf8' }).split('\n').find((f) => f.endsWith('.png'));
    if (!png) throw new Error(`no PNG in ${list.directory}`);
  });

  await check('Delete discards a recording and removes its file', async () => {
    await byTestId('recording-start').click();
    await byTestId('recording-item').waitFor({ timeout: h.uiTimeoutMs });
    const path = (await h.demo.api('/api/recordings')).recordings[0].files[0].path;
    await byTestId('recording-discard').click();
    await h.gone('recording-item');
    if (existsSync(path)) throw new Error(`${path} is still there`);
    if (!existsSync(recorded)) throw new Error('the saved recording went too');
    await closeGear();
  });

  await check("the Experiment page's view is its form's experiment", async () => {
    await page.goto(`${new URL(base).origin}/experiment`);
    await openGear();
    await expectText('recording-view', /^\s*Experiment: \S+ of \S/);
    await byTestId('recording-start').waitFor({ timeout: h.uiTimeoutMs });
    await closeGear();
  });

  await check('a page with nothing recordable says so', async () => {
    await page.goto(`${new URL(base).origin}/stats?view=graphs`);
    await openGear();
    await expectText('recording-nothing', /not recordable/);
    await screenshot('nothing-recordable');
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(`console errors: ${consoleErrors.join(' | ')}`);
  });
}

await h.run(main);
