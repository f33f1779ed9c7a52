// Stepping over the run's final batch ends training (and with it the live
// session): ask first.
import { resolveLastBatchConfirm } from '../state/commands';
import { store } from '../state/app';
import { useSelector } from '../state/store';
import { Modal } from './Modal';

export function ConfirmLastBatch() {
  const pending = useSelector(store, (s) => s.confirmLastBatch != null);
  if (!pending) return null;
  return (
    <Modal title="Step over the last batch?" testid="confirm-last-batch" onClose={() => resolveLastBatchConfirm(false)}>
      <p class="form-note">
        This is the final batch of the run. Stepping over it finishes training; the last captured batch stays available
        for inspection.
      </p>
      <div class="form-actions">
        <button class="btn btn-quiet" data-testid="confirm-cancel" onClick={() => resolveLastBatchConfirm(false)}>
          Cancel
        </button>
        <button class="btn btn-step" data-testid="confirm-step-over" onClick={() => resolveLastBatchConfirm(true)}>
          Step over
        </button>
      </div>
    </Modal>
  );
}
