// The optimizer update the standing error holds back: skip it or apply it
// when the loop resumes. Shown by the banner and the details dialog while the
// loop waits before the step of the batch that tripped.
import { useState } from 'preact/hooks';
import type { DebugUpdate, UpdateAction } from '../api/types';
import { chooseUpdate } from '../state/debug';

export const SKIP_EXPLANATION =
  "Skip clears every parameter's gradient before the loop resumes, so its optimizer.step() changes no weight, optimizer state or step count for this batch.";

interface Props {
  // The choice the server holds (apply unless skip was chosen).
  skip: boolean;
  // Test ids: `${testid}`, `${testid}-skip`, `${testid}-apply`.
  testid: string;
  compact?: boolean;
  // Why skipping is refused (a distributed run: the other ranks step with
  // the same gradients), else null: Skip is then off, and says why.
  refused?: string | null;
}

export function UpdateChoice({ skip, testid, compact = false, refused = null }: Props) {
  // One command at a time; the selection follows the pushed status.
  const [busy, setBusy] = useState(false);
  const choose = async (action: UpdateAction) => {
    if (busy || (action === 'skip') === skip || (action === 'skip' && refused)) return;
    setBusy(true);
    await chooseUpdate(action);
    setBusy(false);
  };
  const option = (action: UpdateAction, label: string, title: string) => {
    const selected = (action === 'skip') === skip;
    const off = action === 'skip' && refused !== null;
    return (
      <button
        type="button"
        class={`update-option ${selected ? 'selected' : ''} ${off ? 'refused' : ''}`}
        data-testid={`${testid}-${action}`}
        aria-pressed={selected}
        disabled={busy || off}
        title={off ? (refused ?? title) : title}
        onClick={() => void choose(action)}
      >
        {label}
      </button>
    );
  };
  return (
    <div class={`update-choice ${compact ? 'update-choice-compact' : ''}`} data-testid={testid} data-choice={skip ? 'skip' : 'apply'}>
      <span class="update-choice-label">This batch's optimizer update is held:</span>
      <span class="update-options" role="group" aria-label="The held optimizer update">
        {option('skip', 'Skip this update', 'Clear the gradients before the loop resumes, so this step changes nothing')}
        {option('apply', 'Apply it', "Let optimizer.step() use this batch's gradients when the loop resumes (the default)")}
      </span>
      <span class="update-choice-note" data-testid={`${testid}-note`}>
        {refused ? `Skipping is off: ${refused}.` : SKIP_EXPLANATION}
      </span>
    </div>
  );
}

// After the loop resumed: what it did with the update.
export function updateDoneText(update: DebugUpdate | undefined): string | null {
  return update === 'applied' ? 'update applied' : update === 'skipped' ? 'update skipped' : null;
}
