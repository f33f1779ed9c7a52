// Conditions that outrank everything else on the page, directly under the
// top bar: the training loop is gone, or nansense's own machinery failed.
import { store } from '../state/app';
import { useSelector } from '../state/store';

export function Banners() {
  const status = useSelector(store, (s) => s.status);
  if (!status) return null;
  const where = status.live_position?.text ?? status.snapshot_position?.text ?? 'before the first batch';
  return (
    <>
      {status.state === 'lost' && (
        <div class="banner banner-red" role="alert" data-testid="lost-banner">
          Training loop exited — {status.lost_reason ?? 'no reason given'} — at {where}
        </div>
      )}
      {status.internal_errors && status.internal_errors.length > 0 && (
        <div class="banner banner-amber" role="status" data-testid="internal-errors">
          nansense disabled a part of itself: {status.internal_errors.join(' · ')}
        </div>
      )}
    </>
  );
}
