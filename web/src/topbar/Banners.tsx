// Conditions that outrank everything else on the page, directly under the
// top bar: the training loop is gone, nansense's own machinery failed, or a
// numerical check tripped.
import type { DebugErrorSummary, TrainerStep } from '../api/types';
import { UpdateChoice } from '../dialogs/UpdateChoice';
import { store } from '../state/app';
import { openDebugDialog, producerPhrase, silenceDebug } from '../state/debug';
import { useSelector } from '../state/store';

export function Banners() {
  const status = useSelector(store, (s) => s.status);
  if (!status) return null;
  const where = status.live_position?.text ?? status.snapshot_position?.text ?? 'before the first batch';
  const numerical = status.debug?.error;
  return (
    <>
      {status.state === 'lost' && (
        <div class="banner banner-red" role="alert" data-testid="lost-banner">
          Training loop exited — {status.lost_reason ?? 'no reason given'} — at {where}
        </div>
      )}
      {numerical && <NumericalBanner error={numerical} />}
      {status.internal_errors && status.internal_errors.length > 0 && (
        <div class="banner banner-amber" role="status" data-testid="internal-errors">
          nansense disabled a part of itself: {status.internal_errors.join(' · ')}
        </div>
      )}
    </>
  );
}

// The trainer's words for where a check tripped, as the server's headline says them.
function trainedWhere(step: TrainerStep): string {
  const micro =
    step.micro_batches > 1 && step.micro_batch != null ? `, micro-batch ${step.micro_batch + 1} of ${step.micro_batches}` : '';
  return `global step ${step.global_step}${micro}`;
}

function NumericalBanner({ error }: { error: DebugErrorSummary }) {
  const producer = producerPhrase(error);
  const more = error.hits > 1 ? ` (${error.hits} checked batches tripped)` : '';
  // The traced re-run delivered the batch a second time: to the loop body,
  // or (Lightning) to training_step; the server says which.
  const rerun = error.rerun ? ` — re-run traced: ${error.ran_twice ?? 'your loop body ran this batch twice'}` : '';
  return (
    <div class="banner banner-amber banner-numerical" role="alert" data-testid="debug-banner">
      <span class="banner-icon" aria-hidden="true">
        ⚠
      </span>
      <button class="banner-text" data-testid="debug-banner-text" title="Show the details" onClick={openDebugDialog}>
        Numerical issue detected — {error.reason_labels.join(', ')} — at {error.position.text}
        {error.trainer_step ? ` (${trainedWhere(error.trainer_step)})` : ''}
        {producer ? ` — ${producer}` : ''}
        {more}
        {rerun}
      </button>
      <button class="btn btn-quiet btn-small" data-testid="debug-banner-details" onClick={openDebugDialog}>
        Details
      </button>
      <button
        class="btn btn-quiet btn-small"
        data-testid="debug-banner-silence"
        title="Turn off the checks that tripped (the gear turns them back on)"
        onClick={() => void silenceDebug()}
      >
        Silence warning
      </button>
      {error.update === 'held' && <UpdateChoice skip={error.skip_update === true} refused={error.skip_refused ?? null} testid="banner-update" compact />}
    </div>
  );
}
