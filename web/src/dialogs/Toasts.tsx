// Transient messages, chiefly a command the server refused and why.
import { dismissToast, store } from '../state/app';
import { useSelector } from '../state/store';

export function Toasts() {
  const toasts = useSelector(store, (s) => s.toasts);
  return (
    <div class="toasts" aria-live="assertive">
      {toasts.map((t) => (
        <div key={t.id} class={`toast toast-${t.tone}`} role="alert" data-testid="toast">
          <span class="toast-text">{t.message}</span>
          <button class="icon-button" aria-label="Dismiss" onClick={() => dismissToast(t.id)}>
            ×
          </button>
        </div>
      ))}
    </div>
  );
}
