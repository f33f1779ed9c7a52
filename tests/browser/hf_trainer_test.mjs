// The Hugging Face Trainer's words on the page (hf_trainer_run.py, a served
// Trainer with 2 micro-batches a step); run by hf_trainer.sh. Every wait is
// Playwright's own polling (no fixed sleeps); the first failure stops the run.
import { Harness, collectConsoleErrors } from './harness.mjs';

const h = new Harness('hf-trainer-ui');
const { byTestId, expectText, screenshot, check } = h;

async function main() {
  // Served, the run pauses at the end of its first optimizer step.
  await h.startDemo([]);
  await h.launch();
  const page = (h.page = await h.newPage());
  const consoleErrors = collectConsoleErrors(page);

  await check('paused after global step 1: the top bar says the step and its micro-batches', async () => {
    await page.goto(h.demo.base);
    await expectText('run-state', 'paused');
    await expectText('position-label', 'epoch 0/2 | train batch 0/3 · global step 1 · 2 micro-batches');
    // The snapshot was taken at the step's end: both micro-batches' layers.
    await expectText('snapshot-position', 'snapshot #1 · epoch 0 | train batch 0 · global step 1');
    await expectText('snapshot-micro-batches', "shows all 2 micro-batches (layers #2… from the second); the input is the first's");
    const status = await h.demo.api('/api/status');
    if (status.snapshot_trainer_step?.micro_batches !== 2) throw new Error(`status says ${JSON.stringify(status.snapshot_trainer_step)}`);
    await screenshot('step-1');
  });

  await check("a NaN in global step 2's second micro-batch: paused in it, the top bar, the banner and the snapshot line name it", async () => {
    await byTestId('detach').click();
    await expectText('debug-banner-text', /at epoch 0 \| train batch 1 \(global step 2, micro-batch 2 of 2\)/, 60_000);
    await expectText('position-label', 'epoch 0/2 | train batch 1/3 · global step 2 · micro-batch 2 of 2');
    await expectText('snapshot-micro-batches', /^shows micro-batches 1–2 of 2, taken mid-step/);
    const error = (await h.demo.api('/api/status')).debug.error;
    const { global_step: step, micro_batches: of, micro_batch: micro } = error.trainer_step ?? {};
    if (step !== 2 || of !== 2 || micro !== 1) throw new Error(`error.trainer_step ${JSON.stringify(error.trainer_step)}`);
    await screenshot('nan');
  });

  await check('no console errors', async () => {
    if (consoleErrors.length) throw new Error(consoleErrors.join(' | '));
  });
}

await h.run(main);
